"""harness.results.compare: flattening recorded results into metrics, tolerances and per-metric verdicts."""

from __future__ import annotations

import copy

import pytest

from harness import catalogue
from harness.plan.manifest import Gate
from harness.results import compare, stats
from tests.harness.fixtures import synthetic


@pytest.fixture(scope="module")
def recorded():
    return synthetic.load("sweep_cpu8.jsonl")


def by_name(records, name):
    return next(r for r in synthetic.records(records) if r.variant.name == name)


def compare_records(base, head, *args, **kwargs):
    """compare_records on runs given as JSON objects the tests can edit."""
    return compare.compare_records(synthetic.records(base), synthetic.records(head), *args, **kwargs)


def test_flatten_record_reads_every_family(recorded):
    m = compare.flatten_record(by_name(recorded, "trillium-loop"))
    time = m[("denoise_step", "time")]
    assert len(time.samples) == 12 and time.value == stats.median(time.samples)
    assert m[("denoise_step", "collectives.all-gather.count")].value == 38
    assert m[("denoise_step", "collectives.all-gather.bytes")].value == 5440
    assert m[("denoise_step", "collectives.total.count")].value == 213
    assert ("denoise_step", "collectives.reduce-scatter.count") not in m  # zero kinds are implied
    assert m[("denoise_step", "memory.bound_bytes")].value == 314120
    assert m[("denoise_step", "cost.flops")].value == 491890
    assert m[("denoise_step", "recompiles")].value == 0
    assert 0.5 < m[("denoise_step", "trace.wasted_fraction")].value <= 1.0
    assert m[("denoise_step", "compile_s")].value > 0


def test_failed_variant_has_no_metrics(recorded):
    assert compare.flatten_record(by_name(recorded, "broken")) == {}


@pytest.mark.parametrize(
    ("metric", "kind", "unit", "tolerance"),
    [
        ("time", "timing", "s", 0.0),
        ("recompiles", "monotonic", "count", 0.0),
        ("collectives.all-gather.count", "exact", "count", 0.0),
        ("collectives.total.bytes", "relative", "bytes", 0.0),
        ("memory.bound_bytes", "relative", "bytes", 0.02),
        ("memory.alias_bytes", "info", "bytes", 0.0),
        ("cost.flops", "relative", "flops", 0.01),
        ("compile_s", "info", "s", 0.0),
        ("trace.wasted_fraction", "info", "fraction", 0.0),
    ],
)
def test_catalog(metric, kind, unit, tolerance):
    spec = catalogue.get(metric)
    assert (spec.rule, spec.unit, spec.tolerance) == (kind, unit, tolerance)


def test_tolerance_keys_accept_the_manifest_spellings():
    gate = Gate(
        tolerances={
            "static.collectives.bytes": 0.01,
            "static.memory": 0.05,
            "memory.temp_bytes": 0.5,
            "denoise_step.static.memory": 0.1,
        }
    )
    assert compare.tolerance_for(gate, "denoise_step", "collectives.all-gather.bytes") == 0.01
    assert compare.tolerance_for(gate, "denoise_step", "collectives.all-gather.count") == 0.0  # catalog default
    assert compare.tolerance_for(gate, "text_encode", "memory.peak_bytes") == 0.05
    assert compare.tolerance_for(gate, "text_encode", "memory.temp_bytes") == 0.5
    assert compare.tolerance_for(gate, "denoise_step", "memory.temp_bytes") == 0.1  # stage-qualified wins
    assert compare.tolerance_for(Gate(), "denoise_step", "cost.flops") == 0.01


def test_identical_records_are_unchanged(recorded):
    ok = [r for r in recorded if r["status"] == "ok"]
    result = compare_records(ok, ok)
    assert result.comparisons and {c.verdict for c in result.comparisons} == {stats.UNCHANGED}
    assert not result.regressions and not result.failed_now and not result.changed_settings


def test_extra_collectives_regress_counts_and_bytes():
    base = synthetic.synthetic_run(1)
    head = synthetic.synthetic_run(
        2,
        extra={("trillium-loop", "denoise_step"): {"all-gather": 1}, ("naive", "denoise_step"): {"reduce-scatter": 2}},
    )
    result = compare_records(base, head)
    failed = {(c.variant, c.metric): c for c in result.regressions}
    assert set(failed) == {
        ("trillium-loop", "collectives.all-gather.count"),
        ("trillium-loop", "collectives.all-gather.bytes"),
        ("trillium-loop", "collectives.total.count"),
        ("trillium-loop", "collectives.total.bytes"),
        ("naive", "collectives.reduce-scatter.count"),
        ("naive", "collectives.reduce-scatter.bytes"),
        ("naive", "collectives.total.count"),
        ("naive", "collectives.total.bytes"),
    }
    ag = failed[("trillium-loop", "collectives.all-gather.count")]
    assert (ag.baseline, ag.now, ag.delta) == (38, 39, 1) and ag.detail == "must match exactly"
    rs = failed[("naive", "collectives.reduce-scatter.count")]
    assert (rs.baseline, rs.now) == (0, 2) and rs.ratio == float("inf")  # absent kind counts as zero


def test_single_measurements_are_never_more_than_noise(recorded):
    ok = [r for r in recorded if r["status"] == "ok"]
    slow = copy.deepcopy(ok)
    slow[0]["stages"]["denoise_step"]["static"]["timing"]["compile_seconds"] *= 2
    c = next(c for c in compare_records(ok, slow).comparisons if c.metric == "compile_s")
    assert c.verdict == stats.NOISE and not c.gated and "no significance test" in c.detail


def test_unmatched_failed_and_changed_variants_are_reported(recorded):
    ok = [r for r in recorded if r["status"] == "ok"]
    head = copy.deepcopy(recorded[1:])  # drops "replicated", keeps "broken"
    head[0]["variant"]["id"] = "0123456789ab"
    result = compare_records(ok, head)
    assert result.only_in_baseline == ["replicated"]
    assert result.only_in_now == ["broken"]
    assert "test workload raised on purpose" in result.failed_now["broken"]
    assert result.changed_settings == {"naive": (recorded[1]["variant"]["id"], "0123456789ab")}


def test_missing_metric_is_flagged(recorded):
    ok = [r for r in recorded if r["status"] == "ok"]
    head = copy.deepcopy(ok)
    head[0]["stages"]["denoise_step"]["static"]["memory"] = None
    missing = [c for c in compare_records(ok, head).comparisons if c.verdict == compare.MISSING]
    assert {c.metric for c in missing} >= {"memory.bound_bytes", "memory.peak_bytes"}
    assert all(c.variant == "replicated" and c.now is None and c.delta is None for c in missing)


def test_timings_can_be_left_ungated():
    base, head = synthetic.synthetic_run(1), synthetic.synthetic_run(2, slowdown={("naive", "denoise_step"): 1.5})
    c = next(
        c for c in compare_records(base, head, timings=False).comparisons if c.variant == "naive" and c.metric == "time"
    )
    assert c.verdict == stats.REGRESSED and not c.gated and not c.failed
    assert "not gated (different machine)" in c.detail
