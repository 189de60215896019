"""Flatten result records into per-(variant, stage, metric) values and compare two sets.

A record (:class:`~harness.results.record.Record`) nests its numbers per stage under ``static``,
``measured``, ``trace`` and ``predicted``. :func:`flatten_record` turns one stage into a flat map
of dotted metric names (``time``, ``collectives.all-gather.count``,
``memory.bound_bytes``, ...) -> :class:`MetricValue`; :data:`CATALOG` says for each
name how it is compared:

    timing      raw samples, ratio of medians + Mann-Whitney (stats.compare_samples)
    exact       a count that must not change (tolerance 0 unless the manifest says so)
    relative    a deterministic amount (bytes, FLOPs) within a relative tolerance
    monotonic   recompiles, does_not_fit (1 when the stage's memory exceeds the device's, where the fit
                is known): any increase is a regression, whatever the tolerance
    info        shown in reports, never gated (compile time, trace shares, transfers, predicted)

:func:`compare_records` matches variants by name and yields one
:class:`Comparison` per metric present on either side. Reports and the gate both
use it, so they can never disagree.
"""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.plan.manifest import Gate
from harness.results import stats
from harness.results.metric_names import MEMORY_FIELDS, tolerance_forms
from harness.results.record import DOES_NOT_FIT, Record, StageEntry
from harness.vocabulary import Change

MISSING, NEW = Change.MISSING, Change.NEW
KINDS = ("timing", "exact", "relative", "monotonic", "info")


@dataclass(frozen=True)
class MetricSpec:
    kind: str
    unit: str  # "s", "bytes", "count", "flops", "fraction"
    tolerance: float = 0.0  # default relative tolerance (exact/relative kinds)
    optional: bool = False  # may be absent from a run for a good reason (a warm start has no cold compile)


# Pattern -> spec; the first matching pattern wins (fnmatch syntax).
CATALOG: tuple[tuple[str, MetricSpec], ...] = (
    ("time", MetricSpec("timing", "s")),
    ("recompiles", MetricSpec("monotonic", "count")),
    ("does_not_fit", MetricSpec("monotonic", "count")),  # 1: over the device's memory; fit -> not is a regression
    ("collectives.*.count", MetricSpec("exact", "count")),
    ("collectives.*.bytes", MetricSpec("relative", "bytes", 0.0)),
    ("memory.alias_bytes", MetricSpec("info", "bytes")),
    ("memory.generated_code_bytes", MetricSpec("info", "bytes")),
    ("memory.*", MetricSpec("relative", "bytes", 0.02)),
    ("cost.flops", MetricSpec("relative", "flops", 0.01)),
    ("cost.bytes_accessed", MetricSpec("relative", "bytes", 0.01)),
    ("analytic_flops", MetricSpec("relative", "flops", 0.0)),
    ("compile_s", MetricSpec("info", "s")),
    ("compile.cold_s", MetricSpec("relative", "s", 0.5, optional=True)),  # only when the first compile missed
    ("compile.warm_s", MetricSpec("relative", "s", 0.5)),
    ("compile.warm_misses", MetricSpec("monotonic", "count")),  # an unexpected persistent-cache miss
    ("compile.*", MetricSpec("info", "")),
    ("trace.*_fraction", MetricSpec("info", "fraction")),
    ("trace.*", MetricSpec("info", "s")),
    ("predicted.*_fraction", MetricSpec("info", "fraction")),
    ("predicted.*", MetricSpec("info", "s")),  # a model's output, not a measurement: shown, never gated
    ("transfers.*", MetricSpec("info", "count")),
    ("*", MetricSpec("info", "")),
)
GATED_KINDS = ("timing", "exact", "relative", "monotonic")


def spec_for(metric: str) -> MetricSpec:
    return next(spec for pattern, spec in CATALOG if fnmatch.fnmatchcase(metric, pattern))


@dataclass(frozen=True)
class MetricValue:
    """One metric of one stage: a value, and the raw samples it summarises (timings only)."""

    value: float
    samples: tuple[float, ...] = ()
    rounds: tuple[tuple[float, ...], ...] = ()  # per interleaved round, when samples pool them
    loaded: bool = False  # timings: taken while other processes kept the machine busy (run/load.py)


# --------------------------------------------------------------------------- flattening


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def _measured(measured: Mapping[str, Any], out: dict[str, MetricValue]) -> None:
    samples = tuple(float(s) for s in measured.get("samples_s") or () if _num(s) is not None)
    if samples:
        rounds = tuple(tuple(float(x) for x in r) for r in measured.get("rounds_s") or () if r)
        loaded = bool((measured.get("load") or {}).get("loaded"))
        out["time"] = MetricValue(stats.median(samples), samples, rounds, loaded)
    recompiles = _num((measured.get("recompiles") or {}).get("count"))
    if recompiles is not None:
        out["recompiles"] = MetricValue(recompiles)
    for direction, n in (measured.get("transfers") or {}).items():
        if (v := _num(n)) is not None:
            out[f"transfers.{direction}"] = MetricValue(v)


def _static(static: Mapping[str, Any], out: dict[str, MetricValue]) -> None:
    by_kind = (static.get("collectives") or {}).get("by_kind")
    if isinstance(by_kind, Mapping):
        total_count = total_bytes = 0.0
        for kind, c in by_kind.items():
            count, nbytes = _num(c.get("count")) or 0.0, _num(c.get("operand_bytes")) or 0.0
            total_count, total_bytes = total_count + count, total_bytes + nbytes
            if count:  # zero kinds are implied (see _implied_zero)
                out[f"collectives.{kind}.count"] = MetricValue(count)
                out[f"collectives.{kind}.bytes"] = MetricValue(nbytes)
        out["collectives.total.count"] = MetricValue(total_count)
        out["collectives.total.bytes"] = MetricValue(total_bytes)
    for name in MEMORY_FIELDS:
        if (v := _num((static.get("memory") or {}).get(name))) is not None:
            out[f"memory.{name}"] = MetricValue(v)
    for name in ("flops", "bytes_accessed", "transcendentals"):
        if (v := _num((static.get("cost") or {}).get(name))) is not None:
            out[f"cost.{name}"] = MetricValue(v)
    if (v := _num(static.get("analytic_flops"))) is not None:
        out["analytic_flops"] = MetricValue(v)
    if (v := _num((static.get("timing") or {}).get("compile_seconds"))) is not None:
        out["compile_s"] = MetricValue(v)
    cache = static.get("compile_cache") or {}
    for key in ("cold_s", "warm_s", "warm_misses"):
        if (v := _num(cache.get(key))) is not None:
            out[f"compile.{key}"] = MetricValue(v)
    if isinstance((cache.get("first") or {}).get("hit"), bool):
        out["compile.first_hit"] = MetricValue(float(cache["first"]["hit"]))


def _trace(trace: Mapping[str, Any], out: dict[str, MetricValue]) -> None:
    devices = [d for d in trace.get("devices") or () if (_num(d.get("window_ns")) or 0) > 0]
    if not devices:
        return

    def mean(key: str) -> float:
        return sum(_num(d.get(key)) or 0.0 for d in devices) / len(devices)

    steps = max(1, int(_num(trace.get("steps")) or 1))
    for key in ("compute", "exposed_collective", "idle"):
        out[f"trace.{key}_s"] = MetricValue(mean(f"{key}_ns") / 1e9 / steps)
    out["trace.wasted_fraction"] = MetricValue(mean("wasted_fraction"))


def _predicted(predicted: Mapping[str, Any], out: dict[str, MetricValue]) -> None:
    for key in ("step_s", "video_s", "exposed_all_gather_fraction", "wasted_fraction"):
        if (v := _num(predicted.get(key))) is not None:
            out[f"predicted.{key}"] = MetricValue(v)


def flatten_stage(entry: StageEntry) -> dict[str, MetricValue]:
    """Every metric of one stage entry of a record (absent families give no metrics)."""
    out: dict[str, MetricValue] = {}
    if entry.measured:
        _measured(entry.measured, out)
    if entry.static:
        _static(entry.static, out)
    if entry.trace:
        _trace(entry.trace, out)
    if entry.predicted:
        _predicted(entry.predicted, out)
    if entry.verdict == DOES_NOT_FIT or "memory_fit" in entry.extra or ((entry.static or {}).get("target") or {}):
        out["does_not_fit"] = MetricValue(1.0 if entry.verdict == DOES_NOT_FIT else 0.0)  # where the fit is known
    return out


def flatten_record(record: Record) -> dict[tuple[str, str], MetricValue]:
    """(stage, metric) -> value for every stage of a record."""
    return {
        (stage, metric): value
        for stage, entry in record.stages.items()
        for metric, value in flatten_stage(entry).items()
    }


def _implied_zero(metric: str, metrics: Mapping[tuple[str, str], MetricValue], stage: str) -> MetricValue | None:
    """A collective kind absent from a stage that has static collectives occurred zero times."""
    if metric.startswith("collectives.") and (stage, "collectives.total.count") in metrics:
        return MetricValue(0.0)
    return None


def value_of(record: Record, stage: str, metric: str) -> MetricValue | None:
    """One metric of one stage of a record, as the gate reads it (absent collective kinds are 0)."""
    flat = flatten_record(record)
    return flat.get((stage, metric)) or _implied_zero(metric, flat, stage)


# --------------------------------------------------------------------------- comparing


def tolerance_keys(stage: str, metric: str) -> list[str]:
    """Manifest tolerance keys that apply to a metric, most specific first.

    A key names the metric, a dotted prefix of it, or the metric without its collective
    kind (``collectives.count`` covers every ``collectives.<kind>.count``); it may be
    qualified by the record family (``static.memory``) and by the stage
    (``denoise_step.static.memory``). Stage-qualified keys win, then longer names.
    """
    forms = tolerance_forms(metric)
    return list(dict.fromkeys([f"{stage}.{f}" for f in forms] + forms))


def tolerance_for(gate: Gate, stage: str, metric: str) -> float:
    """The manifest's tolerance for a metric (see :func:`tolerance_keys`), else the catalog default."""
    for key in tolerance_keys(stage, metric):
        if key in gate.tolerances:
            return gate.tolerances[key]
    return spec_for(metric).tolerance


@dataclass(frozen=True)
class Comparison:
    """One metric of one stage of one variant, baseline vs now."""

    variant: str
    stage: str
    metric: str
    kind: str
    unit: str
    baseline: float | None
    now: float | None
    verdict: str  # one of stats.VERDICTS, or "missing" / "new"
    gated: bool
    detail: str = ""
    result: stats.Verdict | None = field(default=None, compare=False)
    under_load: str = ""  # timings taken under load: "", "baseline", "now" or "both"

    @property
    def delta(self) -> float | None:
        return None if self.baseline is None or self.now is None else self.now - self.baseline

    @property
    def ratio(self) -> float | None:
        return None if self.baseline is None or self.now is None else stats.ratio(self.baseline, self.now)

    @property
    def failed(self) -> bool:
        return self.gated and self.verdict == stats.REGRESSED


def compare_metric(
    variant: str,
    stage: str,
    metric: str,
    base: MetricValue | None,
    head: MetricValue | None,
    gate: Gate,
    *,
    timings: bool = True,
    seed: int = 0,
) -> Comparison:
    spec = spec_for(metric)
    # seconds (timings, compile times) say something only against the same kind of machine
    gated = spec.kind in GATED_KINDS and ((spec.kind != "timing" and spec.unit != "s") or timings)
    common: dict[str, Any] = dict(
        variant=variant,
        stage=stage,
        metric=metric,
        kind=spec.kind,
        unit=spec.unit,
        baseline=base.value if base else None,
        now=head.value if head else None,
    )
    if base is None or head is None:
        return Comparison(**common, verdict=NEW if base is None else MISSING, gated=gated)
    if spec.kind == "timing":
        rounds = tuple(zip(base.rounds, head.rounds, strict=True)) if len(base.rounds) == len(head.rounds) else ()
        v = stats.compare_samples(
            base.samples or (base.value,),
            head.samples or (head.value,),
            gate.timing_ratio,
            gate.alpha,
            rounds=rounds,
            seed=seed,
        )
        detail = v.describe() + ("" if gated else "; not gated (different machine)")
        common["under_load"] = {(True, True): "both", (True, False): "baseline", (False, True): "now"}.get(
            (base.loaded, head.loaded), ""
        )
        if common["under_load"]:
            detail += f"; samples taken under load ({common['under_load']})"
    elif spec.kind == "info" and spec.unit in ("s", "fraction"):
        # One measurement per side (compile time, a trace): a change beyond the timing threshold
        # is reported as noise, since nothing can show it is more than that.
        v = stats.compare_samples((base.value,), (head.value,), gate.timing_ratio, gate.alpha, seed=seed)
        detail = "informational: one measurement per side, no significance test possible"
    elif spec.kind == "info":
        v = stats.compare_values(base.value, head.value, 0.0)
        detail = "informational"
    elif spec.kind == "monotonic":
        v = stats.compare_values(base.value, head.value, 0.0)
        detail = "any increase fails"
    else:
        v = stats.compare_values(base.value, head.value, tolerance_for(gate, stage, metric))
        detail = v.describe()
    return Comparison(**common, verdict=v.verdict, gated=gated, detail=detail, result=v)


@dataclass
class ComparisonSet:
    """All comparisons of two record sets, plus what could not be matched."""

    comparisons: list[Comparison]
    only_in_baseline: list[str]  # variant names
    only_in_now: list[str]
    changed_settings: dict[str, tuple[str, str]]  # variant name -> (baseline id, now id)
    failed_now: dict[str, str]  # variant name -> error

    @property
    def regressions(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.failed]

    def by_verdict(self, verdict: str) -> list[Comparison]:
        return [c for c in self.comparisons if c.verdict == verdict]


def by_name(records: Iterable[Record]) -> dict[str, Record]:
    """variant name -> its latest record (later records win, as in a resumed results file)."""
    return {r.variant.name: r for r in records}


def compare_records(
    baseline: Sequence[Record],
    now: Sequence[Record],
    gate: Gate | None = None,
    *,
    timings: bool = True,
) -> ComparisonSet:
    """Compare every variant present in both sets (matched by name), metric by metric."""
    gate = gate or Gate()
    base_by, now_by = by_name(baseline), by_name(now)
    out = ComparisonSet([], [n for n in base_by if n not in now_by], [n for n in now_by if n not in base_by], {}, {})
    for name, head_rec in now_by.items():
        if not head_rec.ok:
            out.failed_now[name] = (head_rec.error or head_rec.status or "failed").strip()
        if name not in base_by:
            continue
        base_rec = base_by[name]
        if base_rec.variant.id != head_rec.variant.id:
            out.changed_settings[name] = (base_rec.variant.id, head_rec.variant.id)
        b, h = flatten_record(base_rec), flatten_record(head_rec)
        for stage, metric in sorted(set(b) | set(h), key=lambda k: (k[0], _metric_order(k[1]), k[1])):
            bv = b.get((stage, metric)) or _implied_zero(metric, b, stage)
            hv = h.get((stage, metric)) or _implied_zero(metric, h, stage)
            out.comparisons.append(compare_metric(name, stage, metric, bv, hv, gate, timings=timings))
    return out


def _metric_order(metric: str) -> int:
    order = (
        "time",
        "recompiles",
        "does_not_fit",
        "collectives.",
        "memory.",
        "cost.",
        "analytic_flops",
        "compile",
        "trace.",
    )
    return next((i for i, p in enumerate(order) if metric.startswith(p)), len(order))
