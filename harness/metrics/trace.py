"""Capture an XLA trace and turn it into per-device time by category, by scope and by step.

Reading the XSpace (backend layouts and what each rests on) is :mod:`harness.metrics.xspace`.
Categories are ``compute`` or a collective kind from ``harness.metrics.hlo.KINDS``. An async
collective (``*-start`` ... ``*-done``) occupies the span from the start of its start op to the end
of its done op. Per device, over a window:

    busy       = union(compute, collectives)
    exposed    = collective time not overlapped by compute on the same device
    idle       = window - busy
    wasted     = exposed + idle          wasted_fraction = wasted / window

The whole-trace window runs from the first op start to the last op end across all devices. Each
traced *step* (one call of the stage) has its own window, from the host's step annotation: there,
host time before, between and after the device's ops is idle (a Python loop over a compiled step
shows its gaps). Per step, means over devices: compute, exposed time by collective kind and idle
(they sum to the window), and the ops' self time by model scope (:mod:`harness.metrics.attribution`);
these per-step samples are what a diff's intervals are computed from.

On CPU the nested ``Rendezvous`` events (waiting for the other participants) are summed into
``rendezvous_wait_ns`` of each collective.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import jax

from harness.metrics.attribution import Scopes, coverage, time_by_scope
from harness.metrics.hlo import KINDS
from harness.metrics.xspace import COMPUTE, STEP_EVENT, OpEvent, OpTable, op_category, read_trace

CPU_NOTE = (
    "CPU trace: collectives are in-process rendezvous plus memcpy between threads of one "
    "process, mostly waiting for the slowest participant; their timings do not transfer "
    "to TPU or GPU interconnects. Use the static collective counts and bytes instead."
)
_ASYNC_SUFFIX = re.compile(r"-(start|done)(?=[.\d]*$)")
PERFETTO_TRACE = "perfetto_trace.json.gz"


@dataclass(frozen=True)
class DeviceMetrics:
    """Time accounting of one device over the trace window, in ns."""

    device: int
    window_ns: float
    busy_ns: float
    compute_ns: float
    collective_ns: float
    collective_ns_by_kind: dict[str, float]
    exposed_collective_ns: float
    idle_ns: float
    wasted_ns: float
    wasted_fraction: float
    rendezvous_wait_ns: float


@dataclass(frozen=True)
class OpSummary:
    """Self time of one op of one module, summed over devices and executions, with its model scope
    and the source line that traced it (when the program's HLO was given)."""

    module: str
    op: str
    category: str
    total_ns: float
    count: int
    scope: str = ""
    source: str = ""


@dataclass(frozen=True)
class TraceMetrics:
    """Per-device time by category, the ops that took the most time, and per step (one call of the
    stage): the window, time by category and by scope (means over devices)."""

    platform: str
    devices: tuple[DeviceMetrics, ...]
    top_ops: tuple[OpSummary, ...]
    note: str | None
    step_samples: tuple[dict[str, Any], ...] = ()
    by_scope: dict[str, float] = field(default_factory=dict)  # ns per step, mean over devices
    scope_coverage: float | None = None  # share of op self time with a model scope

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "platform": self.platform,
            "devices": [asdict(d) for d in self.devices],
            "top_ops": [asdict(o) for o in self.top_ops],
            "note": self.note,
            "step_samples": list(self.step_samples),
            "by_scope": self.by_scope,
            "scope_coverage": self.scope_coverage,
        }


# ---------------------------------------------------------------- capture


def find_xplanes(log_dir: str | Path) -> list[Path]:
    """All `*.xplane.pb` files written under a `jax.profiler.trace` log dir, oldest first."""
    return sorted(Path(log_dir).glob("plugins/profile/*/*.xplane.pb"))


def capture_trace(run: Callable[[], Any], log_dir: str | Path, *, steps: int = 1) -> Path:
    """Call `run()` `steps` times under `jax.profiler.trace(log_dir)`; return the new xplane file.

    Each call is a `StepTraceAnnotation` (named ``step``) and is blocked on, so its device work
    lands in the trace inside the step's window. Compile (warm up) before capturing: compilation
    inside the trace is noise. Next to the xplane, jax writes a Chrome-JSON trace for Perfetto
    (:data:`PERFETTO_TRACE`).
    """
    before = set(find_xplanes(log_dir))
    with jax.profiler.trace(str(log_dir), create_perfetto_trace=True):
        for step in range(steps):
            with jax.profiler.StepTraceAnnotation(STEP_EVENT, step_num=step):
                jax.block_until_ready(run())
    written = find_xplanes(log_dir)
    fresh = [p for p in written if p not in before]
    if not (fresh or written):
        raise FileNotFoundError(f"jax.profiler.trace wrote no .xplane.pb under {log_dir}")
    return (fresh or written)[-1]


# ---------------------------------------------------------------- interval maths

Interval = tuple[float, float]


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint union of half-open intervals."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def covered_ns(intervals: Iterable[Interval]) -> float:
    """Length of the union of `intervals`."""
    return sum((end - start for start, end in merge_intervals(intervals)), 0.0)


def overlap_ns(a: Sequence[Interval], b: Sequence[Interval]) -> float:
    """Length of the intersection of two merged (sorted, disjoint) interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


# ---------------------------------------------------------------- metrics


def collective_spans(events: Iterable[OpEvent]) -> dict[str, list[Interval]]:
    """Collective kind -> time spans on one device; an async pair spans start-op start to done-op end."""
    spans: dict[str, list[Interval]] = defaultdict(list)
    open_starts: dict[str, list[OpEvent]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e.start_ns):
        if e.category == COMPUTE:
            continue
        m = _ASYNC_SUFFIX.search(e.op)
        if m is None:
            spans[e.category].append((e.start_ns, e.end_ns))
            continue
        pair_key = _ASYNC_SUFFIX.sub("", e.op)
        if m.group(1) == "start":
            open_starts[pair_key].append(e)
            continue
        queue = open_starts[pair_key] or _oldest_open(open_starts, e.category)
        start_ns = queue.pop(0).start_ns if queue else e.start_ns
        spans[e.category].append((start_ns, e.end_ns))
    for unmatched in (e for queue in open_starts.values() for e in queue):
        spans[unmatched.category].append((unmatched.start_ns, unmatched.end_ns))
    return dict(spans)


def _oldest_open(open_starts: dict[str, list[OpEvent]], category: str) -> list[OpEvent]:
    candidates = [q for q in open_starts.values() if q and q[0].category == category]
    return min(candidates, key=lambda q: q[0].start_ns, default=[])


def _device_metrics(device: int, events: list[OpEvent], window: Interval) -> DeviceMetrics:
    window_ns = window[1] - window[0]
    compute = merge_intervals((e.start_ns, e.end_ns) for e in events if e.category == COMPUTE)
    by_kind = collective_spans(events)
    collective = merge_intervals(span for spans in by_kind.values() for span in spans)
    compute_ns, collective_ns = covered_ns(compute), covered_ns(collective)
    exposed_ns = collective_ns - overlap_ns(collective, compute)
    busy_ns = compute_ns + exposed_ns
    idle_ns = max(0.0, window_ns - busy_ns)
    return DeviceMetrics(
        device=device,
        window_ns=window_ns,
        busy_ns=busy_ns,
        compute_ns=compute_ns,
        collective_ns=collective_ns,
        collective_ns_by_kind={k: covered_ns(by_kind[k]) for k in KINDS if k in by_kind},
        exposed_collective_ns=exposed_ns,
        idle_ns=idle_ns,
        wasted_ns=exposed_ns + idle_ns,
        wasted_fraction=(exposed_ns + idle_ns) / window_ns if window_ns > 0 else 0.0,
        rendezvous_wait_ns=sum(e.rendezvous_wait_ns for e in events),
    )


def device_metrics(events: Sequence[OpEvent]) -> tuple[DeviceMetrics, ...]:
    """Per-device accounting over one window: first op start to last op end across all devices."""
    if not events:
        return ()
    window = (min(e.start_ns for e in events), max(e.end_ns for e in events))
    per_device: dict[int, list[OpEvent]] = defaultdict(list)
    for e in events:
        per_device[e.device].append(e)
    return tuple(_device_metrics(d, per_device[d], window) for d in sorted(per_device))


def top_ops(events: Iterable[OpEvent], n: int = 20, scopes: Scopes | None = None) -> tuple[OpSummary, ...]:
    """The ``n`` (module, op) pairs with the most self time, summed over devices and executions
    (a ``while`` counts its own overhead, its body's ops count themselves)."""
    totals: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        acc = totals[(e.module, e.op, e.category)]
        acc[0] += e.exclusive_ns
        acc[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return tuple(OpSummary(m, op, cat, total, int(count), scopes.of(op) if scopes else "",
                           scopes.source.get(op, "") if scopes else "")
                 for (m, op, cat), (total, count) in ranked[:n])  # fmt: skip


def _categories(d: DeviceMetrics) -> dict[str, float]:
    """Compute, exposed collective time by kind (exposed time shared out by each kind's covered
    time) and idle of one device: they sum to its window."""
    out = {COMPUTE: d.compute_ns}
    total = sum(d.collective_ns_by_kind.values())
    for kind, ns in d.collective_ns_by_kind.items():
        out[kind] = d.exposed_collective_ns * ns / total if total else 0.0
    out["idle"] = d.idle_ns
    return out


def step_samples(table: OpTable, scopes: Scopes | None = None) -> list[dict[str, Any]]:
    """Per traced step: its window and, as means over the trace's devices, time by category
    (compute, exposed collectives by kind, idle) and ops' self time by scope, all in ns. Without
    step annotations the whole trace is one step, windowed by its ops."""
    devices = table.devices
    if not devices:
        return []
    windows = table.steps or ((min(e.start_ns for e in table.events), max(e.end_ns for e in table.events)),)
    starts = [w[0] for w in windows]
    per_step: list[list[OpEvent]] = [[] for _ in windows]
    for e in table.events:
        i = max(0, bisect.bisect_right(starts, e.start_ns) - 1)
        if windows[i][0] <= e.start_ns <= windows[i][1]:
            per_step[i].append(e)
    out = []
    for (start, end), events in zip(windows, per_step, strict=True):
        mine: dict[int, list[OpEvent]] = {d: [] for d in devices}
        for e in events:
            mine[e.device].append(e)
        categories: dict[str, float] = defaultdict(float)
        for d in devices:
            for k, v in _categories(_device_metrics(d, mine[d], (start, end))).items():
                categories[k] += v / len(devices)
        spans = ((e.op, e.exclusive_ns / len(devices)) for e in events)
        by_scope = time_by_scope(spans, scopes) if scopes else {}
        out.append({"window_ns": end - start, "categories": dict(categories), "by_scope": by_scope})
    return out


def analyze_trace(
    xspace: str | Path | bytes,
    *,
    modules: Collection[str] | None = None,
    categories: Mapping[str, str] | None = None,
    scopes: Scopes | None = None,
    top: int = 20,
) -> TraceMetrics:
    """Read a trace: per-device metrics over the whole trace, the top ops, and per-step samples by
    category and (given the program's ``scopes``) by scope (see :func:`harness.metrics.xspace.read_trace`)."""
    table = read_trace(xspace, modules=modules, categories=categories)
    samples = step_samples(table, scopes)
    by_scope: dict[str, float] = defaultdict(float)
    for sample in samples:
        for scope, ns in sample["by_scope"].items():
            by_scope[scope] += ns / len(samples)
    return TraceMetrics(
        platform=table.platform,
        devices=device_metrics(table.events),
        top_ops=top_ops(table.events, top, scopes),
        note=CPU_NOTE if table.platform == "cpu" else None,
        step_samples=tuple(samples),
        by_scope=dict(by_scope),
        scope_coverage=coverage(by_scope) if scopes else None,
    )


__all__ = ["COMPUTE", "CPU_NOTE", "PERFETTO_TRACE", "DeviceMetrics", "OpEvent", "OpSummary", "OpTable", "TraceMetrics",
           "analyze_trace", "capture_trace", "collective_spans", "covered_ns", "device_metrics", "find_xplanes",
           "merge_intervals", "op_category", "overlap_ns", "read_trace", "step_samples", "top_ops"]  # fmt: skip
