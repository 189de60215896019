"""Per-device time accounting over a window, from op executions (:class:`~harness.metrics.measured.events.OpEvent`).

Categories are ``compute`` or a collective kind from ``harness.vocabulary.KINDS``. An async
collective (``*-start`` ... ``*-done``) occupies the span from the start of its start op to the end
of its done op. Per device, over a window:

    busy       = union(compute, collectives)
    exposed    = collective time not overlapped by compute on the same device
    idle       = window - busy
    wasted     = exposed + idle          wasted_fraction = wasted / window

The same functions account for a measured trace (:mod:`harness.metrics.measured.trace`) and a predicted
timeline (:mod:`harness.metrics.timeline`), so the two are comparable number for number. Pure
Python (no JAX).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from harness.metrics.measured.events import COMPUTE, OpEvent
from harness.vocabulary import KINDS

_ASYNC_SUFFIX = re.compile(r"-(start|done)(?=[.\d]*$)")


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


def window_metrics(device: int, events: list[OpEvent], window: Interval) -> DeviceMetrics:
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
    return tuple(window_metrics(d, per_device[d], window) for d in sorted(per_device))
