"""The device groups of a collective, from its attributes in optimized HLO text. Pure Python.

Every form XLA prints (ids are the program's device-assignment indices, ``use_global_device_ids=true``
under SPMD):

* explicit ``replica_groups={{0,1},{2,3}}``;
* iota ``replica_groups=[2,4]<=[8]`` (``iota(8)`` reshaped to 2 groups of 4) and transposed
  ``[4,2]<=[2,4]T(1,0)`` (``iota(8).reshape(2,4).transpose(1,0).reshape(4,2)``);
* mesh axes ``replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}``: devices (in order, or
  permuted by ``device_ids=([2,2,2]T(0,2,1))``) laid out on that mesh; a group is the devices that
  differ only along the listed axes. A listed axis may be a sub-axis, ``'axis_0':(2)2`` (Shardy's
  notation, as libtpu 0.0.42 prints it for the tpu7x 19B step): axis_0 split major-to-minor into
  ``pre-size`` (2), ``size`` (2) and the rest, the group spanning the ``size`` part;
* ``source_target_pairs={{0,1},{1,0}}`` (collective-permute): each pair a group;
* ``replica_groups={}``: one group of all devices, returned as ``[[]]``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_EXPLICIT = re.compile(r"\breplica_groups=\{((?:\{[0-9,\s]*\},?\s*)*)\}")
_IOTA = re.compile(r"\breplica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?")
_MESH = re.compile(
    r"\breplica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([0-9,]+)\](?:T\(([0-9,]+)\))?\))?"
    r"\s*\{([^{}]*)\}"
)
_PAIRS = re.compile(r"\bsource_target_pairs=\{((?:\{[0-9,\s]*\},?\s*)*)\}")
_INNER = re.compile(r"\{([0-9,\s]*)\}")
_AXIS = re.compile(r"'([^']+)'=(\d+)")
_SELECTED = re.compile(r"'([^']+)'(?::\((\d+)\)(\d+))?")


def ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def iota_ids(dims: Sequence[int], perm: Sequence[int] | None = None) -> list[int]:
    """``iota(prod(dims)).reshape(dims).transpose(perm)``, flattened."""
    n = math.prod(dims)
    if not perm:
        return list(range(n))
    strides = [math.prod(dims[i + 1 :]) for i in range(len(dims))]
    out_dims = [dims[p] for p in perm]
    out = []
    for flat in range(n):
        rest, src = flat, 0
        for axis in reversed(range(len(out_dims))):
            rest, idx = divmod(rest, out_dims[axis])
            src += idx * strides[perm[axis]]
        out.append(src)
    return out


def mesh_groups(axes_text: str, ids_dims: str | None, ids_perm: str | None, selected: str) -> list[list[int]]:
    """Groups of the mesh form: each selected (sub-)axis becomes one factor of its axis, split
    major-to-minor into ``pre-size``, ``size`` and the rest; a group varies the selected factors."""
    axes = [(name, int(size)) for name, size in _AXIS.findall(axes_text)]
    sizes = {name: size for name, size in axes}
    chosen: dict[str, tuple[int, int]] = {}  # axis -> (pre-size, size) of the part the groups span
    for name, pre, size in _SELECTED.findall(selected):
        if name not in sizes:
            raise ValueError(f"replica_groups mesh[{axes_text}] {{{selected}}} names unknown axis {name!r}")
        part = (int(pre), int(size)) if size else (1, sizes[name])
        if sizes[name] % (part[0] * part[1]):
            raise ValueError(
                f"replica_groups mesh[{axes_text}]: sub-axis {name!r}:({part[0]}){part[1]} "
                f"does not divide the axis size {sizes[name]}"
            )
        chosen[name] = part
    factors: list[tuple[int, bool]] = []  # (size, spanned) major-to-minor over the mesh
    for name, size in axes:
        if name in chosen:
            pre, span = chosen[name]
            factors += [(pre, False), (span, True), (size // (pre * span), False)]
        else:
            factors.append((size, False))
    total = math.prod(n for _, n in axes)
    devices = iota_ids(ints(ids_dims), ints(ids_perm or "") or None) if ids_dims else list(range(total))
    groups: dict[tuple[int, ...], list[int]] = {}
    for flat, device in enumerate(devices):
        rest, key = flat, []
        for size, spanned in reversed(factors):
            rest, idx = divmod(rest, size)
            if not spanned:
                key.append(idx)
        groups.setdefault(tuple(key), []).append(device)
    return list(groups.values())


def pairs(attributes: str) -> tuple[tuple[int, int], ...]:
    """``source_target_pairs`` of a collective-permute, as (source, target)."""
    m = _PAIRS.search(attributes)
    if not m:
        return ()
    return tuple((p[0], p[1]) for p in (ints(g) for g in _INNER.findall(m.group(1))) if len(p) == 2)


def device_groups(attributes: str) -> list[list[int]] | None:
    """The device groups a collective's attributes name (see the module docstring): ``[[]]`` for
    ``replica_groups={}`` (all devices), None when it names none."""
    if m := _MESH.search(attributes):
        return mesh_groups(m.group(1), m.group(2), m.group(3), m.group(4))
    if m := _IOTA.search(attributes):
        shape, ids = ints(m.group(1)), iota_ids(ints(m.group(2)), ints(m.group(3) or "") or None)
        size = shape[-1]
        return [ids[i : i + size] for i in range(0, len(ids), size)]
    if m := _EXPLICIT.search(attributes):
        found = [list(ints(g)) for g in _INNER.findall(m.group(1))]
        return found if any(found) else [[]]
    if m := _PAIRS.search(attributes):
        return [list(ints(g)) for g in _INNER.findall(m.group(1))]
    return None
