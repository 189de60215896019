"""What changed between a variant and its reference, by model scope and by time category.

From the per-step samples a trace stores (``trace.step_samples``: each traced call's window, its time
by category and its ops' self time by scope, means over devices, in ns), per stage:

* the step's time, per category (``compute``, each collective kind's exposed time, ``idle``: they sum
  to the window) and per scope: each side's mean per step, the delta (head - base) with an interval
  of the difference of means over batches of consecutive calls (:func:`harness.results.stats.mean_diff_ci`;
  means, so the parts still sum to the whole), and the delta's share of the step's delta;
* a delta is *significant* when its interval excludes 0; the intervals are simultaneous over the
  stage's ``m`` parts (Bonferroni, each at ``1 - 0.05 / m``), so an A/A diff's intervals all hold 0
  with >= 95 % probability. Drift between the two runs is not in them (docs/gates.md, "Calls are not
  independent samples");
* from the static attribution (``static.attribution.by_scope``): collective count and bytes deltas by
  scope and kind (deterministic: no interval).

A speedup (base median / head median) is given only when both ran the same model on the same workload
sizes, else ``n/a (different workload)``. Pure Python over records: the report and ``harness diff`` use it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from harness.families import CollectiveTotals, StepSample
from harness.results import stats
from harness.results.record import Record, StageEntry

DIFFERENT_WORKLOAD = "n/a (different workload)"
STEP = "step"  # the key of the whole step's row


@dataclass(frozen=True)
class Delta:
    """Mean time per step of one part (a scope, a category or the whole step) on each side, in ns."""

    key: str
    base_ns: float
    head_ns: float
    ci: tuple[float, float] | None  # 95 % interval of head - base (None: fewer than 2 steps a side)
    share: float | None  # delta / the step's delta (None when the step did not change)

    @property
    def delta_ns(self) -> float:
        return self.head_ns - self.base_ns

    @property
    def significant(self) -> bool:
        return self.ci is not None and (self.ci[0] > 0 or self.ci[1] < 0)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta_ns": self.delta_ns, "significant": self.significant}


@dataclass(frozen=True)
class CollectiveDelta:
    """Collectives of one kind at one scope, per device and call, on each side."""

    scope: str
    kind: str
    base_count: float
    head_count: float
    base_bytes: float
    head_bytes: float


@dataclass(frozen=True)
class StageDiff:
    """One stage of ``head`` against ``base``."""

    stage: str
    base: str
    head: str
    steps: tuple[int, int]  # traced steps per side
    step: Delta | None
    categories: tuple[Delta, ...]
    scopes: tuple[Delta, ...]
    collectives: tuple[CollectiveDelta, ...]
    speedup: float | None  # base median / head median; None: different workload or no timings
    speedup_note: str
    note: str = ""  # what makes the two sides' traced calls differ in kind (a host loop on one side)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "steps": list(self.steps),
            "step": self.step.to_dict() if self.step else None,
            "categories": [d.to_dict() for d in self.categories],
            "scopes": [d.to_dict() for d in self.scopes],
            "collectives": [asdict(c) for c in self.collectives],
        }


# --------------------------------------------------------------------------- pieces


def _samples(entry: StageEntry | None) -> list[StepSample]:
    trace = entry.trace if entry is not None else None
    return list((trace.step_samples if trace is not None else None) or ())


Part = Callable[[StepSample], Mapping[str, float] | None]  # a step's ns by category, or by scope


def CATEGORIES(s: StepSample) -> Mapping[str, float] | None:  # noqa: N802 (a constant of type Part)
    return s.categories


def SCOPES(s: StepSample) -> Mapping[str, float] | None:  # noqa: N802
    return s.by_scope


def _series(samples: Sequence[StepSample], part: Part, depth: int | None) -> dict[str, list[float]]:
    """key -> one value per step (0 where a step lacks the key); scopes cut to ``depth`` components."""
    keys: dict[str, None] = {}
    rows = []
    for s in samples:
        row: dict[str, float] = defaultdict(float)
        for key, ns in (part(s) or {}).items():
            key = "/".join(key.split("/")[:depth]) if depth and key else key
            row[key] += float(ns)
            keys[key] = None
        rows.append(row)
    return {k: [row.get(k, 0.0) for row in rows] for k in keys}


def _delta(key: str, base: Sequence[float], head: Sequence[float], step_delta: float | None, parts: int) -> Delta:
    mb = sum(base) / len(base) if base else 0.0
    mh = sum(head) / len(head) if head else 0.0
    confidence = 1.0 - (1.0 - stats.CONFIDENCE) / parts  # Bonferroni over the parts of the stage's diff
    ci = stats.mean_diff_ci(base, head, confidence=confidence) if len(base) > 1 and len(head) > 1 else None
    share = (mh - mb) / step_delta if step_delta else None
    return Delta(key, mb, mh, ci, share)


def _deltas(
    base: Sequence[StepSample],
    head: Sequence[StepSample],
    part: Part,
    step_delta: float | None,
    depth: int | None,
    parts: int,
) -> tuple[Delta, ...]:
    b, h = _series(base, part, depth), _series(head, part, depth)
    keys = list(dict.fromkeys([*b, *h]))
    out = [_delta(k, b.get(k, [0.0] * len(base)), h.get(k, [0.0] * len(head)), step_delta, parts) for k in keys]
    return tuple(sorted(out, key=lambda d: -abs(d.delta_ns)))


def _parts(base: Sequence[StepSample], head: Sequence[StepSample], depth: int | None) -> int:
    """How many intervals a stage's diff holds: the step, its categories and its scopes."""
    keys = [set(_series([*base, *head], f, d)) for f, d in ((CATEGORIES, None), (SCOPES, depth))]
    return 1 + sum(len(k) for k in keys)


def collective_deltas(base: StageEntry | None, head: StageEntry | None) -> tuple[CollectiveDelta, ...]:
    """Collective count / bytes per scope and kind (static attribution), where either side has any."""

    def table(entry: StageEntry | None) -> dict[tuple[str, str], CollectiveTotals]:
        static = entry.static if entry is not None else None
        attribution = static.attribution if static is not None else None
        by_scope = attribution.by_scope if attribution is not None else None
        return {(s, k): c for s, v in (by_scope or {}).items() for k, c in (v.collectives or {}).items()}

    b, h = table(base), table(head)
    zero = CollectiveTotals()
    out = [
        CollectiveDelta(
            s,
            k,
            float(b.get((s, k), zero).count or 0.0),
            float(h.get((s, k), zero).count or 0.0),
            float(b.get((s, k), zero).bytes or 0.0),
            float(h.get((s, k), zero).bytes or 0.0),
        )
        for s, k in dict.fromkeys([*b, *h])
    ]
    return tuple(sorted(out, key=lambda c: (-abs(c.head_bytes - c.base_bytes), c.scope, c.kind)))


def comparable(a: Record, b: Record) -> bool:
    """Same preset and workload sizes (the stages run may differ): a speedup between them means something."""

    def sizes(r: Record) -> dict[str, Any]:
        return {k: v for k, v in dict(r.config.workload).items() if k != "stages"}

    return a.config.preset == b.config.preset and sizes(a) == sizes(b)


def host_loop_note(base: Record, head: Record, stage: str) -> str:
    """Where one side's stage is a host loop around its program and the other's is not (the Python
    denoising loop against the scanned one), what that means for the comparison; "" otherwise."""

    def loop(r: Record) -> tuple[bool, int]:
        p = r.stages[stage].predicted if stage in r.stages else None
        return (bool(p.host_loop), int(p.calls_per_video or 1)) if p is not None else (False, 1)

    (lb, cb), (lh, ch) = loop(base), loop(head)
    if lb == lh:
        return ""
    name, calls = (base.variant.name, cb) if lb else (head.variant.name, ch)
    return (
        f"{name}'s {stage} is a host loop: one traced call runs its program {calls}x, the host dispatching "
        "each call, so both sides' calls cover the same work; its idle time holds the gaps between the "
        "calls (host dispatch), which the other side's single program does not have"
    )


def _median(entry: StageEntry | None) -> float | None:
    measured = entry.measured if entry is not None else None
    xs = measured.samples if measured is not None else []
    return stats.median(xs) if xs else None


# --------------------------------------------------------------------------- diffs


def diff_stage(base: Record, head: Record, stage: str, *, depth: int | None = None) -> StageDiff:
    """``head``'s ``stage`` against ``base``'s (see the module docstring); ``depth`` cuts scope paths."""
    eb, eh = base.stages.get(stage), head.stages.get(stage)
    sb, sh = _samples(eb), _samples(eh)
    step = None
    categories: tuple[Delta, ...] = ()
    scopes: tuple[Delta, ...] = ()
    if sb and sh:
        wb, wh = [float(s.window_ns or 0.0) for s in sb], [float(s.window_ns or 0.0) for s in sh]
        parts = _parts(sb, sh, depth)
        step = _delta(STEP, wb, wh, None, parts)
        step = Delta(STEP, step.base_ns, step.head_ns, step.ci, 1.0 if step.delta_ns else None)
        categories = _deltas(sb, sh, CATEGORIES, step.delta_ns, None, parts)
        scopes = _deltas(sb, sh, SCOPES, step.delta_ns, depth, parts)
    mb, mh = _median(eb), _median(eh)
    if not comparable(base, head):
        speedup, note = None, DIFFERENT_WORKLOAD
    elif mb is None or mh is None or mh <= 0:
        speedup, note = None, "n/a (no timings)"
    else:
        speedup, note = mb / mh, f"{mb / mh:.2f}x"
    return StageDiff(
        stage,
        base.variant.name,
        head.variant.name,
        (len(sb), len(sh)),
        step,
        categories,
        scopes,
        collective_deltas(eb, eh),
        speedup,
        note,
        host_loop_note(base, head, stage),
    )


def diff_records(base: Record, head: Record, *, depth: int | None = None) -> list[StageDiff]:
    """Every stage both ran (in ``head``'s order)."""
    return [diff_stage(base, head, s, depth=depth) for s in head.stages if s in base.stages]


def reference_diffs(records: Iterable[Record], *, depth: int | None = None) -> list[StageDiff]:
    """Each ok record against its declared reference (``variant.reference``) where both are present."""
    by_name = {r.variant.name: r for r in records if r.ok}
    out = []
    for r in by_name.values():
        ref = by_name.get(r.variant.reference or "")
        if ref is not None and ref is not r:
            out += diff_records(ref, r, depth=depth)
    return out
