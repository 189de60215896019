"""What one compute op costs beyond its roofline: matmuls at a shape-dependent efficiency.

A matmul does not run at the hardware's peak when its dimensions leave the matrix unit partly
empty. :func:`matmuls` reads the dots and convolutions an op runs (its own, or those inside the
fusions it calls) as :class:`Matmul` ``(batch, m, n, k)``; :func:`efficiency` prices each:

* TPU / GPU specs carry the matrix unit's tile (``tile_m``, ``tile_n``, ``tile_k`` constants, each
  with its source): the efficiency is the useful fraction of the padded work,
  ``m n k / (pad(m) pad(n) pad(k))``;
* CPU specs carry a measured curve (``matmul_eff_n<N>`` constants: the FLOP rate of an N x N x N
  matmul over the rate of the largest one measured, :mod:`~harness.metrics.timeline.cpu_calibrate`):
  a matmul of effective size ``(m n k)^(1/3)`` runs at the curve's efficiency there, interpolated
  in log size and clamped at the ends;
* a spec with neither prices matmuls at peak.

A CPU spec says how its simulated devices share the host's cores (``host_cores``: the host's C
cores; the topology: its N devices). XLA:CPU runs each device's ops on the host's cores: a loop
fusion it split into tasks (``backend_config`` ``outer_dimension_partitions``: :func:`threads`)
on up to that many cores, any other on one, and a dot on the intra-op pool. With ``host_cores``
the memory rate is one core's, and an op with k tasks gets ``min(k, C / N)`` cores
(:func:`op_cores`): alone it runs on its k cores, with N devices busy at once each device has
C / N of them, so every op's core time is shared alike. Dots run at the measured sharing curve
(``share_mm_n<N>``: an N x N x N matmul's rate with every device running it at once over alone,
log-size interpolation, clamped). Measured here (AMD EPYC, 2 cores, 8 devices, 2026-11-27): a
tanh fusion split in 2 kept 0.125-0.13 of its alone rate with 8 devices at once (2 / (8 x 2)); one
left on one core (256 KiB or less, 1 core pinned as fast as 2 free) 0.18-0.26 (2 / 8 = 0.25);
matmuls 0.19-0.26 up to N = 128 and 0.12-0.13 from 512.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from harness.metrics.hlo.cost import instruction_flops
from harness.metrics.hlo.model import HloModule, Instruction
from harness.metrics.hlo.text import Line, shape_dims
from harness.metrics.timeline.specs import TimelineSpec

CURVE_PREFIX = "matmul_eff_n"
SHARE_MM_PREFIX = "share_mm_n"
HOST_CORES = "host_cores"
_PARTITIONS = re.compile(r'"outer_dimension_partitions":\[([^\]]*)\]')
TILES = ("tile_m", "tile_n", "tile_k")
_DIMS = {
    key: re.compile(rf"\b{key}=\{{([0-9,]*)\}}")
    for key in ("lhs_batch_dims", "lhs_contracting_dims", "rhs_batch_dims", "rhs_contracting_dims")
}
_DIM_LABELS = re.compile(r"\bdim_labels=([0-9a-z]+)_([0-9a-z]+)->([0-9a-z]+)")


@dataclass(frozen=True)
class Matmul:
    """One dot as ``batch`` independent ``[m, k] x [k, n]`` products; ``flops`` = 2 b m n k (a
    convolution: its FLOPs, with ``k`` the taps x input features that reach one output)."""

    batch: int
    m: int
    n: int
    k: int
    flops: float


def _ints(m: re.Match[str] | None) -> list[int]:
    return [int(v) for v in m.group(1).split(",") if v] if m else []


def _prod(values: Sequence[int]) -> int:
    return math.prod(values) if values else 1


def matmul_of(instr: Line, shapes: Mapping[str, str]) -> Matmul | None:
    """The :class:`Matmul` of a ``dot`` or ``convolution`` (None for any other op or an unreadable one)."""
    if instr.opcode not in ("dot", "convolution") or len(instr.operands) < 2:
        return None
    lhs, rhs = (shape_dims(instr.operand_shapes[i] or shapes.get(instr.operands[i], "")) for i in (0, 1))
    out = shape_dims(instr.shape)
    flops = instruction_flops(instr, shapes) or 0
    if lhs is None or rhs is None or out is None or flops <= 0:
        return None
    if instr.opcode == "dot":
        lb, lc = (_ints(_DIMS[k].search(instr.attributes)) for k in ("lhs_batch_dims", "lhs_contracting_dims"))
        rb, rc = (_ints(_DIMS[k].search(instr.attributes)) for k in ("rhs_batch_dims", "rhs_contracting_dims"))
        batch = _prod([lhs[i] for i in lb if i < len(lhs)])
        k = _prod([lhs[i] for i in lc if i < len(lhs)])
        m = _prod([d for i, d in enumerate(lhs) if i not in lb and i not in lc])
        n = _prod([d for i, d in enumerate(rhs) if i not in rb and i not in rc])
        return Matmul(batch, m, n, k, float(flops))
    labels = _DIM_LABELS.search(instr.attributes)
    if labels is None:
        return None
    out_l = labels.group(3)
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


def points(spec: TimelineSpec, prefix: str) -> list[tuple[float, float]]:
    """A spec's measured curve ``[(size, value)]`` by size from its ``<prefix><size>`` constants."""
    out = []
    for name, c in spec.constants.items():
        if name.startswith(prefix) and name[len(prefix) :].isdigit():
            out.append((float(name[len(prefix) :]), c.value))
    return sorted(out)


def curve(spec: TimelineSpec) -> list[tuple[float, float]]:
    """A spec's measured matmul efficiency curve, ``[(size, efficiency)]`` by size (empty: none)."""
    return points(spec, CURVE_PREFIX)


def interpolate(pts: Sequence[tuple[float, float]], size: float) -> float:
    """``pts``' value at ``size``: linear in log size between the two measured sizes around it,
    clamped to the measured range (1.0 with no points)."""
    if not pts:
        return 1.0
    sizes = [p[0] for p in pts]
    if size <= sizes[0]:
        return pts[0][1]
    if size >= sizes[-1]:
        return pts[-1][1]
    i = bisect.bisect_right(sizes, size)
    (s0, e0), (s1, e1) = pts[i - 1], pts[i]
    w = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
    return e0 + w * (e1 - e0)


def mm_size(mm: Matmul) -> float:
    """A matmul's effective size ``(m n k)^(1/3)``: the N of the N x N x N matmul with its work per batch."""
    return float(mm.m * mm.n * mm.k) ** (1 / 3)


def curve_efficiency(mm: Matmul, pts: Sequence[tuple[float, float]]) -> float:
    """The curve's efficiency at ``mm``'s effective size (:func:`mm_size`, :func:`interpolate`)."""
    return interpolate(pts, mm_size(mm))


def shared(spec: TimelineSpec) -> bool:
    """Whether ``spec`` models a host's cores shared by its devices (see the module docstring)."""
    return HOST_CORES in spec.constants or any(name.startswith(SHARE_MM_PREFIX) for name in spec.constants)


def without_sharing(spec: TimelineSpec) -> TimelineSpec:
    """``spec`` without its host sharing: every op at the spec's rates as they are."""
    kept = {k: v for k, v in spec.constants.items() if k != HOST_CORES and not k.startswith(SHARE_MM_PREFIX)}
    return replace(spec, constants=kept)


def threads(instr: Line) -> int:
    """The tasks XLA:CPU split ``instr`` into (the product of its ``outer_dimension_partitions``),
    1 when it did not."""
    m = _PARTITIONS.search(instr.attributes)
    if m is None:
        return 1
    parts = [int(v.strip().strip('"')) for v in m.group(1).split(",") if v.strip().strip('"')]
    return max(math.prod(parts), 1) if parts else 1


def op_cores(spec: TimelineSpec, tasks: float) -> float:
    """The host cores an op of ``tasks`` tasks runs on: ``min(tasks, C / N)`` with the spec's
    ``host_cores`` C and N devices; 1 on a spec without ``host_cores``."""
    if HOST_CORES not in spec.constants:
        return 1.0
    per_device = spec.value(HOST_CORES) / max(len(spec.topology.device_coords), 1)
    return min(max(tasks, 1.0), per_device)


def efficiency(mm: Matmul, spec: TimelineSpec) -> float:
    """Fraction of peak ``mm`` runs at on ``spec``'s hardware (see the module docstring), in (0, 1]."""
    if all(t in spec.constants for t in TILES):
        tile = tuple(max(int(round(spec.value(t))), 1) for t in TILES)
        eff = tile_efficiency(mm, (tile[0], tile[1], tile[2]))
    else:
        eff = curve_efficiency(mm, curve(spec))
    return min(max(eff, 1e-3), 1.0)


def matmul_seconds(flops: float, mms: Sequence[Matmul], spec: TimelineSpec) -> float:
    """Seconds of ``flops`` matmul FLOPs of which ``mms`` are known dots: each dot at its
    efficiency (and, on a shared host, its sharing ratio), the rest (opaque kernels) at peak."""
    peak = spec.value("peak_flops_per_s")
    share = points(spec, SHARE_MM_PREFIX)
    known = sum(mm.flops for mm in mms)
    seconds = sum(mm.flops / (peak * efficiency(mm, spec) * interpolate(share, mm_size(mm))) for mm in mms)
    rest = max(flops - known, 0.0)
    return seconds + (rest / (peak * (share[-1][1] if share else 1.0)) if rest else 0.0)


def memory_seconds(bytes_: float, spec: TimelineSpec, tasks: float = 1.0) -> float:
    """Seconds to move ``bytes_`` at the spec's bandwidth; with ``host_cores``, one core's, times
    the cores an op of ``tasks`` tasks gets (:func:`op_cores`)."""
    return bytes_ / (spec.value("hbm_bytes_per_s") * op_cores(spec, tasks))


def compute_seconds(
    flops: float, bytes_: float, mms: Sequence[Matmul], spec: TimelineSpec, tasks: float = 1.0
) -> float:
    """One compute op of ``tasks`` tasks: ``max(matmul time, bytes / HBM bandwidth) + op overhead``."""
    return max(matmul_seconds(flops, mms, spec), memory_seconds(bytes_, spec, tasks)) + spec.value("op_overhead_s")
