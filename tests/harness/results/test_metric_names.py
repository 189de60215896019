"""The metric vocabulary the manifest checks its gate tolerances against is the one records flatten to."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.results.compare import flatten_record, tolerance_keys
from harness.results.metric_names import METRICS, family, split_tolerance_key, tolerance_names

_spec = importlib.util.spec_from_file_location("synthetic", Path(__file__).parents[1] / "fixtures" / "synthetic.py")
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)


def test_every_recorded_metric_is_in_the_vocabulary() -> None:
    records = synthetic.records(synthetic.load("sweep_cpu8.jsonl") + synthetic.load("rerun_cpu8.jsonl"))
    seen = {metric for r in records for _, metric in flatten_record(r)}
    assert len(seen) >= 20  # static, measured and trace metrics of a real CPU sweep
    known = {m for names in METRICS.values() for m in names}
    assert seen <= known, sorted(seen - known)
    assert {family(m) for m in seen} == {"measured", "static", "trace"}


def test_every_key_the_gate_looks_up_is_accepted() -> None:
    for names in METRICS.values():
        for metric in names:
            for key in tolerance_keys("denoise_step", metric):
                stage, rest = split_tolerance_key(key)
                assert stage in (None, "denoise_step") and rest in tolerance_names(), key
    assert {
        "time",
        "static.memory",
        "memory",
        "collectives.count",
        "static.collectives.all-gather.count",
        "trace.wasted_fraction",
        "measured.recompiles",
    } <= tolerance_names()


@pytest.mark.parametrize(
    ("key", "hint"),
    [
        ("static.memroy", "did you mean 'static.memory'?"),
        ("collectives.al-gather.count", "did you mean 'collectives.all-gather.count'?"),
        ("trace.collectives.count", "matches no metric"),
        ("measured.memory", "matches no metric"),
        ("denoise_step.static.memroy", "did you mean"),
    ],
)
def test_keys_that_name_no_metric_are_refused(key: str, hint: str) -> None:
    with pytest.raises(ValueError, match="matches no metric") as info:
        split_tolerance_key(key)
    assert hint in str(info.value)
