"""Capture an XLA trace and turn it into per-device time by category, by scope and by step.

Reading the XSpace (backend layouts and what each rests on) is :mod:`harness.metrics.measured.xspace`.
Categories are ``compute`` or a collective kind from ``harness.vocabulary.KINDS``; the per-device
accounting over a window (busy, exposed collective time, idle, wasted) is
:mod:`harness.metrics.measured.accounting`, shared with the predicted timeline.

The whole-trace window runs from the first op start to the last op end across all devices. Each
traced *step* (one call of the stage) has its own window, from the host's step annotation: there,
host time before, between and after the device's ops is idle (a Python loop over a compiled step
shows its gaps). Per step, means over devices: compute, exposed time by collective kind and idle
(they sum to the window), and the ops' self time by model scope (:mod:`harness.metrics.compiled.attribution`);
these per-step samples are what a diff's intervals are computed from.

On CPU the nested ``Rendezvous`` events (waiting for the other participants) are summed into
``rendezvous_wait_ns`` of each collective.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import jax

from harness.families import StepSample, TopOp, Trace, TraceDevice, XprofProfile
from harness.metrics.compiled.attribution import Scopes, coverage, time_by_scope
from harness.metrics.measured.accounting import DeviceMetrics, device_metrics, window_metrics
from harness.metrics.measured.xplane_read import op_metadata, peaks, read_xspace
from harness.metrics.measured.xspace import COMPUTE, STEP_EVENT, OpEvent, OpTable, read_trace
from harness.metrics.xprof.metrics import OpCost, op_costs, op_family, op_profile, xprof_converter_profile

CPU_NOTE = (
    "CPU trace: collectives are in-process rendezvous plus memcpy between threads of one "
    "process, mostly waiting for the slowest participant; their timings do not transfer "
    "to TPU or GPU interconnects. Use the static collective counts and bytes instead."
)
PERFETTO_TRACE = "perfetto_trace.json.gz"


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


def top_ops(events: Iterable[OpEvent], n: int = 20, scopes: Scopes | None = None) -> tuple[TopOp, ...]:
    """The ``n`` (module, op) pairs with the most self time, summed over devices and executions
    (a ``while`` counts its own overhead, its body's ops count themselves), with each op's model
    scope and the source line that traced it (when the program's HLO was given)."""
    totals: dict[tuple[str, str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for e in events:
        acc = totals[(e.module, e.op, e.category)]
        acc[0] += e.exclusive_ns
        acc[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return tuple(
        TopOp(
            module=m,
            op=op,
            category=cat,
            total_ns=total,
            count=int(count),
            scope=scopes.of(op) if scopes else "",
            source=scopes.source.get(op, "") if scopes else "",
        )
        for (m, op, cat), (total, count) in ranked[:n]
    )


def _categories(d: DeviceMetrics) -> dict[str, float]:
    """Compute, exposed collective time by kind (exposed time shared out by each kind's covered
    time) and idle of one device: they sum to its window."""
    out = {COMPUTE: d.compute_ns}
    total = sum(d.collective_ns_by_kind.values())
    for kind, ns in d.collective_ns_by_kind.items():
        out[kind] = d.exposed_collective_ns * ns / total if total else 0.0
    out["idle"] = d.idle_ns
    return out


def step_samples(table: OpTable, scopes: Scopes | None = None) -> list[StepSample]:
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
            for k, v in _categories(window_metrics(d, mine[d], (start, end))).items():
                categories[k] += v / len(devices)
        spans = ((e.op, e.exclusive_ns / len(devices)) for e in events)
        by_scope = time_by_scope(spans, scopes) if scopes else {}
        out.append(StepSample(window_ns=end - start, categories=dict(categories), by_scope=by_scope))
    return out


XPROF_COSTS_NOTE = (
    "a trace carries no FLOPs or bytes per op here: utilisations are 0 and wasted % is the time %; "
    "xprof's converter (converter) reads libtpu's per-op costs where the trace has them"
)


def xprof_profile(table: OpTable, xspace: str | Path | bytes | None = None) -> XprofProfile:
    """XProf's op-profile numbers (:func:`harness.metrics.xprof.metrics.op_profile`) of every op
    of the trace, summed over devices as xprof combines its cores, and, for a device trace file,
    xprof's own converter on it (``converter``; None on CPU, whose traces have no device planes).

    A TPU profile carries libtpu's per-op costs and the device's peaks
    (:func:`harness.metrics.measured.xplane_read.op_metadata`, :func:`~harness.metrics.measured.xplane_read.peaks`):
    then each op is priced with them and categorised by its ``hlo_category``, as xprof does, and
    the numbers agree with the converter's (``tests/harness/metrics/test_real_profile.py``)."""
    meta = _tpu_metadata(table, xspace)
    if meta is not None:
        costs, (peak_flops, peak_hbm) = meta
        out = op_profile(costs, peak_flops_per_s=peak_flops, hbm_bytes_per_s=peak_hbm).replace(note=XPROF_TPU_NOTE)
    else:
        rows = ((e.op, e.category if e.category != COMPUTE else op_family(e.op), e.exclusive_ns) for e in table.events)
        out = op_profile(op_costs(rows), peak_flops_per_s=0.0, hbm_bytes_per_s=0.0).replace(note=XPROF_COSTS_NOTE)
    path = xspace if isinstance(xspace, str | Path) else None
    converter = xprof_converter_profile(path) if path is not None and table.platform != "cpu" else None
    return out.replace(converter=converter) if converter is not None else out


XPROF_TPU_NOTE = (
    "per-op FLOPs, HBM bytes (memory_access_breakdown) and categories (hlo_category) as libtpu wrote "
    "them in the profile; peaks from the device plane"
)


def _tpu_metadata(table: OpTable, xspace: str | Path | bytes | None) -> tuple[list[OpCost], tuple[float, float]] | None:
    """The trace's ops priced with the costs libtpu wrote in it, summed per op over devices and
    executions (named ``<module>/<op>`` where two modules share an op name), and the peaks; None
    for a trace without them (CPU, GPU, our own predicted XSpace without ``hlo_category``)."""
    if xspace is None or table.platform != "tpu":
        return None
    planes = read_xspace(xspace)
    meta = op_metadata(planes)
    if not meta or not any(m.category for m in meta.values()):
        return None
    acc: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for e in table.events:
        entry = acc[(e.module, e.op)]
        entry[0] += e.exclusive_ns
        entry[1] += 1
    shared = {op for op, n in Counter(op for _, op in acc).items() if n > 1}
    out = []
    for (module, op), (ns, count) in acc.items():
        m = meta.get((module, op))
        category = m.category if m is not None and m.category else op_family(op)
        flops, hbm = (m.flops, m.hbm_bytes) if m is not None else (0.0, 0.0)
        name = f"{module}/{op}" if op in shared else op
        out.append(OpCost(name, category, ns, flops * count, hbm * count, int(count)))
    return out, peaks(planes)


def analyze_trace(
    xspace: str | Path | bytes,
    *,
    modules: Collection[str] | None = None,
    categories: Mapping[str, str] | None = None,
    scopes: Scopes | None = None,
    top: int = 20,
) -> Trace:
    """Read a trace into the ``trace`` family: per-device metrics over the whole trace, the top ops,
    and per-step samples by category and (given the program's ``scopes``) by scope (see
    :func:`harness.metrics.measured.xspace.read_trace`)."""
    table = read_trace(xspace, modules=modules, categories=categories)
    samples = step_samples(table, scopes)
    by_scope: dict[str, float] = defaultdict(float)
    for sample in samples:
        for scope, ns in (sample.by_scope or {}).items():
            by_scope[scope] += ns / len(samples)
    return Trace(
        platform=table.platform,
        devices=tuple(TraceDevice(**asdict(d)) for d in device_metrics(table.events)),
        top_ops=top_ops(table.events, top, scopes),
        note=CPU_NOTE if table.platform == "cpu" else None,
        step_samples=tuple(samples),
        by_scope=dict(by_scope),
        scope_coverage=coverage(by_scope) if scopes else None,
        xprof=xprof_profile(table, xspace),
        scope_inferred=_inferred_share(table.events, scopes) if scopes else None,
    )


def _inferred_share(events: Sequence[OpEvent], scopes: Scopes) -> float | None:
    """Share of the ops' self time whose scope was inferred, not named by the op itself."""
    total = sum(e.exclusive_ns for e in events)
    return None if total <= 0 else sum(e.exclusive_ns for e in events if e.op in scopes.inferred) / total
