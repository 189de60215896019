"""What one compute op costs beyond its roofline: matmuls at a shape-dependent efficiency.

A matmul does not run at the hardware's peak when its dimensions leave the matrix unit partly
empty. :func:`matmuls` reads the dots and convolutions an op runs (its own, or those inside the
fusions it calls) as :class:`Matmul` ``(batch, m, n, k)``; :func:`efficiency` prices each:

* TPU / GPU specs carry the matrix unit's tile (``tile_m``, ``tile_n``, ``tile_k`` constants, each
  with its source): the tile efficiency is the useful fraction of the padded work,
  ``m n k / (pad(m) pad(n) pad(k))``;
* a spec may carry a measured curve (``matmul_eff_n<N>`` constants: CPU, the FLOP rate of an
  N x N x N matmul over the rate of the largest one measured, :mod:`~harness.calibration.cpu`;
  TPU / GPU, a published GEMM table's rate over the datasheet peak, :mod:`~harness.metrics.
  timeline.rates`): a matmul of effective size ``(m n k)^(1/3)`` (per product of a batched
  dot) runs at the curve's efficiency there, interpolated in log size and clamped at the ends;
* the efficiency is the tile's times the curve's (either is 1 where the spec has none); a GEMM
  table's row that its tile pads is stored net of that padding (:func:`~harness.metrics.timeline.
  rates.cubic_tile_efficiency`), so each row is priced at its measured rate.

:func:`compute_seconds` is an op's time on the compute stream, ``max(matmul time, bytes / HBM) +
overhead``, where FLOPs outside any dot (a splash kernel) run at the curve's best point (the best
measured GEMM rate; the peak without a curve) and the HBM bandwidth is the datasheet's times the
copy table's efficiency at the op's bytes (``hbm_eff_b<B>``, log-interpolated, clamped; 1 without
a curve). Pure Python; it takes the
op's instruction, the module's shapes and the spec, so it does not depend on how the program
was classified.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.metrics.hlo.cost import instruction_flops
from harness.metrics.hlo.model import DotDims, HloModule, Instruction
from harness.metrics.hlo.text import shape_dims
from harness.metrics.timeline import rates
from harness.metrics.timeline.specs import TimelineSpec

CURVE_PREFIX = "matmul_eff_n"
TILES = ("tile_m", "tile_n", "tile_k")


@dataclass(frozen=True)
class Matmul:
    """One dot as ``batch`` independent ``[m, k] x [k, n]`` products; ``flops`` = 2 b m n k (a
    convolution: its FLOPs, with ``k`` the taps x input features that reach one output)."""

    batch: int
    m: int
    n: int
    k: int
    flops: float


def _prod(values: Sequence[int]) -> int:
    return math.prod(values) if values else 1


def matmul_of(instr: Instruction, shapes: Mapping[str, str]) -> Matmul | None:
    """The :class:`Matmul` of a ``dot`` or ``convolution`` (None for any other op or an unreadable one)."""
    if instr.opcode not in ("dot", "convolution") or len(instr.operands) < 2:
        return None
    lhs, rhs = (shape_dims(instr.operand_shapes[i] or shapes.get(instr.operands[i], "")) for i in (0, 1))
    out = shape_dims(instr.shape)
    flops = instruction_flops(instr, shapes) or 0
    if lhs is None or rhs is None or out is None or flops <= 0:
        return None
    if instr.opcode == "dot":
        dot = instr.dot or DotDims()
        lb, lc, rb, rc = dot.lhs_batch, dot.lhs_contracting, dot.rhs_batch, dot.rhs_contracting
        batch = _prod([lhs[i] for i in lb if i < len(lhs)])
        k = _prod([lhs[i] for i in lc if i < len(lhs)])
        m = _prod([d for i, d in enumerate(lhs) if i not in lb and i not in lc])
        n = _prod([d for i, d in enumerate(rhs) if i not in rb and i not in rc])
        return Matmul(batch, m, n, k, float(flops))
    if instr.dim_labels is None:
        return None
    out_l = instr.dim_labels[2]
    features = out[out_l.index("f")] if "f" in out_l else 1
    elements = _prod(out)
    m = max(elements // max(features, 1), 1)
    k = max(round(flops / (2 * elements)), 1)
    return Matmul(1, m, features, k, float(flops))


def matmuls(instr: Instruction, module: HloModule, shapes: Mapping[str, str]) -> list[Matmul]:
    """The matmuls one execution of ``instr`` runs: itself, or the dots and convolutions of the
    fusions (and nested fusions) it calls. ``shapes``: instruction name -> shape, module-wide."""
    own = matmul_of(instr, shapes)
    if own is not None:
        return [own]
    if instr.opcode != "fusion":
        return []
    out: list[Matmul] = []
    seen: set[str] = set()
    stack = [c for c in instr.callees if c in module.computations]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        for inner in module.computations[name]:
            one = matmul_of(inner, shapes)
            if one is not None:
                out.append(one)
            elif inner.opcode == "fusion":
                stack += [c for c in inner.callees if c in module.computations]
    return out


def _padded(d: int, tile: int) -> int:
    return -(-d // tile) * tile if tile > 1 else d


def tile_efficiency(mm: Matmul, tile: tuple[int, int, int]) -> float:
    """Useful over padded work of ``mm`` on a matrix unit of ``tile`` = (m, n, k) elements."""
    tm, tn, tk = tile
    useful = mm.m * mm.n * mm.k
    padded = _padded(mm.m, tm) * _padded(mm.n, tn) * _padded(mm.k, tk)
    return useful / padded if padded > 0 else 1.0


def curve(spec: TimelineSpec, prefix: str = CURVE_PREFIX) -> list[tuple[float, float]]:
    """A spec's measured efficiency curve, ``[(size, efficiency)]`` by size (empty: none): the
    matmul curve, or with ``prefix`` = ``rates.HBM_PREFIX`` the HBM one."""
    cached = _CURVES.get((id(spec), prefix))
    if cached is not None and cached[0] is spec:
        return cached[1]
    points = []
    for name, c in spec.constants.items():
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            points.append((float(name[len(prefix) :]), c.value))
    points.sort()
    if len(_CURVES) > 64:
        _CURVES.clear()
    _CURVES[(id(spec), prefix)] = (spec, points)
    return points


_CURVES: dict[tuple[int, str], tuple[TimelineSpec, list[tuple[float, float]]]] = {}


def curve_efficiency(mm: Matmul, points: Sequence[tuple[float, float]]) -> float:
    """The curve's efficiency at ``mm``'s effective size ``(m n k)^(1/3)`` (log-size interpolation,
    clamped to the measured range)."""
    return interpolate((mm.m * mm.n * mm.k) ** (1 / 3), points)


def interpolate(size: float, points: Sequence[tuple[float, float]]) -> float:
    """A curve's value at ``size``: log-size interpolation between its points, clamped to their range
    (1 for an empty curve)."""
    if not points:
        return 1.0
    sizes = [p[0] for p in points]
    if size <= sizes[0]:
        return points[0][1]
    if size >= sizes[-1]:
        return points[-1][1]
    i = bisect.bisect_right(sizes, size)
    (s0, e0), (s1, e1) = points[i - 1], points[i]
    w = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
    return e0 + w * (e1 - e0)


def efficiency(mm: Matmul, spec: TimelineSpec) -> float:
    """Fraction of peak ``mm`` runs at on ``spec``'s hardware (see the module docstring), in (0, 1]."""
    eff = curve_efficiency(mm, curve(spec))
    if all(t in spec.constants for t in TILES):
        tile = tuple(max(int(round(spec.value(t))), 1) for t in TILES)
        eff *= tile_efficiency(mm, (tile[0], tile[1], tile[2]))
    return min(max(eff, 1e-3), 1.0)


def hbm_bytes_per_s(bytes_: float, spec: TimelineSpec, rate: str = "hbm_bytes_per_s") -> float:
    """The HBM bandwidth an op moving ``bytes_`` (read + written) reaches: ``rate`` times the copy
    curve's efficiency at that size (``hbm_eff_b<B>``; 1 without one)."""
    return spec.value(rate) * interpolate(max(bytes_, 1.0), curve(spec, rates.HBM_PREFIX))


def matmul_seconds(flops: float, mms: Sequence[Matmul], spec: TimelineSpec) -> float:
    """Seconds of ``flops`` matmul FLOPs of which ``mms`` are known dots: each dot at its
    efficiency, the rest (opaque kernels) at the best measured GEMM rate (the peak without a curve)."""
    peak = spec.value("peak_flops_per_s")
    known = sum(mm.flops for mm in mms)
    seconds = sum(mm.flops / (peak * efficiency(mm, spec)) for mm in mms)
    return seconds + max(flops - known, 0.0) / (peak * rates.best_matmul_efficiency(curve(spec)))


def scalar_seconds(spec: TimelineSpec) -> float | None:
    """A scalar op's fixed cost where the spec measures one (``scalar_op_s``, TPU), else None (the op
    pays ``op_overhead_s`` like any other: on a GPU or CPU a scalar op is a kernel launch or a call).
    ``scalar_ops = "with_launch"`` adds ``program_launch_s`` (the measurement's other reading; the simulator
    then starts a program that leads with a scalar op without the launch, which that price holds)."""
    if "scalar_op_s" not in spec.constants:
        return None
    extra = spec.value("program_launch_s") if spec.scalar_ops == "with_launch" else 0.0
    return spec.value("scalar_op_s") + extra


def compute_seconds(
    flops: float, bytes_: float, mms: Sequence[Matmul], spec: TimelineSpec, *, scalar: bool = False
) -> float:
    """One compute op: ``max(matmul time, bytes / HBM bandwidth at its size) + op overhead``; a
    scalar op (``Op.scalar``) pays :func:`scalar_seconds` instead of the overhead where the spec has it."""
    hbm = hbm_bytes_per_s(bytes_, spec) if bytes_ > 0 else spec.value("hbm_bytes_per_s")
    fixed = scalar_seconds(spec) if scalar else None
    overhead = spec.value("op_overhead_s") if fixed is None else fixed
    return max(matmul_seconds(flops, mms, spec), bytes_ / hbm) + overhead
