"""The predicted family in the worker: a compiled stage's step simulated from its HLO, with its Chrome JSON
on disk; a compile-cache hit still predicts (the cache keeps the HLO); a prediction that fails is a note;
the CPU constants are measured once and read back from the sweep's folder."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from harness.calibration import cpu as cpu_calibrate
from harness.families import Memory, Static
from harness.plan.manifest import Run, Target, Workload
from harness.run.compile_cache import CompileCache, cache_key
from harness.run.spec import WorkerSpec
from harness.run.worker import predicted_metrics, run_spec, static_metrics

WL = {"height": 64, "width": 64, "num_frames": 9, "frame_rate": 24.0, "batch": 2, "steps": 2, "text_tokens": 16}


def _hlo() -> str:
    """A small compiled program with a loop: four (64 x 64) matmuls in a fori_loop, then a reduction."""

    def f(x: jax.Array) -> jax.Array:
        return jax.lax.fori_loop(0, 4, lambda _, y: jnp.tanh(y @ y), x).sum()

    return jax.jit(f).lower(jnp.ones((64, 64), jnp.float32)).compile().as_text()


class _CompiledStage:
    """A stage whose compile is counted and leaves a real (CPU-compiled) HLO text, as JaxStage does."""

    name, uses_jax, calls_per_video, notes = "denoise_step", True, 4, []

    def __init__(self, hlo: str) -> None:
        self.compiles, self._hlo, self.hlo_text = 0, hlo, None

    def static(self) -> Static:
        self.compiles += 1
        self.hlo_text = self._hlo
        return Static(platform="tpu", memory=Memory(peak_bytes=10))

    def prepare(self) -> None: ...

    def run(self) -> None: ...


def _tpu_spec(tmp_path: Path) -> WorkerSpec:
    return WorkerSpec(
        variant_name="v",
        variant_id="v",
        preset="small",
        config_overrides={"transformer.sharding": "trillium"},
        target=Target("tpu", "auto", (("fsdp", 2), ("tensor", 4)), "v6e:2x4", 8),
        mode="compile",
        workload=Workload(height=64, stages=("denoise_step",)),
        run=Run(),
        trace_dir=str(tmp_path / "traces" / "v"),
        cache_dir=str(tmp_path / "cache"),
    )


def test_compile_cache_hit_still_predicts(tmp_path: Path) -> None:
    hlo, spec = _hlo(), _tpu_spec(tmp_path)
    first_stage, notes = _CompiledStage(hlo), []
    static_metrics("denoise_step", first_stage, spec, notes)
    first = predicted_metrics("denoise_step", first_stage, spec, notes)
    assert first_stage.compiles == 1 and first is not None, notes
    assert CompileCache(spec.cache_dir or "").get_hlo(cache_key(spec, "denoise_step")) == hlo
    again = _CompiledStage(hlo)
    static_metrics("denoise_step", again, spec, notes)
    second = predicted_metrics("denoise_step", again, spec, notes)
    assert again.compiles == 0 and any("compile cache" in n for n in notes)  # a hit: not compiled ...
    assert second is not None and second["step_s"] == pytest.approx(first["step_s"], rel=1e-12)  # ... still predicted
    assert second["spec"]["name"] == "v6e:2x4" and second["video_s"] == pytest.approx(4 * second["step_s"])
    assert "calibration" not in second  # TPU constants come from the spec table, not from this CPU


def test_a_failed_prediction_is_a_note(tmp_path: Path) -> None:
    stage, notes = _CompiledStage("not HLO at all"), []
    stage.hlo_text = "HloModule broken\n\nENTRY %main { garbage }"
    assert predicted_metrics("denoise_step", stage, _tpu_spec(tmp_path), notes) is None
    assert len(notes) == 1 and notes[0].startswith("predicted: not simulated ("), notes


def test_cpu_constants_are_measured_once_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "cpu-calibration.json"
    calls: list[int] = []
    fixed = cpu_calibrate.CpuCalibration(4e10, 2e9, 2e-6, "test: fixed numbers", curve=((64, 0.25), (1024, 1.0)))
    monkeypatch.setattr(cpu_calibrate, "measure", lambda devices=1: calls.append(devices) or fixed)
    assert cpu_calibrate.load_or_measure(path) == (fixed, True)
    assert cpu_calibrate.load_or_measure(path) == (fixed, False) and calls == [1]
    path.write_text('{"matmul_flops_per_s": -1}')  # unreadable: measured again and replaced
    assert cpu_calibrate.load_or_measure(path) == (fixed, True) and calls == [1, 1]
    assert json.loads(path.read_text())["source"] == "test: fixed numbers"
    assert cpu_calibrate.load_or_measure(path, devices=8)[1] and calls == [1, 1, 8]  # another device count
    assert fixed.spec().value("matmul_eff_n64") == 0.25
    with pytest.raises(ValueError, match="must be positive"):
        cpu_calibrate.CpuCalibration.from_dict({**fixed.to_dict(), "op_overhead_s": 0.0}, "x.json")


def test_worker_predicts_a_cpu_stage(tmp_path: Path) -> None:
    """The tiny denoise step on a one-device mesh: a predicted entry with the trace's accounting, the
    measured CPU constants, per-video time, sensitivity, and a Chrome JSON file Perfetto can read."""
    spec = WorkerSpec(
        variant_name="t",
        variant_id="t",
        preset="tiny",
        config_overrides={"transformer.sharding": "replicated"},
        target=Target("cpu", "measure", (("data", 1),), None, 1),
        mode="measure",
        workload=Workload(**WL, stages=("denoise_step",)),
        run=Run(repeats=2, warmup=1, timeout_s=600.0, metrics=("static", "measured")),
        trace_dir=str(tmp_path / "traces" / "t"),
    )
    assert run_spec(spec, tmp_path / "out.json") == 0
    entry = json.loads((tmp_path / "out.json").read_text())["stages"]["denoise_step"]
    p = entry["predicted"]
    assert p is not None, entry["notes"]
    assert p["step_s"] > 0 and p["video_s"] == pytest.approx(p["step_s"] * 2) and p["calls_per_video"] == 2
    assert p["host_loop"] is False and p["spec"]["name"] == "cpu"
    device = p["device"]
    assert {
        "window_ns",
        "compute_ns",
        "collective_ns_by_kind",
        "exposed_collective_ns",
        "idle_ns",
        "wasted_fraction",
        "exposed_ns_by_kind",
    } <= set(device)
    assert device["window_ns"] == pytest.approx(p["step_s"] * 1e9, rel=1e-6)
    assert p["calibration"]["matmul_flops_per_s"] > 1e8 and (tmp_path / "traces" / "cpu-calibration-1dev.json").exists()
    assert p["sensitivity"]["most"] in p["spec"]["constants"]
    assert p["block_gantt"] and {e["lane"] for e in p["block_gantt"]} == {"compute"}  # one device: no collectives
    chrome = Path(p["chrome_trace"])
    assert chrome == tmp_path / "traces" / "t" / "denoise_step" / "predicted_trace.json.gz"
    events = json.loads(gzip.decompress(chrome.read_bytes()))["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and max(e["ts"] + e["dur"] for e in spans) == pytest.approx(p["step_s"] * 1e6, rel=1e-6)
    assert entry["phases_s"]["predict"] > 0
    xplane = Path(p["xplane"])
    assert xplane == tmp_path / "traces" / "t" / "denoise_step" / "plugins/profile/predicted/predicted.xplane.pb"
    assert xplane.stat().st_size > 0
    xprof = p["xprof"]  # XProf's op-profile numbers: one device, no all-gather
    assert xprof["all_gather_wasted_fraction"] == 0.0 and xprof["root"]["time_fraction"] == pytest.approx(1.0)
    assert sum(c["time_fraction"] for c in xprof["categories"].values()) == pytest.approx(1.0)


def test_test_presets_have_no_prediction(tmp_path: Path) -> None:
    spec = WorkerSpec(
        variant_name="t",
        variant_id="t",
        preset="test:ok",
        config_overrides={},
        target=Target("cpu", "measure", (("data", 1),), None, 1),
        mode="measure",
        workload=Workload(**WL, stages=("denoise_step",)),
        run=dataclasses.replace(Run(), repeats=1),
        trace_dir=str(tmp_path / "t"),
    )
    assert run_spec(spec, tmp_path / "out.json") == 0
    entry = json.loads((tmp_path / "out.json").read_text())["stages"]["denoise_step"]
    assert entry["predicted"] is None and "predict" not in entry["phases_s"]
