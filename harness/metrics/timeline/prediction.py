"""A predicted step: its timeline, the per-device accounting of a measured trace, the critical
path, one transformer block's Gantt events, and the spec it was priced with.

The accounting is :func:`harness.metrics.measured.accounting.device_metrics` over the timeline's events,
the very function a measured trace goes through, so predicted and measured numbers mean the same.
An async collective is written as a measured trace shows it: a zero-length ``*-start`` op when it
is issued and a ``*-done`` op from when the stream reaches it until the transfer has ended; the
transfer itself is one more span (``<start> (transfer)``) on the collective's lane, inside that
pair's span, so it changes no total. Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from harness.metrics.measured.accounting import DeviceMetrics, device_metrics
from harness.metrics.measured.events import COMPUTE, OpEvent
from harness.metrics.timeline.simulate import Event
from harness.metrics.timeline.specs import TimelineSpec
from harness.vocabulary import KINDS

LANES: tuple[str, ...] = (COMPUTE, *KINDS)  # Chrome trace tid = index in this tuple
PREDICTED_MODULE = "predicted"


def op_events(events: Sequence[Event], device: int = 0) -> list[OpEvent]:
    """The timeline as the op executions a trace reader yields."""
    return [OpEvent(device, PREDICTED_MODULE, e.name, e.category, e.start_ns, e.end_ns) for e in events]


def device_dict(events: Sequence[Event], exposed_by_kind: dict[str, float]) -> dict[str, Any]:
    """``DeviceMetrics`` of one device (``asdict``) plus ``exposed_ns_by_kind``."""
    metrics = device_metrics(op_events(events))
    empty = {f.name: 0.0 for f in fields(DeviceMetrics)} | {"device": 0, "collective_ns_by_kind": {}}  # no events
    base = asdict(metrics[0]) if metrics else empty
    return {**base, "exposed_ns_by_kind": {k: exposed_by_kind[k] for k in KINDS if exposed_by_kind.get(k)}}


@dataclass(frozen=True)
class Prediction:
    """The predicted timeline of one call of a compiled program on one device (see the module
    docstring). ``events``: :class:`~harness.metrics.timeline.simulate.Event` tuples ``(lane, name,
    category, start_ns, end_ns, scope)``; ``block_events``: one transformer block iteration's,
    shifted to start at 0 (empty when no loop runs the blocks); ``critical_path``: dicts ``{op,
    scope, category, ns, count}``, what the compute stream spent its time running or waiting for."""

    step_ns: float
    device: dict[str, Any]
    critical_path: tuple[dict[str, Any], ...]
    events: tuple[Event, ...]
    block_events: tuple[Event, ...]
    spec: TimelineSpec
    notes: tuple[str, ...] = ()
    simulate_s: float = 0.0
    critical_by_scope: Mapping[str, float] = field(default_factory=dict)
    """ns per scope of everything the compute stream ran or waited for (the whole critical path,
    loops counted at their trip counts): the step by scope; its sum is the step less idle time."""

    @property
    def exposed_all_gather_fraction(self) -> float:
        exposed = self.device.get("exposed_ns_by_kind", {}).get("all-gather", 0.0)
        return exposed / self.step_ns if self.step_ns > 0 else 0.0

    @property
    def exposed_collective_fraction(self) -> float:
        """Collective time of every kind not overlapped by compute, over the step."""
        return self.device.get("exposed_collective_ns", 0.0) / self.step_ns if self.step_ns > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON: step_s, device, exposed_all_gather_fraction, exposed_collective_fraction, wasted_fraction,
        critical_path, block_gantt (``[{lane, name, category, start_ns, end_ns, scope}]``), spec, notes,
        simulate_s, critical_by_scope_ns."""
        return {
            "step_s": self.step_ns / 1e9,
            "device": self.device,
            "exposed_all_gather_fraction": self.exposed_all_gather_fraction,
            "exposed_collective_fraction": self.exposed_collective_fraction,
            "wasted_fraction": self.device.get("wasted_fraction", 0.0),
            "critical_path": [dict(c) for c in self.critical_path],
            "block_gantt": [e._asdict() for e in self.block_events],
            "spec": self.spec.to_dict(),
            "notes": list(self.notes),
            "simulate_s": self.simulate_s,
            "critical_by_scope_ns": dict(sorted(self.critical_by_scope.items())),
        }

    def chrome_trace(self, device: int = 0) -> dict[str, Any]:
        """Chrome trace-event JSON of the timeline (Perfetto, ``chrome://tracing``): ``pid`` the
        device, one ``tid`` per lane (compute, then each collective kind), times in us;
        :func:`harness.metrics.measured.chrome.read_chrome_trace` reads it back."""
        return chrome_trace(self.events, device, self.spec.name)


def chrome_trace(events: Sequence[Event], device: int = 0, label: str = "") -> dict[str, Any]:
    """Chrome trace-event JSON of timeline events (see :meth:`Prediction.chrome_trace`)."""
    used = [lane for lane in LANES if any(e.lane == lane for e in events)]
    process = {"name": f"predicted device {device} ({label})"}
    meta: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": device, "tid": 0, "args": process}]
    meta += [
        {"ph": "M", "name": "thread_name", "pid": device, "tid": LANES.index(lane), "args": {"name": lane}}
        for lane in used
    ]
    spans = [
        {
            "ph": "X",
            "name": e.name,
            "cat": e.category,
            "pid": device,
            "tid": LANES.index(e.lane),
            "ts": e.start_ns / 1e3,
            "dur": (e.end_ns - e.start_ns) / 1e3,
            "args": {"category": e.category, "scope": e.scope, "module": PREDICTED_MODULE},
        }
        for e in events
    ]
    return {"traceEvents": meta + spans, "displayTimeUnit": "ns", "otherData": {"predicted": True, "spec": label}}
