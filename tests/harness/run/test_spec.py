"""The runner/worker seam: a WorkerSpec survives JSON exactly, and the run mode is decided once, by the runner."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.expansion import load_sweep
from harness.plan.manifest import Run, Target, Workload
from harness.run.runner import worker_spec
from harness.run.spec import SPEC_VERSION, WorkerSpec, resolve_mode

SPEC = WorkerSpec(
    variant_name="sharding=trillium,scan_layers=true",
    variant_id="413c5bafef4c",
    preset="small",
    config_overrides={
        "transformer.sharding": "trillium",
        "transformer.scan_layers": True,
        "pipeline.spatio_temporal_guidance_blocks": [0, 1],
        "pipeline.frame_rate": 25.0,
    },
    target=Target("tpu", "auto", (("fsdp", 2), ("context", 2), ("tensor", 2)), "v6e:2x4", 8),
    mode="compile",
    workload=Workload(256, 256, 65, 24.0, 2, 8, 128, ("denoise_step", "video_decode")),
    run=Run(repeats=10, warmup=2, timeout_s=300.0, trace=True, metrics=("static", "measured", "trace")),
    trace_dir="reports/x/traces/413c5bafef4c",
    status_path="/tmp/status.json",
    cache_dir="reports/aot-cache",
    seed=3,
)


def test_json_round_trip_is_exact() -> None:
    text = SPEC.to_json()
    back = WorkerSpec.from_json(text)
    assert back == SPEC and back.to_json() == text
    assert isinstance(back.workload.stages, tuple) and isinstance(back.run.metrics, tuple)
    assert isinstance(back.workload.frame_rate, float) and back.target.mesh == SPEC.target.mesh
    raw = json.loads(text)
    assert raw["spec_version"] == SPEC_VERSION and raw["target"]["mesh"] == [["fsdp", 2], ["context", 2], ["tensor", 2]]


def test_bad_specs_are_refused() -> None:
    with pytest.raises(ValueError, match="worker spec version 99 is not readable"):
        WorkerSpec.from_dict({**SPEC.to_dict(), "spec_version": 99})
    with pytest.raises(ValueError, match="mode='auto': must be one of"):
        dataclasses.replace(SPEC, mode="auto")
    with pytest.raises(ValueError, match="resolve the -1 axis first"):
        dataclasses.replace(SPEC, target=Target("cpu", "auto", (("data", -1),), None, 8))


def test_mode_is_resolved_once_by_the_runner(tmp_path: Path) -> None:
    assert resolve_mode(Target("cpu", "auto")) == "measure"  # the CPU is always here
    assert resolve_mode(Target("cpu", "compile")) == "compile"
    assert resolve_mode(Target("tpu", "measure", topology="v6e:2x4")) == "measure"
    assert resolve_mode(Target("cpu", "auto"), preset="test:ok") == "measure"  # test presets run
    assert resolve_mode(Target("cpu", "compile"), preset="test:ok") == "compile"  # compile-only sweep tests
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        'schema_version = 1\n[target]\nplatform = "tpu"\ntopology = "v6e:2x4"\n'
        'mesh = { fsdp = -1 }\n[model]\npreset = "test:ok"\n'
    )
    sweep = load_sweep(manifest)
    spec = worker_spec(sweep.variants[0], sweep.manifest.run, tmp_path / "traces")
    assert spec.mode == "measure" and spec.target.mesh == (("fsdp", 8),)  # -1 resolved for the worker
    assert WorkerSpec.from_json(spec.to_json()) == spec
