"""The step table's row (:func:`harness.report.export.step_row`): one row per record, per step for a
scanned loop, a re-prediction replacing the record's step, interval and traffic."""

from __future__ import annotations

from harness.report.export import step_row
from harness.results.record import Record
from tests.harness.fixtures import synthetic


def _record(name: str, stage: str) -> Record:
    static = {
        "matmul_flops": 80e12,
        "memory_traffic_bytes": 400e9,
        "memory": {"peak_bytes": 2 * 2**30},
        "collectives": {"by_kind": {"all-gather": {"operand_bytes": 4e9}, "all-reduce": {"operand_bytes": 8e9}}},
    }
    predicted = {"step_s": 4.0, "uncertainty": {"interval_s": [3.0, 6.0]}}
    raw = synthetic.minimal(name, {stage: {"static": static, "predicted": predicted}})
    raw["config"]["workload"] = {"steps": 40}
    return Record.from_dict(raw)


def test_a_scanned_loop_reads_per_step_and_a_step_as_it_is() -> None:
    assert (
        step_row(_record("x-loop", "denoise_loop"))
        == "| x-loop | 100.0 [75.0-150.0] | 2.0 | 10.0 | 0.1 / 0.2 / 0.0 | 2.0 |"
    )
    assert (
        step_row(_record("x", "denoise_step"))
        == "| x | 4000.0 [3000.0-6000.0] | 80.0 | 400.0 | 4.0 / 8.0 / 0.0 | 2.0 |"
    )
    # a loop variant with a suffix is still a loop; a guided loop (no "-loop") reads per video
    assert step_row(_record("x-loop-async", "denoise_loop")).startswith("| x-loop-async | 100.0 [75.0-150.0] |")
    assert step_row(_record("x-guided", "denoise_loop")).startswith("| x-guided | 4000.0 [3000.0-6000.0] |")


def test_a_reprediction_replaces_step_interval_and_traffic() -> None:
    new = {"new_ms": 2000.0, "interval_ms": [1800.0, 2500.0], "new_traffic_gb": 300.0}
    assert step_row(_record("x", "denoise_step"), new) == (
        "| x | 2000.0 [1800.0-2500.0] | 80.0 | 300.0 | 4.0 / 8.0 / 0.0 | 2.0 |"
    )
