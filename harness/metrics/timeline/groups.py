"""Which devices a collective spans, and which physical links carry it.

Replica groups as optimized HLO prints them (ids are the program's device-assignment indices,
``use_global_device_ids=true`` under SPMD):

* explicit ``replica_groups={{0,1},{2,3}}``;
* iota ``replica_groups=[2,4]<=[8]`` (``iota(8)`` reshaped to 2 groups of 4) and transposed
  ``[4,2]<=[2,4]T(1,0)`` (``iota(8).reshape(2,4).transpose(1,0).reshape(4,2)``);
* mesh axes ``replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}`` (devices, optionally
  permuted by ``device_ids=([2,2,2]T(0,2,1))``, laid out on that mesh; a group is the devices that
  differ only along the listed axes), as libtpu 0.0.42 prints them;
* empty ``replica_groups={}``: all devices in one group;
* ``source_target_pairs={{0,1},{1,0}}`` (collective-permute): each pair is a transfer.

Links: on a TPU torus a group uses the ICI dimensions along which its devices' chip coordinates
differ. A dimension whose group covers the whole ring and which wraps around carries a
bidirectional ring (2 links' worth per device, one direction each); otherwise the group is a line
(1 link's worth). A group spanning several dimensions is credited the sum of theirs (a
multi-dimensional ring algorithm drives all of them at once). The devices of one chip (tpu7x's two
TensorCores) share the chip's ports, so ICI bandwidth per device is divided by devices per chip;
a group inside one chip uses ``on_chip_bytes_per_s``. GPUs behind NVSwitch: any group gets the
GPU's NVLink bandwidth. CPU: a copy at ``link_bytes_per_s`` (the measured copy bandwidth).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from harness.metrics.timeline.specs import TimelineSpec, Topology

Groups = tuple[tuple[int, ...], ...]

_EXPLICIT = re.compile(r"\breplica_groups=\{((?:\{[0-9,\s]*\},?\s*)*)\}")
_IOTA = re.compile(r"\breplica_groups=\[([0-9,]+)\]<=\[([0-9,]+)\](?:T\(([0-9,]+)\))?")
_MESH = re.compile(r"\breplica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([0-9,]+)\](?:T\(([0-9,]+)\))?\))?"
                   r"\s*\{([^}]*)\}")  # fmt: skip
_PAIRS = re.compile(r"\bsource_target_pairs=\{((?:\{[0-9,\s]*\},?\s*)*)\}")
_INNER = re.compile(r"\{([0-9,\s]*)\}")
_AXIS = re.compile(r"'([^']+)'=(\d+)")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split(",") if v.strip())


def iota_ids(dims: Sequence[int], perm: Sequence[int] | None = None) -> list[int]:
    """``iota(prod(dims)).reshape(dims).transpose(perm)``, flattened (pure Python)."""
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


def _mesh_groups(axes_text: str, ids_dims: str | None, ids_perm: str | None, selected: str) -> Groups:
    axes = [(name, int(size)) for name, size in _AXIS.findall(axes_text)]
    sizes = [s for _, s in axes]
    devices = iota_ids(_ints(ids_dims), _ints(ids_perm or "") or None) if ids_dims else list(range(math.prod(sizes)))
    chosen = {a.strip().strip("'") for a in selected.split(",") if a.strip()}
    unknown = chosen - {name for name, _ in axes}
    if unknown:
        raise ValueError(f"replica_groups mesh[{axes_text}] names unknown axes {sorted(unknown)}")
    groups: dict[tuple[int, ...], list[int]] = {}
    for flat, device in enumerate(devices):
        rest, key = flat, []
        for (name, size) in reversed(axes):
            rest, idx = divmod(rest, size)
            if name not in chosen:
                key.append(idx)
        groups.setdefault(tuple(key), []).append(device)
    return tuple(tuple(g) for g in groups.values())


def replica_groups(attributes: str, num_devices: int) -> Groups:
    """The device groups of a collective's attributes (see the module docstring); one group of all
    ``num_devices`` when the groups are empty or absent."""
    if m := _IOTA.search(attributes):
        shape, dims, perm = _ints(m.group(1)), _ints(m.group(2)), _ints(m.group(3) or "")
        ids = iota_ids(dims, perm or None)
        size = shape[-1]
        return tuple(tuple(ids[i : i + size]) for i in range(0, len(ids), size))
    if m := _MESH.search(attributes):
        return _mesh_groups(m.group(1), m.group(2), m.group(3), m.group(4))
    if m := _EXPLICIT.search(attributes):
        groups = tuple(_ints(g) for g in _INNER.findall(m.group(1)))
        if groups and any(groups):
            return groups
    return (tuple(range(num_devices)),)


def permute_pairs(attributes: str) -> tuple[tuple[int, int], ...]:
    """``source_target_pairs`` of a collective-permute, as (source, target)."""
    m = _PAIRS.search(attributes)
    if not m:
        return ()
    return tuple((p[0], p[1]) for p in (_ints(g) for g in _INNER.findall(m.group(1))) if len(p) == 2)


@dataclass(frozen=True)
class Route:
    """The links one group's transfer uses: ``queues`` (the link sets it occupies: ``dim0``, ``core``,
    ``nvlink``, ``memcpy``) and its bandwidth per device, one direction, in B/s."""

    queues: tuple[str, ...]
    bytes_per_s: float
    size: int


def _torus_route(devices: Sequence[int], spec: TimelineSpec, topo: Topology) -> Route:
    coords = [topo.device_coords[d] for d in devices if d < len(topo.device_coords)]
    if len(coords) < 2:
        return Route((), math.inf, len(devices))
    link = spec.value("link_bytes_per_s")
    queues, bandwidth = [], 0.0
    for dim, extent in enumerate(topo.shape):
        values = {c[dim] for c in coords}
        if len(values) < 2:
            continue
        ring = topo.wraparound[dim] and len(values) == extent
        queues.append(f"dim{dim}")
        bandwidth += link * (2 if ring else 1)
    if queues:
        return Route(tuple(queues), bandwidth / topo.devices_per_chip, len(devices))
    if len({c[-1] for c in coords}) > 1:  # only the core on the chip differs
        return Route(("core",), spec.value("on_chip_bytes_per_s"), len(devices))
    return Route((), math.inf, len(devices))


def route(devices: Sequence[int], spec: TimelineSpec) -> Route:
    """The links and bandwidth of one group of devices on the spec's topology."""
    topo = spec.topology
    if len(devices) < 2:
        return Route((), math.inf, len(devices))
    if topo.kind == "torus":
        return _torus_route(devices, spec, topo)
    return Route((topo.kind if topo.kind != "switch" else "nvlink",), spec.value("link_bytes_per_s"), len(devices))


def slowest_route(groups: Groups, spec: TimelineSpec) -> Route:
    """Every group of an SPMD collective runs at once and the program waits for all of them at its
    next collective: the slowest group sets the pace (lowest bandwidth, then the largest group)."""
    routes = [route(g, spec) for g in groups] or [Route((), math.inf, 1)]
    return min(routes, key=lambda r: (r.bytes_per_s, -r.size))


def permute_route(pairs: Sequence[tuple[int, int]], spec: TimelineSpec) -> Route:
    """A collective-permute's slowest real transfer (a device sending to itself moves nothing)."""
    moves = [route((s, t), spec) for s, t in pairs if s != t]
    if not moves:
        return Route((), math.inf, 1)
    return min(moves, key=lambda r: r.bytes_per_s)
