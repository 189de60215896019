"""The catalogue: every metric records flatten to is in it, its entries are consistent, and the tolerance keys
the manifest checks are the ones the gate looks up."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness import catalogue
from harness.catalogue import METRICS, family, split_tolerance_key, tolerance_names
from harness.results.compare import flatten_record, tolerance_keys
from tests.harness.fixtures import synthetic


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


@pytest.mark.parametrize(
    ("name", "producer"),
    [
        ("predicted.exposed_collective_fraction", lambda p: p["device"]["exposed_collective_ns"] / (p["step_s"] * 1e9)),
        ("predicted.flops_utilization", None),  # its producer (metrics/xprof/metrics.py) wrote it before it was one
    ],
)
def test_a_new_metric_is_one_entry_and_its_producer(name: str, producer: Any) -> None:
    """Each came as its catalogue entry (and, for ``predicted.exposed_collective_fraction``, one line of
    its producer, ``Prediction.to_dict``; ``predicted.flops_utilization`` reads what the XProf op
    profile of the prediction already held): a record with it flattens to it, the gate compares it by
    its catalogue rule (a 2 % move the wrong way on the same model fails), the CSV writes it with its
    kind and unit, the page shows it with its label. Records written before read as they did."""
    import csv
    import html
    import io
    import json

    from harness.plan.manifest import Gate
    from harness.report.export import to_csv
    from harness.report.html import comparison_section
    from harness.results.compare import compare_records, flatten_record
    from harness.results.record import parse

    metric = catalogue.NAMES[name]
    assert (metric.family, metric.unit, metric.rule) == ("predicted", "fraction", "relative")
    root = Path(__file__).resolve().parents[2]
    raw = json.loads((root / "reports" / "baselines" / "nightly-tpu.jsonl").read_text().splitlines()[0])
    p = raw["stages"]["denoise_step"]["predicted"]
    if producer is not None:  # a record from before its producer wrote it
        p.pop(metric.path, None)
        assert ("denoise_step", metric.name) not in flatten_record(parse(raw, "before"))
        p[metric.path] = producer(p)  # what the producer writes
    now = parse(raw, "v6e")
    value = flatten_record(now)[("denoise_step", metric.name)].value
    assert 0.0 < value < 1.0
    (c,) = [c for c in compare_records([now], [now], Gate()).comparisons if c.metric == metric.name]
    assert (c.kind, c.unit, c.baseline, c.now, c.verdict) == (metric.rule, "fraction", value, value, "unchanged")
    node = p
    for step in metric.path.split(".")[:-1]:
        node = node[step]
    node[metric.path.split(".")[-1]] = value * (0.98 if metric.better == "higher" else 1.02)
    p["identity"]["program"] = "another program"  # a changed program, priced by the same model
    (c,) = [c for c in compare_records([now], [parse(raw, "worse")], Gate()).comparisons if c.metric == metric.name]
    assert c.verdict == "regressed" and c.gated
    rows = [r for r in csv.DictReader(io.StringIO(to_csv([now]))) if r["metric"] == metric.name]
    assert [(r["family"], r["kind"], r["rule"], r["unit"], float(r["value"])) for r in rows] == [
        ("predicted", metric.kind, metric.rule, "fraction", value)
    ]
    page = comparison_section(compare_records([now], [parse(raw, "worse")], Gate()), Gate(), "before")
    assert f'title="{html.escape(f"{metric.label}: {metric.definition}")}">{metric.name}</td>' in page


def test_dotted_metric_names_are_written_only_in_the_catalogue() -> None:
    """A metric's name is typed once: no string in the harness (docstrings aside) outside the
    catalogue spells a dotted metric name; code reads it from the catalogue's constants."""
    import ast

    root = Path(__file__).resolve().parents[2] / "harness"
    dotted = {m.name for m in METRICS if "." in m.name}
    found = []
    for path in sorted(root.rglob("*.py")):
        if "catalogue" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef) and n.body and isinstance(n.body[0], ast.Expr)
        }
        found += [
            f"{path.relative_to(root)}:{n.lineno} {n.value}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in dotted and id(n) not in docs
        ]
    assert found == []


def _field_family(tp: object) -> type | None:
    """The family a field's annotation holds (``X | None``, ``tuple[X, ...]``), None for a plain value."""
    import typing

    from harness.families import Family

    if isinstance(tp, type) and issubclass(tp, Family):
        return tp
    found = [f for a in typing.get_args(tp) if (f := _field_family(a)) is not None]
    return found[0] if found else None


def test_every_metric_path_is_a_chain_of_typed_fields() -> None:
    """A catalogued ``path`` is read as attributes of the typed family (never a key of a JSON object):
    each step names a field, every step but the last a family, the last a value; the trace's
    ``devices.<field>`` a field of each device's family."""
    import typing

    from harness import families

    roots = {"static": families.Static, "measured": families.Measured, "trace": families.Trace}
    roots["predicted"] = families.Predicted
    checked = 0
    for m in METRICS:
        if m.path is None:
            continue
        cls: type | None = roots[m.family]
        for step in m.path.split("."):
            assert cls is not None, f"{m.name}: {m.path!r} goes through a value at {step!r}"
            hints = typing.get_type_hints(cls)
            assert step in hints and step != "raw", f"{m.name}: {cls.__name__} has no field {step!r}"
            cls = _field_family(hints[step])
        assert cls is None or m.path.startswith("devices"), f"{m.name}: {m.path!r} ends at a family"
        checked += 1
    assert checked >= 30
