"""Flatten result records into per-(variant, stage, metric) values and compare two sets.

:func:`flatten_stage` turns one stage into dotted metric names (``time``,
``collectives.all-gather.count``, ``memory.bound_bytes``, ...) -> :class:`MetricValue`: every metric of
:data:`harness.catalogue.METRICS` with a ``path`` is read from its family, the few without one (timed
samples, collectives by kind, trace means over devices, the fit) are computed here; the catalogue
says how each is compared (``rule``) and with what default tolerance. Per-scope metrics name the model
scope, so a failure says where; a scope or collective kind a stage lacks on one side counts 0 there
(:func:`_implied_zero`). Predicted metrics are gated only where both sides were priced by the same
fixed model (:func:`model_of`): a spec measured for the sweep (CPU) is shown, never gated; another
model is a model change (``Comparison.model_changed``), never a regression, never silently passed.
:func:`compare_records` matches variants by name and yields one :class:`Comparison` per metric
present on either side; reports and the gate both use it, so they cannot disagree.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import catalogue
from harness.families import Family, Measured, Predicted, Static, Trace, at
from harness.plan.manifest import Gate
from harness.results import stats
from harness.results.record import DOES_NOT_FIT, Record, StageEntry
from harness.vocabulary import Change, label

MISSING, NEW = Change.MISSING, Change.NEW


@dataclass(frozen=True)
class MetricValue:
    """One metric of one stage: a value, and the raw samples it summarises (timings only)."""

    value: float
    samples: tuple[float, ...] = ()
    rounds: tuple[tuple[float, ...], ...] = ()  # per interleaved round, when samples pool them
    loaded: bool = False  # timings: taken while other processes kept the machine busy (run/load.py)
    model: str = ""  # predicted: "<spec identity>/v<simulator version>", "" where the spec was measured
    program: str = ""  # predicted: the fingerprint of the program it was simulated from


# --------------------------------------------------------------------------- flattening


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x):
        return None
    return float(x)


def _paths(fam: str, obj: Family, out: dict[str, MetricValue]) -> None:
    """Every catalogued metric of the family ``fam`` that sits at its ``path`` in ``obj``."""
    for m in catalogue.of_family(fam):
        if m.path is not None:
            raw = at(obj, m.path)
            v = float(raw) if isinstance(raw, bool) and m.unit == "" else _num(raw)
            if v is not None:
                out[m.name] = MetricValue(v / m.divisor)


def _time(measured: Measured, out: dict[str, MetricValue]) -> None:
    samples = tuple(s for s in measured.samples if _num(s) is not None)
    if samples:
        rounds = tuple(tuple(float(x) for x in r) for r in measured.rounds_s or () if r)
        loaded = bool(measured.load and measured.load.loaded)
        out[catalogue.TIME] = MetricValue(stats.median(samples), samples, rounds, loaded)


def _collectives(static: Static, out: dict[str, MetricValue]) -> None:
    by_kind = static.collectives.by_kind if static.collectives else None
    if isinstance(by_kind, Mapping):
        total_count = total_bytes = 0.0
        for kind, c in by_kind.items():
            count, nbytes = _num(c.count) or 0.0, _num(c.operand_bytes) or 0.0
            total_count, total_bytes = total_count + count, total_bytes + nbytes
            if count:  # zero kinds are implied (see _implied_zero)
                out[catalogue.collective(kind, "count")] = MetricValue(count)
                out[catalogue.collective(kind, "bytes")] = MetricValue(nbytes)
        out[catalogue.collective(catalogue.TOTAL, "count")] = MetricValue(total_count)
        out[catalogue.collective(catalogue.TOTAL, "bytes")] = MetricValue(total_bytes)


def _scopes(static: Static, out: dict[str, MetricValue]) -> None:
    """HBM traffic, FLOPs and collectives of each model scope (zeros left out: implied)."""
    by_scope = static.attribution.by_scope if static.attribution else None
    if not isinstance(by_scope, Mapping):
        return
    for scope, amounts in by_scope.items():
        for v, what in ((_num(amounts.bytes), "traffic_bytes"), (_num(amounts.flops), "flops")):
            if v:
                out[catalogue.scoped(label(scope), what)] = MetricValue(v)
        for kind, c in (amounts.collectives or {}).items():
            if count := _num(c.count):
                out[catalogue.scoped(label(scope), catalogue.collective(kind, "count"))] = MetricValue(count)
                nbytes = _num(c.bytes) or 0.0
                out[catalogue.scoped(label(scope), catalogue.collective(kind, "bytes"))] = MetricValue(nbytes)


def model_of(predicted: Predicted) -> tuple[str, str]:
    """(the model a prediction was priced by, the program's fingerprint) from its ``identity``
    (:mod:`harness.metrics.timeline.identity`); ("", "") where the spec was measured for the sweep
    (CPU) or the record predates identities: such predictions are shown, never gated."""
    identity = predicted.identity
    if identity is None or not identity.deterministic:
        return "", ""
    return f"{identity.spec}/v{identity.simulator_version}", str(identity.program or "")


def _predicted(predicted: Predicted, out: dict[str, MetricValue]) -> None:
    """The catalogued predicted metrics and the step by scope, each labelled with its model."""
    found: dict[str, MetricValue] = {}
    _paths("predicted", predicted, found)
    for scope, ns in (predicted.critical_by_scope_ns or {}).items():
        if v := _num(ns):
            found[catalogue.scoped(label(scope), "time_s", "predicted")] = MetricValue(v / 1e9)
    model, program = model_of(predicted)
    out.update({name: dataclasses.replace(v, model=model, program=program) for name, v in found.items()})


def _trace(trace: Trace, out: dict[str, MetricValue]) -> None:
    devices = [d for d in trace.devices or () if (_num(d.window_ns) or 0) > 0]
    if not devices:
        return
    steps = max(1, int(_num(trace.steps) or 1))
    for m in catalogue.of_family("trace"):
        if m.path and m.path.startswith("devices."):  # a per-device value: its mean (seconds: per step)
            v = sum(_num(at(d, m.path.removeprefix("devices."))) or 0.0 for d in devices) / len(devices) / m.divisor
            out[m.name] = MetricValue(v / steps if m.unit == "s" else v)


def flatten_stage(entry: StageEntry) -> dict[str, MetricValue]:
    """Every metric of one stage entry of a record (absent families give no metrics)."""
    out: dict[str, MetricValue] = {}
    if entry.measured:
        _time(entry.measured, out)
        _paths("measured", entry.measured, out)
    if entry.static:
        _collectives(entry.static, out)
        _paths("static", entry.static, out)
        _scopes(entry.static, out)
    if entry.trace:
        _trace(entry.trace, out)
        _paths("trace", entry.trace, out)
    if entry.predicted:
        _predicted(entry.predicted, out)
    if (
        entry.verdict == DOES_NOT_FIT
        or "memory_fit" in entry.extra
        or (entry.static is not None and entry.static.target)
    ):
        out[catalogue.DOES_NOT_FIT] = MetricValue(
            1.0 if entry.verdict == DOES_NOT_FIT else 0.0
        )  # where the fit is known
    return out


def flatten_record(record: Record) -> dict[tuple[str, str], MetricValue]:
    """(stage, metric) -> value for every stage of a record."""
    return {
        (stage, metric): value
        for stage, entry in record.stages.items()
        for metric, value in flatten_stage(entry).items()
    }


def _implied_zero(metric: str, metrics: Mapping[tuple[str, str], MetricValue], stage: str) -> MetricValue | None:
    """A collective kind absent from a stage that has static collectives occurred zero times; a
    scope (or a scope's collective kind) absent from a stage that has scopes took nothing, priced by
    the stage's own model."""
    if metric.startswith("collectives.") and (stage, catalogue.collective(catalogue.TOTAL, "count")) in metrics:
        return MetricValue(0.0)
    prefix = next((p for p in (catalogue.PREDICTED_SCOPE, catalogue.SCOPE) if metric.startswith(p)), None)
    if prefix is None or not any(s == stage and m.startswith(prefix) for s, m in metrics):
        return None
    step = metrics.get((stage, catalogue.PREDICTED_STEP)) if prefix == catalogue.PREDICTED_SCOPE else None
    return MetricValue(0.0) if step is None else MetricValue(0.0, model=step.model, program=step.program)


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
    forms = catalogue.tolerance_forms(metric)
    return list(dict.fromkeys([f"{stage}.{f}" for f in forms] + forms))


def tolerance_for(gate: Gate, stage: str, metric: str) -> float:
    """The manifest's tolerance for a metric (see :func:`tolerance_keys`), else the catalog default."""
    for key in tolerance_keys(stage, metric):
        if key in gate.tolerances:
            return gate.tolerances[key]
    return catalogue.get(metric).tolerance


@dataclass(frozen=True)
class Comparison:
    """One metric of one stage of one variant, baseline vs now."""

    variant: str
    stage: str
    metric: str
    kind: str  # the catalogue's gate rule: timing, exact, relative, monotonic, info
    unit: str
    baseline: float | None
    now: float | None
    verdict: str  # a stats verdict (improved, regressed, unchanged, noise), or "missing" / "new"
    gated: bool
    detail: str = ""
    result: stats.Verdict | None = field(default=None, compare=False)
    under_load: str = ""  # timings taken under load: "", "baseline", "now" or "both"
    model_changed: str = ""  # predicted metrics priced by different models: why (then never gated)
    other_class: str = ""  # a CPU program's codegen-dependent metric compiled on another machine class

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
    spec = catalogue.get(metric)
    # seconds (timings, compile times) say something only against the same kind of machine
    gated = spec.gated and (spec.kind != "timing" or timings)
    common: dict[str, Any] = dict(
        variant=variant,
        stage=stage,
        metric=metric,
        kind=spec.rule,
        unit=spec.unit,
        baseline=base.value if base else None,
        now=head.value if head else None,
    )
    predicted = spec.family == "predicted" and spec.gated
    if base is None or head is None:
        present = base if base is not None else head
        if predicted and present is not None:  # gated where the side that has it was priced by a fixed model
            gated = gated and bool(present.model)
        return Comparison(**common, verdict=NEW if base is None else MISSING, gated=gated)
    if spec.rule == "timing":
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
    elif predicted and (base.model or head.model):
        v = stats.compare_values(base.value, head.value, tolerance_for(gate, stage, metric), spec.better)
        changed = _model_change(base, head, v.verdict)
        detail = v.describe() + (f"; not gated: {changed}" if changed else "; predicted, the same model")
        return Comparison(
            **common, verdict=v.verdict, gated=not changed, detail=detail, result=v, model_changed=changed
        )
    elif predicted or (spec.rule == "info" and spec.unit in ("s", "fraction")):
        # One measurement per side (compile time, a trace): a change beyond the timing threshold
        # is reported as noise, since nothing can show it is more than that.
        v = stats.compare_samples((base.value,), (head.value,), gate.timing_ratio, gate.alpha, seed=seed)
        detail = "informational: one measurement per side, no significance test possible"
        if predicted:
            gated, detail = False, "not gated: predicted from constants measured for the sweep (or no model identity)"
    elif spec.rule == "info":
        v = stats.compare_values(base.value, head.value, 0.0)
        detail = "informational"
    elif spec.rule == "monotonic":
        v = stats.compare_values(base.value, head.value, 0.0)
        detail = "any increase fails"
    else:
        v = stats.compare_values(base.value, head.value, tolerance_for(gate, stage, metric), spec.better)
        detail = v.describe()
    return Comparison(**common, verdict=v.verdict, gated=gated, detail=detail, result=v)


def _model_change(base: MetricValue, head: MetricValue, verdict: str) -> str:
    """Why two predictions of a metric cannot be compared ("" when they can): priced by different
    models, or the same program priced differently by the same declared model (an undeclared
    change to the simulator)."""
    if base.model != head.model:
        return (
            f"the model changed ({base.model or 'none'} -> {head.model or 'none'}: spec identity / simulator version)"
        )
    if base.program and base.program == head.program and verdict != stats.UNCHANGED:
        return (
            f"the same program ({head.program}) priced differently under the same model ({head.model}): "
            "the simulator changed without SIMULATOR_VERSION being bumped"
        )
    return ""


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

    @property
    def model_changes(self) -> list[Comparison]:
        return [c for c in self.comparisons if c.model_changed]


def by_name(records: Iterable[Record]) -> dict[str, Record]:
    """variant name -> its latest record (later records win, as in a resumed results file)."""
    return {r.variant.name: r for r in records}


def machine_class(record: Record) -> str:
    """A record's machine class as the gate keys on it: CPU, backend, device kind and count."""
    return " / ".join(str(x) for x in record.machine.fingerprint)


def other_class(base: Record, head: Record) -> str:
    """Why a CPU program's codegen-dependent metrics of two records are not comparable ("" when they
    are): compiled for a CPU target on machines of different classes."""
    if (
        "cpu" not in (base.target.platform, head.target.platform)
        or base.machine.fingerprint == head.machine.fingerprint
    ):
        return ""
    classes = f"baseline {machine_class(base)}, now {machine_class(head)}"
    return f"other machine class ({classes}): XLA:CPU compiles for the host"


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
        elsewhere = other_class(base_rec, head_rec)
        for stage, metric in sorted(set(b) | set(h), key=lambda k: (k[0], catalogue.rank(k[1]), k[1])):
            bv = b.get((stage, metric)) or _implied_zero(metric, b, stage)
            hv = h.get((stage, metric)) or _implied_zero(metric, h, stage)
            c = compare_metric(name, stage, metric, bv, hv, gate, timings=timings)
            if elsewhere and c.gated and catalogue.host_codegen(metric):
                c = dataclasses.replace(
                    c, gated=False, other_class=elsewhere, detail=f"{c.detail}; not gated: {elsewhere}"
                )
            out.comparisons.append(
                _same_program(c, b.get((stage, catalogue.PREDICTED_STEP)), h.get((stage, catalogue.PREDICTED_STEP)))
            )
    return out


def _same_program(c: Comparison, base_step: MetricValue | None, head_step: MetricValue | None) -> Comparison:
    """A deterministic static metric that moved although both sides compiled the same program (equal
    fingerprints): the harness reads programs differently now (its traffic count, its attribution),
    which is a model change to re-baseline, not a regression of the program."""
    if base_step is None or head_step is None or not base_step.program or base_step.program != head_step.program:
        return c
    if c.verdict not in (stats.REGRESSED, stats.IMPROVED) or not c.gated or catalogue.get(c.metric).family != "static":
        return c
    why = f"the same program ({head_step.program}) measured differently: the harness's reading of programs changed"
    return dataclasses.replace(c, gated=False, model_changed=why, detail=f"{c.detail}; not gated: {why}")
