"""Predicted against measured: the statistics (Spearman, median |ln ratio|) and which records are points."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness import agreement
from harness.calibration import check as calibration
from harness.report.predicted import calibration_section
from harness.results.store import load_records
from tests.harness.fixtures import synthetic


def test_spearman_ranks() -> None:
    assert agreement.spearman([1, 2, 3, 4], [10, 20, 30, 400]) == pytest.approx(1.0)  # monotone, not linear
    assert agreement.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # one swapped pair of 4: 1 - 6 * (1 + 1) / (4 * 15) = 0.8
    assert agreement.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert agreement.spearman([1, 2, 3], [1, 1, 2]) == pytest.approx(math.sqrt(3) / 2)  # ties share their mean rank
    assert math.isnan(agreement.spearman([1, 2], [1, 2])) and math.isnan(agreement.spearman([1, 2, 3], [5, 5, 5]))
    with pytest.raises(ValueError, match="3 x values but 2"):
        agreement.spearman([1, 2, 3], [1, 2])


def test_median_abs_log_ratio() -> None:
    assert agreement.median_abs_log_ratio([1.5, 1.0, 0.5], [1.0, 1.0, 1.0]) == pytest.approx(math.log(1.5))
    assert agreement.median_abs_log_ratio([2.0, 0.5], [1.0, 1.0]) == pytest.approx(math.log(2))  # either way alike
    with pytest.raises(ValueError, match="positive"):
        agreement.median_abs_log_ratio([0.0], [1.0])


def _record(
    name: str,
    devices: int,
    predicted: float | None,
    measured: list[float],
    host_loop: bool = False,
    status: str = "ok",
    calibrated: int | None = None,
) -> dict:
    stage = {"measured": {"samples_s": measured}, "status": status}
    if predicted is not None:
        stage["predicted"] = synthetic.predicted(predicted, host_loop=host_loop)
        if calibrated is not None:
            stage["predicted"]["calibration"] = {"devices": calibrated}
    return synthetic.minimal(
        name,
        {"denoise_step": stage},
        target={
            "platform": "cpu",
            "mode": "auto",
            "mesh": {"data": devices},
            "topology": None,
            "devices": devices,
            "mode_used": "measure",
        },
    )


def test_points_and_summary() -> None:
    records = synthetic.records(
        [
            _record("a", 1, 0.010, [0.008, 0.009, 0.010]),  # 0.010 / 0.009
            _record("b", 1, 0.200, [0.100]),  # 2x
            _record("c", 1, 0.003, [0.002]),  # 1.5x
            _record("eight", 8, 0.001, [0.050]),  # shown, not scored: its spec did not model 8 devices
            _record("shared", 8, 0.040, [0.050], calibrated=8),  # measured with 8 devices sharing the cores
            _record("loop", 1, 0.001, [0.009], host_loop=True),  # a host loop: its 8 program calls, 0.008
            _record("none", 1, None, [0.009]),  # nothing predicted
            _record("failed", 1, 0.001, [0.009], status="failed"),
        ]
    )
    pts = calibration.points(records)
    assert [(p.variant, p.gated) for p in pts] == [
        ("a", True),
        ("b", True),
        ("c", True),
        ("eight", False),
        ("shared", True),
        ("loop", True),
    ]
    assert pts[0].measured_s == pytest.approx(0.009) and pts[1].ratio == pytest.approx(2.0)
    loop = pts[-1]  # one call of the host loop runs the video's 8 program calls (synthetic.predicted's calls)
    assert loop.host_loop and loop.predicted_s == pytest.approx(0.008) and loop.ratio == pytest.approx(0.008 / 0.009)
    s = calibration.summarize([p for p in pts if p.variant not in ("shared", "loop")])
    assert s is not None and s.n == 3
    assert s.spearman == pytest.approx(1.0)  # same order: c < a < b on both sides
    assert s.median_abs_log_ratio == pytest.approx(math.log(1.5)) and s.met  # exactly at the target
    assert s.worst_abs_log_ratio == pytest.approx(math.log(2.0)) and s.worst_factor == pytest.approx(2.0)
    # the documented bars, each alone: Spearman 0.9, median 1.5x, worst 3x
    assert calibration.TARGET_SPEARMAN == 0.9 and calibration.TARGET_WORST_LOG_RATIO == pytest.approx(math.log(3))
    assert not calibration.Summary(3, 0.85, 0.1, 0.2).met  # met the old 0.8 bar, not the documented one
    assert not calibration.Summary(3, 1.0, 0.1, math.log(3.5)).met  # one program off by 3.5x
    assert calibration.Summary(3, 0.9, math.log(1.5), math.log(3)).met
    assert calibration.summarize([p for p in pts if not p.gated]) is None
    assert calibration.summarize(pts).n == 5
    text = calibration_section(records)
    assert "5 programs whose devices the spec models: Spearman" in text
    assert text.count("<circle") == 6 and "shown only" in text and "denoise_step (host loop)" in text


def test_a_missed_target_says_so() -> None:
    records = synthetic.records(
        [_record("a", 1, 0.03, [0.01]), _record("b", 1, 0.02, [0.02]), _record("c", 1, 0.01, [0.03])]
    )
    s = calibration.summarize(calibration.points(records))
    assert s is not None and s.spearman == pytest.approx(-1.0) and not s.met
    assert "misses the target" in calibration_section(records)


@pytest.mark.slow  # five variants compiled, predicted and timed on one CPU device: ~4 min on 2 cores
@pytest.mark.usefixtures("optimised_workers")  # it times the programs against their prediction
def test_the_simulator_ranks_and_sizes_cpu_programs(tmp_path: Path) -> None:
    """benchmarks/timeline_calibration.py end to end: experiments/calibration-cpu.toml run, every single-device
    program predicted from constants measured in the same sweep, scored against its measured time. It misses
    the median bar on the 2-core Intel VM, an open finding: benchmarks/results/cpu-calibration-intel-2026-11-29.md."""
    from benchmarks import timeline_calibration as bench

    out = tmp_path / "calibration.md"
    bench.main(["--reports", str(tmp_path / "reports"), "--out", str(out)])
    records = load_records(tmp_path / "reports" / "timeline-calibration" / "results.jsonl")
    pts = calibration.points(records)
    assert {(p.variant, p.stage) for p in pts} >= {
        ("replicated", "denoise_step"),
        ("medium", "denoise_step"),
        ("pipeline", "video_decode"),
        ("pipeline", "upsample"),
    }
    s = calibration.summarize(pts)
    assert s is not None and s.n == len(pts) == 9
    assert s.spearman >= calibration.TARGET_SPEARMAN, out.read_text()
    assert s.median_abs_log_ratio <= calibration.TARGET_LOG_RATIO, out.read_text()
