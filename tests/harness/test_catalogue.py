"""The catalogue: every metric records flatten to is in it, its entries are consistent, and the tolerance keys
the manifest checks are the ones the gate looks up."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness import catalogue
from harness.catalogue import METRICS, family, split_tolerance_key, tolerance_names
from harness.results.compare import flatten_record, tolerance_keys

_spec = importlib.util.spec_from_file_location("synthetic", Path(__file__).parent / "fixtures" / "synthetic.py")
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)


def test_every_recorded_metric_is_in_the_vocabulary() -> None:
    records = synthetic.records(synthetic.load("sweep_cpu8.jsonl") + synthetic.load("rerun_cpu8.jsonl"))
    seen = {metric for r in records for _, metric in flatten_record(r)}
    assert len(seen) >= 20  # static, measured and trace metrics of a real CPU sweep
    known = {m.name for m in METRICS}
    assert {catalogue.template(m) for m in seen} <= known, sorted(seen - known)
    assert {family(m) for m in seen} == {"measured", "static", "trace"}


def test_every_key_the_gate_looks_up_is_accepted() -> None:
    for m in METRICS:
        for metric in (m.name,):
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


def test_entries_are_unique_and_described() -> None:
    assert len(catalogue.NAMES) == len(METRICS) >= 40
    for m in METRICS:
        assert m.label and m.definition and m.better in ("lower", "higher", ""), m.name
        assert catalogue.get(m.name) is m and family(m.name) == m.family
    # what the gate needs of each: timings and compile times gate only with --timings on
    assert [m.name for m in METRICS if m.kind == "timing"] == ["time", "compile.cold_s", "compile.warm_s"]
    assert catalogue.get("collectives.some-new-kind.count").rule == "exact"
    assert catalogue.get("nothing.like.it").rule == "info"
    assert catalogue.rank("time") == 0 < catalogue.rank("memory.peak_bytes") < catalogue.rank("nothing.like.it")


def test_an_entry_whose_kind_and_rule_disagree_is_refused() -> None:
    with pytest.raises(ValueError, match="does not go with"):
        catalogue.Metric("x", "static", "s", "info", "exact", "x", "x")
    with pytest.raises(ValueError, match="unknown"):
        catalogue.Metric("x", "derived", "s", "info", "info", "x", "x")
