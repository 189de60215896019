"""Capture an XLA trace and turn it into per-device time by category.

Parsing goes through `jax.profiler.ProfileData` (ships with jaxlib, always matches the
writer). Every event carrying an `hlo_op` stat is one op execution. Its device is the
`/device:<KIND>:N` plane on GPU/TPU, and the `device_ordinal` stat on CPU, where all
ops run on host threads (`/host:CPU`) and a thread does not identify a device. On
device planes with an `XLA Ops` line (TPU), only that line is read, so ops are not
counted twice. Verified on CPU (8 simulated devices) and on one H100 (ops on the
`Stream #N(...)` lines of `/device:GPU:0`); the TPU layout follows xprof's source.

Categories are `compute` or a collective kind from `harness.metrics.hlo.KINDS`. An
async collective (`*-start` ... `*-done`) occupies the span from the start of its start
op to the end of its done op. Per device, over the window from the first op start to
the last op end across all devices:

    busy       = union(compute, collectives)
    exposed    = collective time not overlapped by compute on the same device
    idle       = window - busy
    wasted     = exposed + idle          wasted_fraction = wasted / window

On CPU the nested `Rendezvous` events (waiting for the other participants) are summed
into `rendezvous_wait_ns` of each collective.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
import warnings
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax

from harness.metrics.hlo import KINDS

COMPUTE = "compute"
CPU_NOTE = (
    "CPU trace: collectives are in-process rendezvous plus memcpy between threads of one "
    "process, mostly waiting for the slowest participant; their timings do not transfer "
    "to TPU or GPU interconnects. Use the static collective counts and bytes instead."
)
_DEVICE_PLANE = re.compile(r"^/device:([A-Z]+):(\d+)$")
_XLA_OPS_LINE = "XLA Ops"
_RENDEZVOUS = "Rendezvous"
_ASYNC_SUFFIX = re.compile(r"-(start|done)(?=[.\d]*$)")
_KIND_PREFIX = re.compile(r"^(" + "|".join(sorted(KINDS, key=len, reverse=True)) + r")(?:$|[.\-_])")


@dataclass(frozen=True)
class OpEvent:
    """One execution of one HLO op on one device; times in ns from the profile start."""

    device: int
    module: str
    op: str
    category: str
    start_ns: float
    end_ns: float
    rendezvous_wait_ns: float = 0.0

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class OpTable:
    """The op executions of one trace, sorted by device then start time."""

    platform: str
    events: tuple[OpEvent, ...]

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(sorted({e.device for e in self.events}))


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
    """Total time of one op of one module, summed over devices and executions."""

    module: str
    op: str
    category: str
    total_ns: float
    count: int


@dataclass(frozen=True)
class TraceMetrics:
    """Per-device time by category and the ops that took the most time."""

    platform: str
    devices: tuple[DeviceMetrics, ...]
    top_ops: tuple[OpSummary, ...]
    note: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            "platform": self.platform,
            "devices": [asdict(d) for d in self.devices],
            "top_ops": [asdict(o) for o in self.top_ops],
            "note": self.note,
        }


# ---------------------------------------------------------------- capture


def find_xplanes(log_dir: str | Path) -> list[Path]:
    """All `*.xplane.pb` files written under a `jax.profiler.trace` log dir, oldest first."""
    return sorted(Path(log_dir).glob("plugins/profile/*/*.xplane.pb"))


def capture_trace(run: Callable[[], Any], log_dir: str | Path, *, steps: int = 1) -> Path:
    """Call `run()` `steps` times under `jax.profiler.trace(log_dir)`; return the new xplane file.

    Each call is a `StepTraceAnnotation` and is blocked on, so its device work lands in the
    trace. Compile (warm up) before capturing: compilation inside the trace is noise.
    """
    before = set(find_xplanes(log_dir))
    with jax.profiler.trace(str(log_dir)):
        for step in range(steps):
            with jax.profiler.StepTraceAnnotation("step", step_num=step):
                jax.block_until_ready(run())
    written = find_xplanes(log_dir)
    fresh = [p for p in written if p not in before]
    if not (fresh or written):
        raise FileNotFoundError(f"jax.profiler.trace wrote no .xplane.pb under {log_dir}")
    return (fresh or written)[-1]


# ---------------------------------------------------------------- parsing


def op_category(op: str, categories: Mapping[str, str] | None = None) -> str:
    """`compute`, or the collective kind of an op (`all-gather-start.3` -> `all-gather`).

    `categories` (instruction name -> kind, from `hlo.collective_instructions`) wins over
    the name, which is all there is otherwise: a collective fused on TPU may be called
    `fusion.65`, and only the HLO says it is a reduce-scatter.
    """
    if categories is not None and op in categories:
        return categories[op]
    if op.startswith("all-reduce-scatter"):
        return "reduce-scatter"
    m = _KIND_PREFIX.match(op)
    return m.group(1) if m else COMPUTE


def _platform(planes: Iterable[Any]) -> str:
    for plane in planes:
        m = _DEVICE_PLANE.search(plane.name)
        if m:
            return m.group(1).lower()
    return "cpu"


def _op_lines(plane: Any) -> list[Any]:
    lines = list(plane.lines)
    xla_ops = [line for line in lines if line.name == _XLA_OPS_LINE]
    return xla_ops or lines


def _line_events(line: Any, plane_device: int | None, categories: Mapping[str, str] | None) -> list[OpEvent]:
    """Op events of one trace line, with CPU rendezvous waits folded into their collective.

    An event is an op if it has an `hlo_op` stat or, on a device's `XLA Ops` line, always
    (its name is the op; unverified on TPU, where that line is expected).
    """
    every_event_is_op = line.name == _XLA_OPS_LINE
    ops: list[OpEvent] = []
    waits: list[tuple[float, float]] = []
    for event in line.events:
        stats = dict(event.stats)
        op = stats.get("hlo_op") or (event.name if every_event_is_op else None)
        if op is not None:
            device = plane_device if plane_device is not None else int(stats.get("device_ordinal", -1))
            module = str(stats.get("hlo_module", ""))
            category = op_category(str(op), categories)
            ops.append(OpEvent(device, module, str(op), category, event.start_ns, event.end_ns))
        elif event.name == _RENDEZVOUS:
            waits.append((event.start_ns, event.end_ns))
    return _attach_waits(ops, waits)


def _attach_waits(ops: list[OpEvent], waits: list[tuple[float, float]]) -> list[OpEvent]:
    """Add each wait to the collective that encloses it (ops on one line never overlap)."""
    if not waits:
        return ops
    ops = sorted(ops, key=lambda e: e.start_ns)
    starts = [e.start_ns for e in ops]
    extra = [0.0] * len(ops)
    for wait_start, wait_end in waits:
        i = bisect.bisect_right(starts, wait_start) - 1
        if i >= 0 and ops[i].category != COMPUTE and ops[i].end_ns >= wait_end:
            extra[i] += wait_end - wait_start
    return [dataclasses.replace(e, rendezvous_wait_ns=w) if w else e for e, w in zip(ops, extra, strict=True)]


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
    """Every op execution in an XSpace (file path or serialized bytes).

    `modules` keeps only ops of those HLO modules (e.g. `{"jit_step"}`), dropping the
    small jit helpers and anything else that ran during the capture. `categories` maps
    instruction names of those modules to collective kinds (see `op_category`).
    """
    profile = _read_profile(xspace)
    events: list[OpEvent] = []
    with warnings.catch_warnings():
        # jaxlib >= 0.11 warns that its `event_stats` type has no __module__ on every read.
        warnings.simplefilter("ignore", DeprecationWarning)
        for plane in profile.planes:
            m = _DEVICE_PLANE.search(plane.name)
            for line in _op_lines(plane) if m else plane.lines:
                events += _line_events(line, int(m.group(2)) if m else None, categories)
    if modules is not None:
        events = [e for e in events if e.module in modules]
    events.sort(key=lambda e: (e.device, e.start_ns))
    return OpTable(_platform(profile.planes), tuple(events))


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


def top_ops(events: Iterable[OpEvent], n: int = 20) -> tuple[OpSummary, ...]:
    """The `n` (module, op) pairs with the most total time, summed over devices and executions."""
    totals: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        acc = totals[(e.module, e.op, e.category)]
        acc[0] += e.duration_ns
        acc[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return tuple(OpSummary(m, op, cat, total, int(count)) for (m, op, cat), (total, count) in ranked[:n])


def analyze_trace(
    xspace: str | Path | bytes,
    *,
    modules: Collection[str] | None = None,
    categories: Mapping[str, str] | None = None,
    top: int = 20,
) -> TraceMetrics:
    """Read a trace and compute per-device metrics and the top ops (see `read_trace`)."""
    table = read_trace(xspace, modules=modules, categories=categories)
    return TraceMetrics(
        platform=table.platform,
        devices=device_metrics(table.events),
        top_ops=top_ops(table.events, top),
        note=CPU_NOTE if table.platform == "cpu" else None,
    )
