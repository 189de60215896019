"""Reports: ``index.html`` and ``results.csv`` written from result records, nothing else.

A report is a pure function of records (and optionally a baseline's records): it
never re-runs a variant or re-parses a trace. :func:`write_report` is what
``harness report``, the gate and the end of a sweep call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.plan.manifest import Gate
from harness.report import export, html
from harness.results.compare import ComparisonSet, compare_records
from harness.results.record import Record
from harness.results.storage import guarded, write_atomic

INDEX, CSV = "index.html", "results.csv"


@dataclass(frozen=True)
class ReportFiles:
    index: Path
    csv: Path
    comparison: ComparisonSet | None


def write_report(
    records: Sequence[Record],
    out_dir: str | Path,
    *,
    baseline: Sequence[Record] | None = None,
    baseline_label: str = "",
    gate: Gate | None = None,
    reference: str | None = None,
    title: str | None = None,
    timings: bool = True,
) -> ReportFiles:
    """Write ``<out_dir>/index.html`` and ``<out_dir>/results.csv``; compare with a baseline if given."""
    out_dir = Path(out_dir)
    with guarded(out_dir, "creating the report folder"):
        out_dir.mkdir(parents=True, exist_ok=True)
    gate = gate or Gate()
    comparison = compare_records(baseline, records, gate, timings=timings) if baseline is not None else None
    page = html.render(
        records,
        out_dir,
        comparison=comparison,
        gate=gate,
        baseline_label=baseline_label,
        reference=reference,
        title=title,
    )
    index = write_atomic(out_dir / INDEX, page)  # a full disk leaves the old page, never half of one
    csv = write_atomic(out_dir / CSV, export.to_csv(records, comparison.comparisons if comparison else ()))
    return ReportFiles(index, csv, comparison)


__all__ = ["CSV", "INDEX", "ReportFiles", "write_report"]
