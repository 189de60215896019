"""The metric reference: every metric of the catalogue (:data:`harness.catalogue.METRICS`), its
family, unit, kind, how the gate compares it and its definition, all from its one entry there."""

from __future__ import annotations

from harness.catalogue import METRICS, Metric
from harness.docgen.md import code, page, table


def _rule(spec: Metric) -> str:
    if not spec.gated:
        return "shown, never gated"
    if spec.rule == "timing":
        return "ratio of medians beyond [gate] timing_ratio and a significant Mann-Whitney test"
    if spec.rule == "monotonic":
        return "any increase regresses"
    when = (" with --timings on" if spec.kind == "timing" else "") + (" when present" if spec.optional else "")
    if spec.family == "predicted":
        when += " where both sides were priced by the same fixed model; another model exits 3 (gates page)"
    if spec.rule == "exact" or not spec.tolerance:
        return f"must equal the baseline (or within [gate.tolerances]){when}"
    return f"relative change beyond {spec.tolerance:g} (or [gate.tolerances]){when}"


def rows() -> list[list[str]]:
    return [[code(m.name), m.family, m.unit, m.kind, _rule(m), m.definition] for m in METRICS]


def render() -> str:
    intro = (
        "Each stage of a record flattens to these metric names (`collectives.<kind>.*` for every collective "
        "kind; `scope.<scope>.*` per model scope). Kind: `deterministic` (a function of the compiled program and "
        "the spec), `timing` (measured on "
        "this machine: gated only against the same kind of machine) or `info` (shown only). "
        "`predicted.*` metrics are model outputs, labelled predicted wherever shown."
    )
    return page(
        "Metrics",
        "harness/catalogue/entries.py",
        intro,
        table(["metric", "family", "unit", "kind", "how it is gated", "definition"], rows()),
        wide=True,
    )
