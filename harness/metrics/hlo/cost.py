"""What a compiled program's instructions cost: matmul FLOPs and memory traffic.

Per instruction (read once, while parsing: :attr:`~harness.metrics.hlo.model.Line.flops`
and ``traffic``) and per program, per device, per call of the ENTRY computation; a ``while`` body
counts its trip count times (:mod:`harness.metrics.hlo.loops`), a call or conditional the
computations it runs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence

from harness.metrics.hlo.collectives import ASYNC_CONTINUATIONS
from harness.metrics.hlo.loops import CONTROL_FLOW, callees
from harness.metrics.hlo.model import HloModule
from harness.metrics.hlo.text import (
    DEVICE_MEMORY,
    DIM_LABELS,
    Line,
    aliased_operands,
    shape_bytes,
    shape_dims,
    top_level_items,
)

# --------------------------------------------------------------------------- matmul FLOPs

_WINDOW = re.compile(r"\bwindow=\{([^}]*)\}")
_LHS_CONTRACTING = re.compile(r"\blhs_contracting_dims=\{([0-9,]*)\}")


def _elements(dims: tuple[int, ...] | None) -> int:
    out = 1
    for d in dims or ():
        out *= d
    return out


def _matmul_flops(instr: Line, shapes: Mapping[str, str]) -> int:
    """2 x output elements x contracted size of a ``dot`` or ``convolution`` (TPU writes dots as these)."""

    def operand(i: int) -> tuple[int, ...] | None:
        return shape_dims(instr.operand_shapes[i] or shapes.get(instr.operands[i], ""))

    out = _elements(shape_dims(instr.shape))
    if instr.opcode == "dot":
        lhs, m = operand(0), _LHS_CONTRACTING.search(instr.attributes)
        if lhs is None or m is None:
            return 0
        return 2 * out * _elements(tuple(lhs[int(i)] for i in m.group(1).split(",") if i))
    labels, lhs, rhs = DIM_LABELS.search(instr.attributes), operand(0), operand(1)
    if labels is None or lhs is None or rhs is None:
        return 0
    lhs_l, rhs_l, out_l = labels.groups()
    out_dims = shape_dims(instr.shape) or ()
    window = _window(instr.attributes)
    taps, out_spatial = 1, 1
    for d in sorted(c for c in rhs_l if c.isdigit()):  # spatial dims: count kernel taps that hit input
        size = rhs[rhs_l.index(d)]
        out_n, in_n = out_dims[out_l.index(d)], lhs[lhs_l.index(d)]
        taps *= _spatial_taps(out_n, in_n, size, {k: v[int(d)] for k, v in window.items()})
        out_spatial *= out_n
    return 2 * (out // max(out_spatial, 1)) * taps * rhs[rhs_l.index("i")]


def _window(attributes: str) -> dict[str, list[int]]:
    """``window={size=8 stride=7 pad=7_7 lhs_dilate=8}`` -> {"stride": [7], "pad_lo": [7], ...} ('x' per dim)."""
    m = _WINDOW.search(attributes)
    out: dict[str, list[int]] = {}
    for item in m.group(1).split() if m else ():
        key, _, value = item.partition("=")
        if key == "pad":
            out["pad_lo"] = [int(v.split("_")[0]) for v in value.split("x")]
        elif key in ("stride", "lhs_dilate", "rhs_dilate"):
            out[key] = [int(v) for v in value.split("x")]
    return out


def _spatial_taps(out_n: int, in_n: int, size: int, w: Mapping[str, int]) -> int:
    """Kernel taps over all output positions of one spatial dim that land on an input element
    (not padding, not a hole of lhs dilation: XLA writes batched matmuls as dilated convolutions)."""
    stride, pad, lhs_d, rhs_d = w.get("stride", 1), w.get("pad_lo", 0), w.get("lhs_dilate", 1), w.get("rhs_dilate", 1)
    return sum(
        1
        for o in range(out_n)
        for t in range(size)
        if (p := o * stride + t * rhs_d - pad) % lhs_d == 0 and 0 <= p // lhs_d < in_n
    )


# The splash attention kernel (ltx2.splash_attention, a Mosaic custom call) is opaque to HLO; its
# forward call takes (mask info, mask info, q, k, v, segment ids...) with q ``[..., L, K]`` and
# k ``[..., S, K]``, and does 2 x L x S x K for the scores and again for the values per q row set.
_SPLASH_FORWARD = re.compile(r"^splash_mha_fwd")


def _splash_flops(instr: Line, shapes: Mapping[str, str]) -> int:
    dims = [shape_dims(instr.operand_shapes[i] or shapes.get(instr.operands[i], "")) for i in (2, 3)]
    q, k = dims
    if q is None or k is None or len(q) < 2 or len(k) < 2:
        return 0
    return 4 * _elements(q) * k[-2]


def instruction_flops(instr: Line, shapes: Mapping[str, str]) -> int | None:
    """Matmul FLOPs of one execution of a ``dot``, ``convolution`` or splash kernel call; None for
    any other op (``shapes``: instruction name -> shape in its computation)."""
    if instr.opcode in ("dot", "convolution"):
        return _matmul_flops(instr, shapes)
    if instr.opcode == "custom-call" and _SPLASH_FORWARD.match(instr.name) and len(instr.operands) >= 5:
        return _splash_flops(instr, shapes)
    return None


def computation_flops(
    computations: Mapping[str, Sequence[Line]],
    own: Callable[[Line], int | None],
    callees_of: Callable[[Line], Sequence[str]],
    trip_of: Callable[[Line], int | None],
) -> dict[str, int]:
    """Computation name -> matmul FLOPs of one run of it (dots, convolutions and splash kernels,
    fused or not; loop bodies times their trip counts, once where unknown; ``own``: a line's
    :func:`instruction_flops`). An op's own FLOPs plus this over the computations it calls is
    what one execution of a fusion costs."""

    @functools.cache
    def visit(computation: str) -> int:
        total = 0
        for line in computations.get(computation, []):
            if (mine := own(line)) is not None:
                total += mine
            elif line.opcode not in ASYNC_CONTINUATIONS:
                times = (trip_of(line) or 1) if line.opcode == "while" else 1
                total += times * sum(visit(c) for c in callees_of(line) if c in computations)
        return total

    return {name: visit(name) for name in computations}


def matmul_flops(module: HloModule) -> int:
    """Matmul FLOPs (dots, convolutions, splash attention kernels) of an optimized HLO module, per
    device, per call of ENTRY, with loop bodies multiplied by their trip counts (unknown trip
    counts count once).

    Unlike ``cost_analysis()``, which counts a ``while`` body once, this is the work a scanned
    model really does; unlike analytic model FLOPs, it shows what a layout duplicates.
    """
    entry = module.computations.get(module.entry or "")
    return entry.flops if entry is not None else 0


# --------------------------------------------------------------------------- memory traffic

# Ops that move no data (aliases, bookkeeping) or whose work is counted in what they call.
_NO_TRAFFIC = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "while",
        "call",
        "conditional",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        *ASYNC_CONTINUATIONS,
    }
)
# Top-level ops that copy a slice of their first operand (TPU memory-space assignment prefetches a
# scan's weight slice into VMEM with ``slice-start``): they read the slice, not the whole operand.
_SLICE_COPIES = ("slice", "dynamic-slice", "slice-start", "dynamic-slice-start")


def _hbm(shape: str) -> int:
    """Bytes of a shape that live in device memory (HBM): what traffic counts. An array in another
    memory space (``S(1)``, TPU VMEM) is read and written on the chip."""
    return shape_bytes(shape, DEVICE_MEMORY)


def _in_hbm(shape: str, nbytes: int) -> int:
    """``nbytes`` of a value of ``shape`` (the whole value or a part of it), scaled to the share
    of it in device memory."""
    whole = shape_bytes(shape)
    return nbytes if not whole else nbytes * _hbm(shape) // whole


_SLICING = ("dynamic-slice", "slice", "gather")
_SHAPE_ONLY = ("bitcast", "reshape")  # a view of the same bytes: follow it to what reads them
# Per-element maps a loop fusion computes only where its output needs them: a slice after one reads
# only the sliced elements of what the map reads (a layout copy, a convert, a transpose).
_PER_ELEMENT = (*_SHAPE_ONLY, "copy", "convert", "transpose")


def operand_bytes(line: Line, shapes: Mapping[str, str]) -> int:
    """Bytes of an op's operands: their inline shapes, else the shapes of the instructions named."""
    return sum(
        shape_bytes(inline or shapes.get(name, ""))
        for name, inline in zip(line.operands, line.operand_shapes, strict=True)
    )


Computations = Mapping[str, Sequence[Line]]


def _fused(line: Line, comps: Computations) -> Sequence[Line] | None:
    """The computation a fusion runs, else None."""
    return next((comps[c] for c in callees(line) if c in comps), None)


def _users(fused: Sequence[Line]) -> dict[str, list[Line]]:
    users: dict[str, list[Line]] = {}
    for i in fused:
        for operand in i.operands:
            users.setdefault(operand, []).append(i)
    return users


def _params(fused: Sequence[Line]) -> dict[int, str]:
    return {int(i.literal): i.name for i in fused if i.opcode == "parameter" and i.literal.strip().isdigit()}


def _elements_of(shape: str) -> int | None:
    dims = shape_dims(shape)
    return None if dims is None else _elements(dims)


def _sliced_elements(value: str, shape: str, fused: Sequence[Line], comps: Computations, depth: int = 0) -> int | None:
    """Elements of ``value`` (of ``shape``) the fused code reads when it only slices it -- directly,
    through per-element maps (bitcast, reshape, copy, convert, transpose, a nested fusion of the
    same element count) or inside a nested fusion, as TPU fusions reach a scan's stacked weights --
    else None (read whole)."""
    uses = _users(fused).get(value, [])
    total = _elements_of(shape)
    if not uses or depth > 8 or not total:
        return None
    out = 0
    for u in uses:
        if u.opcode in _SLICING and u.operands[0] == value and value not in u.operands[1:]:
            out += _elements_of(u.shape) or total
            continue
        nested = _fused(u, comps) if u.opcode == "fusion" else None
        if u.opcode in _PER_ELEMENT or (nested is not None and _elements_of(u.shape) == total):
            inner = _sliced_elements(u.name, u.shape, fused, comps, depth + 1)  # a map: follow its result
            if inner is None and nested is not None:  # or the nested fusion itself slices it
                inner = _nested_slices(u, value, nested, comps, depth)
        elif nested is not None:
            inner = _nested_slices(u, value, nested, comps, depth)
        else:
            return None
        if inner is None:
            return None
        out += inner
    return min(out, total)


def _nested_slices(u: Line, value: str, nested: Sequence[Line], comps: Computations, depth: int) -> int | None:
    params = _params(nested)
    positions = [k for k, o in enumerate(u.operands) if o == value]
    by_name = {i.name: i.shape for i in nested}
    parts = [
        _sliced_elements(params[k], by_name.get(params[k], ""), nested, comps, depth + 1) if k in params else None
        for k in positions
    ]
    return None if not parts or any(p is None for p in parts) else sum(p for p in parts if p is not None)


def _sliced_bytes(param: str, fused: Sequence[Line], comps: Computations) -> int | None:
    """Bytes of a fusion parameter the fused code reads when it only slices it (see
    :func:`_sliced_elements`), else None."""
    shape = next((i.shape for i in fused if i.name == param), "")
    elements, total = _sliced_elements(param, shape, fused, comps), _elements_of(shape)
    if elements is None or not total:
        return None
    return shape_bytes(shape) * elements // total


def _root_update(fused: Sequence[Line]) -> tuple[Line, str] | None:
    """(the in-place dynamic-update-slice a fusion's root is or is a bitcast/reshape of, the value
    holding the buffer it updates, followed back through bitcasts/reshapes), else None."""
    by_name = {i.name: i for i in fused}

    def back(name: str) -> Line | None:
        instr = by_name.get(name)
        while instr is not None and instr.opcode in _SHAPE_ONLY and instr.operands:
            instr = by_name.get(instr.operands[0])
        return instr

    root = back(fused[-1].name) if fused else None
    if root is None or root.opcode != "dynamic-update-slice" or len(root.operands) < 2:
        return None
    buffer = back(root.operands[0])
    return root, buffer.name if buffer is not None else root.operands[0]


def _fusion_traffic(instr: Line, shapes: Mapping[str, str], comps: Computations) -> int:
    """Bytes a fusion reads and writes in device memory. An operand the fused code only slices
    (directly, through per-element maps, or inside a nested fusion) is read as its slices (a scan
    reading layer i of stacked weights); an in-place dynamic-update-slice root (or a bitcast of one)
    writes only its update and does not read the buffer it updates (a scan writing step i of its
    outputs). Operands and results in another memory space (TPU VMEM) move no HBM bytes."""
    fused = _fused(instr, comps)
    if fused is None:
        return _hbm(instr.shape) + _hbm_operands(instr, shapes)
    inner = {i.name: i.shape for i in fused}
    params = _params(fused)
    update = _root_update(fused)
    if update is not None:
        total = _in_hbm(instr.shape, shape_bytes(inner.get(update[0].operands[1], "")))
    else:
        total = _hbm(instr.shape)
    for index, (name, inline) in enumerate(zip(instr.operands, instr.operand_shapes, strict=True)):
        param = params.get(index)
        if update is not None and param == update[1]:
            continue  # the buffer updated in place is not read
        outer = inline or shapes.get(name, "")
        sliced = _sliced_bytes(param, fused, comps) if param else None
        total += _in_hbm(outer, sliced) if sliced is not None else _hbm(outer)
    return total


def _hbm_operands(line: Line, shapes: Mapping[str, str]) -> int:
    return sum(
        _hbm(inline or shapes.get(name, "")) for name, inline in zip(line.operands, line.operand_shapes, strict=True)
    )


def _slice_traffic(line: Line, shapes: Mapping[str, str]) -> int:
    """A slice copy: the slice read from its operand's memory, written to its result's."""
    out = line.shape
    if line.opcode.endswith("-start") and line.shape.startswith("("):
        items = list(top_level_items(line.shape[1 : line.shape.rindex(")")]))
        out = items[1] if len(items) > 1 else line.shape  # ((operand), slice, context)
    source = (line.operand_shapes[0] or shapes.get(line.operands[0], "")) if line.operands else ""
    part = shape_bytes(out)
    return _in_hbm(source, part) + _hbm(out)


def aliased_state_bytes(line: Line, shapes: Mapping[str, str], *, operands: bool) -> int:
    """Device-memory bytes of the buffers an op's ``output_to_operand_aliasing`` names: each aliased
    output's (it is its operand's buffer), and with ``operands`` each aliased operand's once."""
    aliased = [i for i in aliased_operands(line.attributes) if i < len(line.operands)]
    size = {i: _hbm(line.operand_shapes[i] or shapes.get(line.operands[i], "")) for i in aliased}
    return sum(size[i] for i in aliased) + (sum(size.values()) if operands else 0)


def instruction_traffic(
    line: Line, shapes: Mapping[str, str], comps: Computations, async_role: str | None = None
) -> int:
    """Bytes one execution of a top-level op reads and writes in device memory (each fusion,
    collective or custom call reads its operands and writes its result; a slice copy reads its
    slice; ``comps``: the module's computations, where a fusion's are); 0 for control flow, whose
    bodies are counted where they run.

    A TPU async collective fusion (``async_role``) hands the collective's buffers from op to op as
    aliased operands and outputs; the transfer writes them, and its start counts that (it reads what
    it sends and writes the result buffer it allocates; an output aliasing its operand is not
    written). A continuation is its compute alone (the state it passes on is neither read nor
    written), a done moves nothing. Before this rule, the v6e 19B pipeline's step counted 94.8 GB,
    75.1 GB with it: each continuation passing two 50 MB K/V buffers on was counted 150 MB, where
    libtpu estimates the whole op at 13346 cycles (its backend_config ``estimated_cycles``)."""
    if line.opcode == "fusion":
        if async_role == "done":
            return 0
        total = _fusion_traffic(line, shapes, comps)
        if async_role is not None:
            total -= aliased_state_bytes(line, shapes, operands=async_role == "continuation")
        return max(total, 0)
    if line.opcode in _NO_TRAFFIC or line.opcode.endswith("-done"):
        return 0
    if line.opcode in _SLICE_COPIES:
        return _slice_traffic(line, shapes)
    return _written_bytes(line, operand_bytes(line, shapes)) + _hbm_operands(line, shapes)


def _written_bytes(line: Line, operands: int) -> int:
    """Bytes an op writes to device memory: its result, less the operands an async ``*-start``
    holds in its tuple (``operands``: their bytes). A start's result is ``(operands, outputs...,
    contexts...)`` (``call-start`` and ``async-start`` wrap the operands in a tuple of their own;
    ``all-gather-start``, ``collective-permute-start``, ``copy-start`` name them directly): the
    first element is the operands kept alive for the op, not written. ``copy-start`` is the
    exception: its tuple is ``(destination, source, context)`` (XLA's memory-space assignment builds
    it so, and its ``copy-done`` returns element 0), so it writes element 0 where that lives in device
    memory. Read as the others before, an HBM -> VMEM prefetch counted its source twice and a VMEM ->
    HBM eviction nothing, and a copy between host memory (``S(5)``) and HBM (the real v6e profile's,
    ``tests/harness/fixtures/real/``) was 0 bytes one way and twice its HBM side the other."""
    if not (line.opcode.endswith("-start") and line.shape.startswith("(")):
        return _hbm(line.shape)
    items = list(top_level_items(line.shape[1 : line.shape.rindex(")")]))
    if line.opcode == "copy-start" and items:
        return _hbm(items[0])  # (destination, source, context): its done's result is element 0
    if len(items) > 1 and shape_bytes(items[0]) == operands:
        return sum(_hbm(item) for item in items[1:])
    return _hbm(line.shape)


def memory_traffic_bytes(module: HloModule) -> int:
    """Bytes read from and written to device memory (HBM) by the top-level ops of an optimized HLO
    module (:attr:`~harness.metrics.hlo.model.Line.traffic`), per device and call, with loop bodies
    multiplied by their trip counts; buffers the compiler placed in on-chip memory (TPU VMEM,
    ``S(1)``) are not counted.

    The model of ``cost_analysis()["bytes accessed"]`` at the granularity of fusions, which XLA
    counts once per loop body; this is the HBM traffic of a scanned model, to within what the
    fusions' own access patterns add or save.
    """

    @functools.cache
    def visit(computation: str) -> int:
        comp = module.computations.get(computation)
        total = 0
        for instr in comp.instructions if comp is not None else ():
            if instr.opcode in CONTROL_FLOW:
                times = (instr.trip_count or 1) if instr.opcode == "while" else 1
                total += times * sum(visit(c) for c in instr.callees if c in module.computations)
            else:
                total += instr.traffic
        return total

    return visit(module.entry) if module.entry else 0
