"""harness/calibration/held_out.py: the transfer of fitted constants by a measured sharing ratio,
the re-prediction of saved programs and the scoring, on known numbers (no JAX, no traces: seconds)."""

from __future__ import annotations

import dataclasses
import gzip
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.calibration import check as calibration
from harness.calibration import held_out
from harness.calibration.cpu import CpuCalibration
from harness.metrics.hlo import parse
from harness.metrics.timeline import Constant, cpu_spec, predict
from tests.harness.fixtures import synthetic

ROOT = Path(__file__).resolve().parents[3]

PROGRAM = """HloModule tiny, is_scheduled=true

ENTRY %main (a: f32[256,256], b: f32[256,256]) -> f32[256,256] {
  %a = f32[256,256]{1,0} parameter(0)
  %b = f32[256,256]{1,0} parameter(1)
  %d = f32[256,256]{1,0} dot(f32[256,256]{1,0} %a, f32[256,256]{1,0} %b), lhs_contracting_dims={1}, \
rhs_contracting_dims={0}
  ROOT %s = f32[256,256]{1,0} add(f32[256,256]{1,0} %d, f32[256,256]{1,0} %a)
}
"""


def _held(single: dict[str, float] | None = None) -> CpuCalibration:
    """8 devices on 2 cores: each rate a tenth / a quarter of one device alone, the overhead 3x."""
    return CpuCalibration(
        2e9,
        0.5e9,
        6e-6,
        "measured: 8 devices at once",
        devices=8,
        cores=2,
        curve=((64, 0.3), (1024, 1.0)),
        collective_latency_s=2e-4,
        collective_bytes_per_s=2e8,
        single={"matmul_flops_per_s": 20e9, "copy_bytes_per_s": 2e9, "op_overhead_s": 2e-6}
        if single is None
        else single,
    )


def _fitted():  # type: ignore[no-untyped-def]
    base = cpu_spec(100e9, 20e9, 1e-6, "measured: one device", curve=((64, 0.5), (1024, 1.0)))
    fitted = {
        "peak_flops_per_s": Constant(10e9, "FLOP/s", "fitted: 9 traces 1 / slope of the matmul class", 0.3),
        "hbm_bytes_per_s": Constant(4e9, "B/s", "fitted: 9 traces 1 / slope of the memory class", 0.4),
        "op_overhead_s": Constant(1e-6, "s", "fitted: 9 traces intercept of the memory class", 0.4),
    }
    return dataclasses.replace(base, constants={**base.constants, **fitted})


def test_shared_scales_each_fitted_constant_by_the_measured_sharing() -> None:
    held = _held()
    moved = held_out.shared(_fitted(), held, "cpu-calibration-8dev.json")
    # fitted 10 GFLOP/s x (2 / 20) = 1 GFLOP/s; 4 GB/s x (0.5 / 2) = 1 GB/s; 1 us x (6 / 2) = 3 us
    assert moved.value("peak_flops_per_s") == pytest.approx(1e9)
    assert moved.value("hbm_bytes_per_s") == pytest.approx(1e9)
    assert moved.value("op_overhead_s") == pytest.approx(3e-6)
    assert held.sharing() == pytest.approx({"peak_flops_per_s": 0.1, "hbm_bytes_per_s": 0.25, "op_overhead_s": 3.0})
    source = moved.constants["peak_flops_per_s"].source
    assert source.startswith("fitted: 9 traces 1 / slope of the matmul class; x 0.1, its 8-devices-at-once")
    assert "measured on 2 cores (cpu-calibration-8dev.json)" in source
    assert moved.constants["op_overhead_s"].uncertainty == 0.4  # the fit's, carried
    # everything else is the held-out spec's: its curve, collective constants and 8 devices
    target = held.spec()
    for name in ("collective_latency_s", "link_bytes_per_s", "matmul_eff_n64", "matmul_eff_n1024"):
        assert moved.constants[name] == target.constants[name]
    assert moved.value("matmul_eff_n64") == 0.3 and moved.value("link_bytes_per_s") == 2e8
    assert moved.topology == target.topology and len(moved.topology.device_coords) == 8
    assert moved.name == "cpu+fit x sharing(8)"


def test_a_traced_ratio_replaces_the_micro_benchmark_ones() -> None:
    """A ratio the calibration traces measured (0.2): every rate x 0.2, the overhead / 0.2, the source says so."""
    moved = held_out.shared(_fitted(), _held(), "8dev.json", (0.2, "measured on 3 traced program(s)"))
    assert moved.value("peak_flops_per_s") == pytest.approx(2e9)
    assert moved.value("hbm_bytes_per_s") == pytest.approx(0.8e9)
    assert moved.value("op_overhead_s") == pytest.approx(5e-6)
    assert moved.constants["hbm_bytes_per_s"].source.endswith(
        "; x 0.2, measured on 3 traced program(s) (8 devices on 2 cores)"
    )


def test_a_one_device_calibration_keeps_the_fitted_speeds() -> None:
    """One device has the cores to itself: ratio 1, no one-device values needed, the sources as fitted."""
    one = CpuCalibration(20e9, 2e9, 2e-6, "measured: one device", devices=1, cores=2)
    moved = held_out.shared(_fitted(), one, "cpu-calibration-1dev.json")
    assert one.sharing() == {"peak_flops_per_s": 1.0, "hbm_bytes_per_s": 1.0, "op_overhead_s": 1.0}
    assert moved.value("peak_flops_per_s") == 10e9 and moved.value("op_overhead_s") == 1e-6
    assert moved.constants["hbm_bytes_per_s"].source == "fitted: 9 traces 1 / slope of the memory class"
    assert len(moved.topology.device_coords) == 1


def test_shared_refuses_a_calibration_without_one_device_values() -> None:
    with pytest.raises(held_out.InputError, match=r"8dev.json: no one-device value single.copy_bytes_per_s"):
        held_out.shared(_fitted(), _held({"matmul_flops_per_s": 20e9}), "8dev.json")


def test_score_two_points() -> None:
    pts = [
        calibration.Point("a", "denoise_step", 8, 2.0, 1.0, True),  # 2x pessimistic
        calibration.Point("b", "denoise_step", 8, 1.0, 1.5, True),  # 1.5x optimistic
        calibration.Point("c", "denoise_step", 8, 100.0, 1.0, False),  # not gated: in no score
    ]
    s = held_out.score(pts)
    assert s.n == 2 and s.over == 1
    assert s.median_abs_log == pytest.approx((math.log(2.0) + math.log(1.5)) / 2)  # the median of two
    assert s.worst_factor == pytest.approx(2.0) and s.median_factor == pytest.approx(math.sqrt(3.0))
    assert math.isnan(s.spearman)  # two points rank nothing
    assert held_out.score([pts[2]]) is None


def _stage(step_s: float, measured: float, host_loop: bool, variant: str) -> dict:
    pred = synthetic.predicted(step_s, calls=4, host_loop=host_loop)
    pred["program"] = f"reports/elsewhere/traces/{variant}/denoise_step/program.hlo.gz"
    pred["calibration"] = {"devices": 8}
    return {"status": "ok", "measured": {"samples_s": [measured, measured * 2, measured / 2]}, "predicted": pred}


def test_rescore_repredicts_saved_programs_and_scores_as_calibration_points(tmp_path: Path) -> None:
    for variant in ("a", "loop"):
        where = tmp_path / "traces" / variant / "denoise_step"
        where.mkdir(parents=True)
        with gzip.open(where / "program.hlo.gz", "wt") as f:
            f.write(PROGRAM)
    base = cpu_spec(10e9, 5e9, 2e-6, "measured: test", devices=8)
    fitted = base.scaled("peak_flops_per_s", 0.5)
    step = predict(parse(PROGRAM), base).step_ns / 1e9
    slower = predict(parse(PROGRAM), fitted).step_ns / 1e9
    assert slower > step > 0
    target = {"platform": "cpu", "mode": "auto", "mesh": {"data": 8}, "topology": None, "devices": 8}
    target["mode_used"] = "measure"
    records = synthetic.records(
        [
            synthetic.minimal("a", {"denoise_step": _stage(step * 1.01, step / 2, False, "a")}, target=target),
            synthetic.minimal("loop", {"denoise_step": _stage(step, step * 4 * 3, True, "loop")}, target=target),
        ]
    )
    out = held_out.rescore("held out", records, tmp_path, base, fitted)
    assert out.reproduction == pytest.approx(1 - 1 / 1.01)  # the recorded step of "a" was 1% off
    by = {p.variant: p for p in out.base}
    assert by["a"].predicted_s == pytest.approx(step) and by["a"].ratio == pytest.approx(2.0)
    assert by["loop"].host_loop and by["loop"].predicted_s == pytest.approx(step * 4)  # 4 program calls
    assert by["loop"].ratio == pytest.approx(1 / 3)
    assert out.recorded == {("a", "denoise_step"): pytest.approx(step * 1.01), ("loop", "denoise_step"): step * 4}
    assert [p.predicted_s for p in out.fitted] == pytest.approx([slower, slower * 4])
    s = held_out.score(out.base)
    assert s.n == 2 and s.worst_factor == pytest.approx(3.0)
    assert s.median_abs_log == pytest.approx((math.log(2) + math.log(3)) / 2)


def test_missing_input_exits_2_naming_the_file(tmp_path: Path) -> None:
    """The driver, run as users run it."""
    missing = tmp_path / "nothing" / "results.jsonl"
    argv = ["--calibration", str(missing), "--held-out", str(missing), "--out", str(tmp_path / "r.md")]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "calibrate_held_out.py"), *argv],
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and f"{missing}: no such results file" in run.stderr, run.stderr
    assert not (tmp_path / "r.md").exists()
