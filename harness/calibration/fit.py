"""Fit a spec's per-op-class constants to measured per-instruction durations.

A measured trace gives each instruction of the compiled program a duration (the median of its
executions); :func:`samples` pairs it with what the timeline knows of the instruction: its class
and the quantity the class's constant divides:

* ``matmul``: compute ops whose matmul time binds on the base spec (:mod:`~harness.metrics.timeline.
  pricing`): ``x`` = sum of FLOPs / shape efficiency, slope 1 / ``peak_flops_per_s``;
* ``memory``: every other compute op: ``x`` = bytes read and written, slope 1 / ``hbm_bytes_per_s``;
  its intercept is ``op_overhead_s``;
* ``collective``: synchronous collectives: ``x`` = wire bytes scaled to one link of the base spec's
  route, slope 1 / ``link_bytes_per_s``, intercept ``collective_latency_s``.

:func:`fit` fits each class robustly by Theil-Sen regression (the median of pairwise slopes,
then the median intercept; a few mismatched ops move neither). ``weighting="time"`` takes the
slope instead as :func:`time_weighted_slope` (the median of the instructions' own slopes, each
weighted by its traced duration), which prices a class's traced *time* where its long
instructions run at another speed per unit than the many short ones. Count is the default: it
scored better held out (evidence: benchmarks/results/calibration-docstring-findings-2026-11-27.md).
It refuses a class with fewer than ``min_ops`` instructions, naming it; ``matmul`` and ``memory``
are required, ``collective`` is fitted when the trace has any (else the base spec's constants
stay, and the fit says so). Each fitted constant's uncertainty is
the class's median ``|ln(fitted / measured)|`` over its instructions: how far a typical
instruction's price is off. :func:`check_program` refuses a trace whose ops are not this program's
(another compile names its fusions differently). Pure Python + numpy.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from harness.metrics.timeline import pricing
from harness.metrics.timeline.groups import slowest_route
from harness.metrics.timeline.program import Program
from harness.metrics.timeline.simulate import Simulator
from harness.metrics.timeline.specs import Constant, TimelineSpec

MIN_OPS = 8
CLASSES = ("matmul", "memory", "collective")
REQUIRED = ("matmul", "memory")
WEIGHTINGS = ("time", "count")
DEFAULT_WEIGHTING = "count"  # why: the module docstring
MIN_COVERAGE = 0.5  # of the program's compute ops, the share a trace of it must show


class CalibrationError(ValueError):
    """A fit that cannot be made (too few ops of a class, a trace of another program)."""


@dataclass(frozen=True)
class Sample:
    """One instruction: its class, the quantity its class's rate divides, and its measured ns."""

    name: str
    cls: str
    x: float
    measured_ns: float
    source: str = ""


@dataclass(frozen=True)
class ClassFit:
    cls: str
    n: int
    slope_ns: float  # ns per unit of x
    intercept_ns: float
    median_abs_log: float  # residual: median |ln(fitted / measured)| over the class's instructions

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "slope_ns": self.slope_ns,
            "intercept_ns": self.intercept_ns,
            "median_abs_log_residual": self.median_abs_log,
        }


@dataclass(frozen=True)
class Fit:
    spec: TimelineSpec
    classes: Mapping[str, ClassFit]
    notes: tuple[str, ...] = ()
    sources: tuple[Mapping[str, Any], ...] = field(default_factory=tuple)
    weighting: str = DEFAULT_WEIGHTING

    def to_dict(self) -> dict[str, Any]:
        """The spec file: the fitted spec, each class's fit and residuals, the traces it came from."""
        return {
            "spec": self.spec.to_dict(),
            "fit": {k: v.to_dict() for k, v in self.classes.items()},
            "weighting": self.weighting,
            "notes": list(self.notes),
            "traces": [dict(s) for s in self.sources],
        }


def fingerprint(program: Program) -> str:
    """sha256 over the module's running instructions (computation, name, opcode, shape, in
    schedule order): two compiles of one program agree, another program or compile differs."""
    h = hashlib.sha256()
    for comp in sorted(program.ops):
        for op in program.ops[comp]:
            h.update(f"{comp}\0{op.name}\0{op.instr.opcode}\0{op.instr.shape}\n".encode())
    return h.hexdigest()


def check_program(program: Program, durations: Mapping[str, float], where: str) -> None:
    """CalibrationError unless the trace's ops are this program's: every traced op an instruction
    of it, and at least :data:`MIN_COVERAGE` of its compute instructions traced."""
    names = {op.name for ops in program.ops.values() for op in ops}
    unknown = sorted(set(durations) - names)
    if unknown:
        raise CalibrationError(
            f"{where}: {len(unknown)} traced ops are not in the program (e.g. {', '.join(unknown[:3])}): "
            "the trace is of a program compiled differently from the one named"
        )
    compute = {op.name for ops in program.ops.values() for op in ops if op.cls == "compute"}
    seen = len(compute & set(durations))
    if compute and seen < MIN_COVERAGE * len(compute):
        raise CalibrationError(
            f"{where}: the trace shows {seen} of the program's {len(compute)} compute ops (need "
            f"{MIN_COVERAGE:.0%}): not a trace of this program"
        )


@dataclass(frozen=True)
class Busy:
    """One trace's step: ``wall_ns``, the median step window, and ``busy_ns``, one device's op time
    per step (the self times of its ops inside the windows, rendezvous waits taken off, over the
    step count). ``ratio`` (busy / wall) can pass 1 where XLA:CPU runs independent ops at once
    (measured values: benchmarks/results/calibration-docstring-findings-2026-11-27.md)."""

    wall_ns: float
    busy_ns: float
    steps: int
    source: str = ""

    @property
    def ratio(self) -> float:
        return self.busy_ns / self.wall_ns


def busy(events: Sequence[Any], steps: Sequence[tuple[float, float]], device: int, source: str = "") -> Busy | None:
    """:class:`Busy` of ``device``'s ``OpEvent``s over the step windows ``steps``; None without steps
    (a trace not captured by the harness's step annotations) or ops in them."""
    windows = [(a, b) for a, b in steps if b > a]
    if not windows:
        return None
    starts = [a for a, _ in windows]
    total = 0.0
    for e in events:
        if e.device != device:
            continue
        i = bisect.bisect_right(starts, e.start_ns) - 1
        if i >= 0 and e.start_ns < windows[i][1]:
            total += max(e.exclusive_ns - e.rendezvous_wait_ns, 0.0)
    if total <= 0:
        return None
    return Busy(statistics.median(b - a for a, b in windows), total / len(windows), len(windows), source)


def durations(events: Sequence[Any], module: str | None = None, device: int | None = None) -> dict[str, float]:
    """Op name -> median duration (ns) over its executions (``OpEvent``s of ``module`` and ``device``)."""
    by: dict[str, list[float]] = {}
    for e in events:
        if (module is None or e.module == module) and (device is None or e.device == device):
            by.setdefault(e.op, []).append(float(e.end_ns - e.start_ns))
    return {k: statistics.median(v) for k, v in by.items()}


def samples(program: Program, measured: Mapping[str, float], base: TimelineSpec, source: str = "") -> list[Sample]:
    """Classify every measured instruction of ``program`` on ``base`` (see the module docstring)."""
    sim = Simulator(program, base, record=False)
    peak, hbm = base.value("peak_flops_per_s"), base.value("hbm_bytes_per_s")
    link = base.value("link_bytes_per_s")
    out = []
    for ops in program.ops.values():
        for op in ops:
            ns = measured.get(op.name)
            if ns is None or ns <= 0:
                continue
            if op.cls == "compute":
                mms = pricing.matmuls(op.instr, program.module, sim.shapes) if op.flops > 0 else []
                effective = sum(mm.flops / pricing.efficiency(mm, base) for mm in mms)
                effective += max(op.flops - sum(mm.flops for mm in mms), 0.0)
                if effective / peak > op.bytes / hbm:
                    out.append(Sample(op.name, "matmul", effective, ns, source))
                else:
                    out.append(Sample(op.name, "memory", op.bytes, ns, source))
            elif op.cls == "sync" and op.groups:
                route = slowest_route(op.groups, base)
                if route.queues and math.isfinite(route.bytes_per_s):
                    wire = op.wire_bytes(route.size) * link / route.bytes_per_s
                    out.append(Sample(op.name, "collective", wire, ns, source))
    return out


def theil_sen(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept): the median slope over pairs with distinct x, the median of y - slope x."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    i, j = np.triu_indices(len(xs), k=1)
    dx = xs[j] - xs[i]
    keep = dx != 0
    if not keep.any():
        raise CalibrationError("every instruction of the class has the same size: no slope to fit")
    slope = float(np.median((ys[j] - ys[i])[keep] / dx[keep]))
    return slope, float(np.median(ys - slope * xs))


def weighted_median(values: Sequence[float] | np.ndarray, weights: Sequence[float] | np.ndarray) -> float:
    """The value below which half of the total weight lies (the lower one at an exact split)."""
    v, w = np.asarray(values, float), np.asarray(weights, float)
    order = np.argsort(v)
    cum = np.cumsum(w[order])
    return float(v[order][int(np.searchsorted(cum, 0.5 * cum[-1]))])


def time_weighted_slope(x: Sequence[float], y: Sequence[float], intercept: float) -> float:
    """The slope that prices the class's *time* right: each instruction's own slope ``(y - intercept)
    / x``, their median weighted by the measured ``y``. Half of the class's traced time is then in
    instructions priced faster than traced and half slower, so the long instructions that make a
    step carry it, not the many short ones; a few mismatched instructions still cannot move it."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    keep = xs > 0
    if not keep.any():
        raise CalibrationError("no instruction of the class has a positive size: no slope to fit")
    return weighted_median((ys[keep] - intercept) / xs[keep], ys[keep])


def _fit_class(cls: str, pts: Sequence[Sample], weighting: str = DEFAULT_WEIGHTING) -> ClassFit:
    x, y = [p.x for p in pts], [p.measured_ns for p in pts]
    slope, intercept = theil_sen(x, y)
    if weighting == "time":
        slope = time_weighted_slope(x, y, intercept)
    if slope <= 0:
        raise CalibrationError(f"class {cls!r}: the fitted time per unit is {slope:.3g} ns (not positive)")
    fitted = [max(slope * p.x + intercept, 1e-9) for p in pts]
    resid = statistics.median(abs(math.log(f / p.measured_ns)) for f, p in zip(fitted, pts, strict=True))
    return ClassFit(cls, len(pts), slope, intercept, resid)


def fit(
    pts: Sequence[Sample],
    base: TimelineSpec,
    min_ops: int = MIN_OPS,
    origin: str = "",
    weighting: str = DEFAULT_WEIGHTING,
) -> Fit:
    """Fit ``base``'s constants to ``pts`` (see the module docstring): ``weighting`` "time" (each class's
    slope by :func:`time_weighted_slope`) or "count" (Theil-Sen's, every instruction alike).
    CalibrationError naming every class with too few instructions."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting {weighting!r}: one of {', '.join(WEIGHTINGS)}")
    by = {c: [p for p in pts if p.cls == c] for c in CLASSES}
    short = [f"{c} ({len(by[c])})" for c in CLASSES if (c in REQUIRED or by[c]) and len(by[c]) < min_ops]
    if short:
        raise CalibrationError(
            f"too few instructions to fit (need {min_ops} per class): {', '.join(short)}; trace programs "
            "that run more of them, or pass a smaller --min-ops"
        )
    classes = {c: _fit_class(c, by[c], weighting) for c in CLASSES if by[c]}
    what = f"fitted: {origin} " if origin else "fitted: "

    def const(value: float, unit: str, c: ClassFit, role: str) -> Constant:
        how = "time-weighted" if weighting == "time" else "Theil-Sen"
        source = f"{what}{role} of the {c.cls} class's {how} fit over {c.n} instructions"
        return Constant(value, unit, source, max(c.median_abs_log, 0.02))

    mm, mem = classes["matmul"], classes["memory"]
    constants = dict(base.constants)
    constants["peak_flops_per_s"] = const(1e9 / mm.slope_ns, "FLOP/s", mm, "1 / slope")
    constants["hbm_bytes_per_s"] = const(1e9 / mem.slope_ns, "B/s", mem, "1 / slope")
    constants["op_overhead_s"] = const(max(mem.intercept_ns, 0.0) * 1e-9, "s", mem, "intercept")
    notes = []
    if "collective" in classes:
        col = classes["collective"]
        constants["link_bytes_per_s"] = const(1e9 / col.slope_ns, "B/s", col, "1 / slope")
        constants["collective_latency_s"] = const(max(col.intercept_ns, 0.0) * 1e-9, "s", col, "intercept")
    else:
        notes.append("no synchronous collectives traced: link_bytes_per_s and collective_latency_s from the base spec")
    spec = replace(base, name=f"{base.name}+fit", constants=constants, notes=(*base.notes, *notes))
    return Fit(spec, classes, tuple(notes), weighting=weighting)
