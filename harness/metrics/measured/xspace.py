"""Read an XSpace (``jax.profiler``'s ``*.xplane.pb``) into op executions and step windows.

Parsing goes through ``jax.profiler.ProfileData`` (ships with jaxlib, always matches the writer).
What each backend's layout claim rests on:

* **CPU** (runs here; ``tests/harness/metrics/test_trace.py`` traces 8 simulated devices): every
  op execution is an event on a thread line of ``/host:CPU`` with stats ``hlo_op``, ``hlo_module``
  and ``device_ordinal`` (a thread does not identify a device); a ``while`` event encloses the
  events of its body on the same line; collectives enclose ``Rendezvous`` waits.
* **TPU** (xprof's source, ``xprof/convert/events_db/tpu_trace_parser.cc`` and
  ``tpu_component.h``; no TPU run here): plane ``/device:TPU:<n>``; op executions on its
  ``XLA Ops`` line, named by the op (xprof reads the op from the event's display name, which
  ``ProfileData`` does not expose: the first word of the name, ``%`` stripped, is taken); their
  module is the enclosing event of the ``XLA Modules`` line, named ``<module>(<program id>)``.
  The ``Async XLA Ops`` line (an async copy from its start to its done) is read beside the
  stream (:attr:`OpTable.async_events`), never as op time; an op whose HLO text names host
  memory (``S(5)``, XLA's ``kHostMemorySpace``) is a host-offload op
  (:attr:`OpTable.host_offload`). Checked on a synthetic xplane of that layout
  (``tests/harness/metrics/test_xspace.py``) and on a real one from a TPU v6e job, xprof's own test
  profile (``tests/harness/metrics/test_real_profile.py``; fixture ``tests/harness/fixtures/real/``).
* **GPU** (xprof's ``gpu_trace_parser.cc`` and XLA's ``cupti_collector.cc``; no GPU run here):
  plane ``/device:GPU:<n>``; kernels on lines ``Stream #<id>(<kinds>)``, each with stats
  ``hlo_op`` (nested ops ``::``-separated, innermost last) and ``hlo_module`` from XLA's thunk
  annotation. Derived ``XLA Ops`` / ``XLA Modules`` lines, when present, repeat the kernels and are
  not read. Checked on a synthetic xplane of that layout.

Steps are the host-side ``StepTraceAnnotation`` events :func:`harness.metrics.measured.trace.capture_trace`
writes (name ``step``, stat ``step_num``), so a step's window is one call of the stage as the
host saw it: device ops plus the host time around and between them. A profile without them (a
user's own, taken by another program) gives its steps from a device plane's ``Steps`` line, else
from its first device's ``XLA Modules`` events (of the modules asked for): one step per program
execution. Each op's *self* time is its
duration minus the op events nested in it on the same line (a ``while`` keeps only its own
overhead), so summed self times never count a loop body twice.
"""

from __future__ import annotations

import bisect
import re
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax

from harness.metrics.measured.events import COMPUTE, OpEvent, OpTable, op_category  # noqa: F401 - COMPUTE: its old home

STEP_EVENT = "step"
_DEVICE_PLANE = re.compile(r"^/device:([A-Z]+):(\d+)$")
_XLA_OPS, _XLA_MODULES, _ASYNC_OPS, _STEPS = "XLA Ops", "XLA Modules", "Async XLA Ops", "Steps"
HOST_MEMORY = "S(5)"  # XLA's host memory space in a layout (xla/layout.h kHostMemorySpace = 5)
_RENDEZVOUS = "Rendezvous"
_PROGRAM_ID = re.compile(r"\(\d+\)$")


def _op_name(name: str) -> str:
    """``%fusion.3 = f32[..] fusion(...)`` or ``fusion.3`` -> ``fusion.3``."""
    return name.split(" ", 1)[0].lstrip("%")


@dataclass
class _Raw:
    op: str
    module: str
    start: float
    end: float
    waits: float = 0.0
    nested: float = 0.0
    host: bool = False
    own: float | None = None  # the device's duration, where it differs from end - start


def _self_times(ops: list[_Raw]) -> None:
    """Subtract from each op the ops nested directly in it (ops of one line: nested or disjoint)."""
    stack: list[_Raw] = []
    for op in sorted(ops, key=lambda o: (o.start, -o.end)):
        while stack and stack[-1].end <= op.start:
            stack.pop()
        if stack and op.end <= stack[-1].end:
            stack[-1].nested += op.end - op.start
        stack.append(op)


def _attach_waits(ops: list[_Raw], waits: list[tuple[float, float]]) -> None:
    """Add each ``Rendezvous`` wait to the innermost op that encloses it (CPU collectives)."""
    ordered = sorted(ops, key=lambda o: o.start)
    starts = [o.start for o in ordered]
    for start, end in waits:
        i = bisect.bisect_right(starts, start) - 1
        while i >= 0 and ordered[i].end < end:
            i -= 1
        if i >= 0:
            ordered[i].waits += end - start


def _enclosing(events: list[tuple[float, float, str]], starts: list[float], t: float) -> str:
    """The name of the event of ``events`` (sorted, disjoint) that contains time ``t``, or ""."""
    i = bisect.bisect_right(starts, t) - 1
    return events[i][2] if i >= 0 and events[i][1] >= t else ""


def _own_ns(stats: Mapping[str, Any]) -> float | None:
    """The device's own duration of an op (``device_duration_ps``, which libtpu writes on TPU ops
    and xprof's op metrics sum; it differs from the event's span on the host-aligned timeline by
    up to milliseconds where the clocks were re-synchronised), None where absent."""
    device_ps = stats.get("device_duration_ps")
    return float(device_ps) / 1e3 if device_ps is not None else None


def _plane_ops(plane: Any, kind: str | None, asynchronous: bool = False) -> list[_Raw]:
    """Op executions of one plane in its backend's layout (see the module docstring); with
    ``asynchronous``, a TPU plane's async spans instead."""
    lines = list(plane.lines)
    modules = sorted(
        (e.start_ns, e.end_ns, _PROGRAM_ID.sub("", e.name))
        for line in lines
        if line.name == _XLA_MODULES
        for e in line.events
    )
    starts = [s for s, _, _ in modules]
    out: list[_Raw] = []
    for line in lines:
        if kind is not None and line.name in (_XLA_OPS, _XLA_MODULES) and kind != "TPU":
            continue  # GPU: derived lines repeat the kernels
        if kind == "TPU" and line.name != (_ASYNC_OPS if asynchronous else _XLA_OPS):
            continue
        if kind != "TPU" and asynchronous:
            continue
        ops: list[_Raw] = []
        waits: list[tuple[float, float]] = []
        for event in line.events:
            stats = dict(event.stats)
            hlo_op = stats.get("hlo_op")
            if hlo_op is None and kind != "TPU":
                if event.name == _RENDEZVOUS:
                    waits.append((event.start_ns, event.end_ns))
                continue
            # TPU: the event is named by the op's text (an async span's ``hlo_op`` names its done)
            op = str(hlo_op).split("::")[-1] if hlo_op is not None and kind != "TPU" else _op_name(event.name)
            module = str(stats.get("hlo_module") or _enclosing(modules, starts, event.start_ns))
            device = stats.get("device_ordinal")
            where = module if device is None else f"{module}\0{int(device)}"
            ops.append(
                _Raw(op, where, event.start_ns, event.end_ns, host=HOST_MEMORY in event.name, own=_own_ns(stats))
            )
        _self_times(ops)
        _attach_waits(ops, waits)
        out += ops
    return out


def _steps(planes: Sequence[Any], modules: Collection[str] | None) -> tuple[tuple[float, float], ...]:
    """Step windows: the host's step annotations, else a device plane's ``Steps`` line, else the
    first device plane's module executions (see the module docstring)."""
    windows = [
        (e.start_ns, e.end_ns)
        for p in planes
        if p.name.startswith("/host:")
        for line in p.lines
        for e in line.events
        if e.name == STEP_EVENT and "step_num" in dict(e.stats)
    ]
    devices = sorted((p for p in planes if _DEVICE_PLANE.search(p.name)), key=lambda p: _ordinal(p.name))
    for name in (_STEPS, _XLA_MODULES):
        if windows or not devices:
            break
        line = next((x for x in devices[0].lines if x.name == name), None)
        windows = [
            (e.start_ns, e.end_ns)
            for e in (line.events if line is not None else ())
            if name == _STEPS or modules is None or _PROGRAM_ID.sub("", e.name) in modules
        ]
    return tuple(sorted(windows))


def _ordinal(plane_name: str) -> tuple[str, int]:
    m = _DEVICE_PLANE.search(plane_name)
    return (m.group(1), int(m.group(2))) if m else ("", -1)


def _read_profile(xspace: str | Path | bytes) -> Any:
    if isinstance(xspace, bytes):
        return jax.profiler.ProfileData.from_serialized_xspace(xspace)
    return jax.profiler.ProfileData.from_file(str(xspace))


def read_trace(
    xspace: str | Path | bytes,
    *,
    modules: Collection[str] | None = None,
    categories: Mapping[str, str] | None = None,
) -> OpTable:
    """Every op execution in an XSpace (file path or serialized bytes), and the step windows.

    ``modules`` keeps only ops of those HLO modules (e.g. ``{"jit_step"}``), dropping the small jit
    helpers and anything else that ran during the capture. ``categories`` maps instruction names
    of those modules to collective kinds (see :func:`op_category`).
    """
    profile = _read_profile(xspace)
    events: list[OpEvent] = []
    beside: list[OpEvent] = []
    host: set[tuple[str, str]] = set()
    platform = "cpu"
    with warnings.catch_warnings():
        # jaxlib >= 0.11 warns that its `event_stats` type has no __module__ on every read.
        warnings.simplefilter("ignore", DeprecationWarning)
        planes = list(profile.planes)
        for plane in planes:
            m = _DEVICE_PLANE.search(plane.name)
            if m is None and not plane.name.startswith("/host:"):
                continue
            platform = m.group(1).lower() if m else platform
            for asynchronous, out in ((False, events), (True, beside)):
                for raw in _plane_ops(plane, m.group(1) if m else None, asynchronous):
                    module, _, ordinal = raw.module.partition("\0")
                    if modules is not None and module not in modules:
                        continue
                    if raw.host:
                        host.add((module, raw.op))
                    device = int(ordinal) if ordinal else int(m.group(2)) if m else -1
                    out.append(_event(raw, device, module, categories))
        steps = _steps(planes, modules)
    events.sort(key=lambda e: (e.device, e.start_ns))
    beside.sort(key=lambda e: (e.device, e.start_ns))
    return OpTable(platform, tuple(events), steps, tuple(beside), frozenset(host))


def _event(raw: _Raw, device: int, module: str, categories: Mapping[str, str] | None) -> OpEvent:
    duration = raw.own if raw.own is not None else raw.end - raw.start
    self_ns = duration - raw.nested if raw.nested or raw.own is not None else None
    return OpEvent(device, module, raw.op, op_category(raw.op, categories), raw.start, raw.end, raw.waits, self_ns)
