"""``results.csv``: one row per variant, stage and metric, for pandas users.

    import pandas as pd
    df = pd.read_csv("reports/cpu/results.csv")
    df[df.metric == "time"].pivot(index="variant", columns="stage", values="median")

Each metric row says what the metric is from its catalogue entry (``family``, ``kind``, ``rule``,
``unit``); timing rows carry the sample summary; with a baseline, rows also carry its comparison
(:data:`COMPARE_COLUMNS`). A variant or stage that failed without metrics gets one row with an empty
metric, so failures show in the table too. Text a spreadsheet would read as a formula (starting
with one of :data:`FORMULA_STARTS`: a variant named ``=HYPERLINK(...)``) is written with a leading
``'``. :func:`step_row`: a compile-only variant as one markdown row of the manifests' comment tables.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from harness import catalogue
from harness.families import Predicted, Static
from harness.results import stats
from harness.results.compare import Comparison, flatten_stage
from harness.results.record import Record

COLUMNS = (
    "sweep_id",
    "variant",
    "variant_id",
    "status",
    "stage",
    "stage_status",
    "metric",
    "family",
    "kind",
    "rule",
    "unit",
    "value",
    "n",
    "median",
    "q1",
    "q3",
    "min",
    "max",
)
COMPARE_COLUMNS = ("baseline", "delta", "ratio", "verdict", "gated")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> Any:
    """A CSV cell: empty for None, text that could start a spreadsheet formula neutralised."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def rows(records: Sequence[Record], comparisons: Sequence[Comparison] = ()) -> list[dict[str, Any]]:
    versus = {(c.variant, c.stage, c.metric): c for c in comparisons}
    out = []
    for r in records:
        base: dict[str, Any] = {
            "sweep_id": r.sweep_id,
            "variant": r.variant.name,
            "variant_id": r.variant.id,
            "status": r.status,
        }
        stages = r.stages
        if not stages:
            out.append({**base, "stage": "", "stage_status": "", "metric": "", "value": None})
        for stage, entry in stages.items():
            metrics = flatten_stage(entry)
            if not metrics:  # a failed stage: keep it visible
                out.append({**base, "stage": stage, "stage_status": entry.verdict, "metric": "", "value": None})
            for metric, mv in metrics.items():
                spec = catalogue.get(metric)
                row = {**base, "stage": stage, "stage_status": entry.verdict, "metric": metric, "value": mv.value}
                row |= {k: getattr(spec, k) for k in ("family", "kind", "rule", "unit")}
                if mv.samples:
                    s = stats.spread(mv.samples)
                    row.update(n=s.n, median=s.median, q1=s.q1, q3=s.q3, min=s.min, max=s.max)
                if (c := versus.get((base["variant"], stage, metric))) is not None:
                    row.update(baseline=c.baseline, delta=c.delta, ratio=c.ratio, verdict=c.verdict, gated=c.gated)
                out.append(row)
    return out


def to_csv(records: Sequence[Record], comparisons: Sequence[Comparison] = ()) -> str:
    columns = COLUMNS + (COMPARE_COLUMNS if comparisons else ())
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows(records, comparisons):
        writer.writerow({k: cell(row.get(k)) for k in columns})
    return buf.getvalue()


STEP_KINDS = ("all-gather", "all-reduce", "all-to-all")


def step_row(record: Record, replaced: Mapping[str, Any] | None = None) -> str:
    """The record's first stage as one markdown row, per device and step: predicted step [interval]
    ms, matmul TFLOP, HBM traffic GB, collective operand GB by kind (:data:`STEP_KINDS`) and peak GiB.
    A ``denoise_loop`` variant named ``...-loop`` or ``...-loop-<suffix>`` (one scanned program of the
    workload's steps) is divided by the workload's steps. ``replaced`` (``new_ms``, ``interval_ms``,
    ``new_traffic_gb``: a re-prediction from the cached program) replaces step, interval and traffic."""
    name = record.variant.name
    stage, entry = next(iter(record.stages.items()))
    static, predicted = entry.static or Static(), entry.predicted or Predicted()
    looped = stage == "denoise_loop" and (name.endswith("-loop") or "-loop-" in name)
    per = record.config.workload["steps"] if looped else 1
    if replaced:
        step, (lo, hi), traffic = replaced["new_ms"], replaced["interval_ms"], replaced["new_traffic_gb"]
    else:
        step, traffic = (predicted.step_s or 0.0) * 1e3, (static.memory_traffic_bytes or 0.0) / 1e9
        lo, hi = (v * 1e3 for v in (predicted.uncertainty.interval_s if predicted.uncertainty else None) or (0, 0))
    kinds = (static.collectives.by_kind if static.collectives else None) or {}
    coll = " / ".join(f"{((c := kinds.get(k)) and c.operand_bytes or 0) / 1e9 / per:.1f}" for k in STEP_KINDS)
    peak = ((static.memory.peak_bytes if static.memory else None) or 0) / 2**30
    tflop, when = (static.matmul_flops or 0) / 1e12 / per, f"{step / per:.1f} [{lo / per:.1f}-{hi / per:.1f}]"
    return f"| {name} | {when} | {tflop:.1f} | {traffic / per:.1f} | {coll} | {peak:.1f} |"
