"""The model's stages through the worker: each compiled and run at `tiny` on 8 simulated devices (static
metrics, zero recompiles and host transfers while timed, a trace)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.plan.manifest import Run, Target, Workload
from harness.run.spec import WorkerSpec
from harness.run.worker import run_spec

# 64x64 px, 65 frames -> 9x2x2 = 36 video tokens; the tiny audio VAE gives 68 latent frames at
# 24 fps: both divide the 4-way sequence split of `context` (context x fsdp).
WL = {"height": 64, "width": 64, "num_frames": 65, "frame_rate": 24.0, "batch": 2, "steps": 2, "text_tokens": 16}
MESH = {"fsdp": 2, "context": 2, "tensor": 2}


def tiny_spec(tmp_path: Path, stages: list[str], overrides: dict[str, Any], **run: Any) -> WorkerSpec:
    """A worker spec for the tiny preset on an fsdp 2 x context 2 x tensor 2 mesh of 8 CPU devices."""
    return WorkerSpec(
        variant_name="t",
        variant_id="t",
        preset="tiny",
        config_overrides=overrides,
        target=Target("cpu", "measure", tuple(MESH.items()), None, 8),
        mode="measure",
        workload=Workload(**WL, stages=tuple(stages)),
        run=Run(**{"repeats": 2, "warmup": 1, "timeout_s": 600.0, "metrics": ("static", "measured"), **run}),
        trace_dir=str(tmp_path / "traces"),
        status_path=str(tmp_path / "status.json"),
    )


def _run(tmp_path: Path, stages: list[str], overrides: dict[str, Any]) -> dict[str, Any]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    rc = run_spec(tiny_spec(tmp_path, stages, overrides), tmp_path / "out.json")
    out = json.loads((tmp_path / "out.json").read_text())
    assert rc == 0, out.get("error")
    return out["stages"]


def _counts(static: dict[str, Any]) -> dict[str, int]:
    return {k: v["count"] for k, v in static["collectives"]["by_kind"].items() if v["count"]}


def test_denoise_loop_scan_and_python_compile_the_same_step(tmp_path: Path) -> None:
    """Scan: one program holding every step (collectives x trip count); python: one step's program,
    called `steps` times. Per video both move the same collectives, and neither recompiles."""
    scan = _run(tmp_path / "scan", ["denoise_loop"], {"transformer.sharding": "context"})["denoise_loop"]
    py = _run(
        tmp_path / "py", ["denoise_loop"], {"transformer.sharding": "context", "pipeline.diffusion_loop": "python"}
    )["denoise_loop"]
    for stage in (scan, py):
        assert stage["status"] == "ok", stage["error"]
        assert stage["measured"]["recompiles"]["count"] == 0
        assert stage["measured"]["transfers"]["host_to_device"] == 0
        assert stage["static"]["guidance_passes"] == {"cfg": True, "stg": True, "modality": True}
    per_step, whole = _counts(py["static"]), _counts(scan["static"])
    assert per_step.get("all-gather", 0) > 0
    assert whole["all-gather"] >= 2 * per_step["all-gather"] - 2  # both steps (+/- loop-invariant hoisting)
    assert scan["static"]["analytic_flops"] == pytest.approx(2 * py["static"]["analytic_flops"])


@pytest.mark.slow
def test_every_pipeline_stage_runs_at_tiny(tmp_path: Path) -> None:
    stages = ["text_encode", "guided_step", "denoise_loop", "video_decode", "audio_decode", "upsample"]
    out = _run(tmp_path / "a", stages, {"transformer.sharding": "context", "text_encoder.batching": "separate"})
    host = _run(tmp_path / "b", ["text_encode"], {"text_encoder.placement": "host"})
    for name, stage in {**out, "text_encode(host)": host["text_encode"]}.items():
        assert stage["status"] == "ok", (name, stage["error"])
        assert stage["measured"]["recompiles"]["count"] == 0, name
        assert stage["static"]["memory"]["bound_bytes"] > 0, name
    assert out["video_decode"]["static"]["latent_grid"] == [9, 2, 2]
    assert "connectors only" in " ".join(host["text_encode"]["notes"])


def test_worker_runs_the_tiny_transformer_in_process(tmp_path: Path) -> None:
    """The real stage path: static (collectives), measured (no recompiles), trace; a pipeline stage beside it."""
    spec = tiny_spec(
        tmp_path,
        ["denoise_step", "video_decode"],
        {"transformer.sharding": "context"},
        trace=True,
        metrics=("static", "measured", "trace"),
    )
    assert run_spec(spec, tmp_path / "out.json") == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["mode_used"] == "measure" and out["machine"]["device_count"] == 8
    assert out["config_resolved"]["transformer"]["sharding"] == "context"
    step = out["stages"]["denoise_step"]
    assert step["status"] == "ok", step["error"]
    static = step["static"]
    assert static["tokens"]["video_tokens"] == 9 * 2 * 2 and static["tokens"]["audio_tokens"] == 68
    assert static["collectives"]["by_kind"]["all-gather"]["count"] > 0
    assert static["analytic_flops"] > 0 and static["memory"]["bound_bytes"] > 0
    measured = step["measured"]
    assert measured["recompiles"]["count"] == 0 and measured["warmup_compiles"]["count"] == 0
    assert measured["transfers"]["host_to_device"] == 0 and len(measured["samples_s"]) == 2
    trace = step["trace"]
    assert len(trace["devices"]) == 8 and Path(trace["xplane"]).exists()
    decode = out["stages"]["video_decode"]
    assert decode["status"] == "ok", decode["error"]
    assert decode["static"]["latent_grid"] == [9, 2, 2] and decode["measured"]["recompiles"]["count"] == 0
    assert out["status"] == "ok"


@pytest.mark.parametrize(("rules", "named"), [({}, "embed"), ({"sharding.rules.mlp_in": ["fsdp"]}, "mlp_in")])
def test_sharding_facts_name_each_kernel_by_the_rule_that_places_it(rules: dict[str, Any], named: str) -> None:
    """A collective's cause quotes the rule a user can find in the strategy's table: ff.proj_in's
    contracted dim is ``mlp_in``, placed by ``embed`` under trillium unless a manifest overrides it."""
    import jax

    from harness.model import build_config, model_workload
    from harness.run.jax_stage import sharding_facts
    from ltx2 import build_mesh, build_stage

    mesh = build_mesh({"fsdp": 2, "context": 2, "tensor": 2}, devices=jax.devices()[:8])
    cfg = build_config("tiny", {"transformer.sharding": "trillium", **rules})
    program = build_stage("denoise_step", cfg, model_workload(Workload(height=64)), mesh)
    facts = sharding_facts(program, mesh)
    assert facts is not None
    by_path = {p.path: p for p in facts.params}
    proj_in = next(p for path, p in by_path.items() if path.endswith("transformer_blocks.ff.proj_in.kernel"))
    assert proj_in.logical == ("layers", named, "mlp") and proj_in.axes[1] == ("fsdp",)


def test_every_stage_programs_extra_is_a_field_of_the_static_family(tmp_path: Path) -> None:
    """The worker fills the static family from a stage program's ``extra`` field by field
    (:meth:`harness.run.jax_stage.JaxStage.static`), so each key ltx2 writes there is declared."""
    from harness.families import Static
    from harness.run.worker import open_stages
    from ltx2 import STAGES

    stages = open_stages(tiny_spec(tmp_path, list(STAGES), {}))
    extras = {name: set(stages.build(name).program.extra) for name in STAGES}
    assert {k for keys in extras.values() for k in keys} >= {"steps", "videos", "tokens"}
    assert {name: keys - Static.names() for name, keys in extras.items() if keys - Static.names()} == {}
