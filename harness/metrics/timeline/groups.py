"""Which devices a collective spans, and which physical links carry it.

The device groups are read once, with the module (``Instruction.groups``, every printed form:
:mod:`harness.metrics.hlo.replica_groups`); a collective-permute's pairs are each a transfer.

Links: on a TPU torus a group uses the ICI dimensions along which its devices' chip coordinates
differ. A dimension whose group covers the whole ring and which wraps around carries a
bidirectional ring (2 links' worth per device, one direction each); otherwise the group is a line
(1 link's worth). A group spanning several dimensions is credited the sum of theirs (a
multi-dimensional ring algorithm drives all of them at once). The devices of one chip (tpu7x's two
TensorCores) share the chip's ports (the spec's ``core_links = "shared"``): an SPMD collective's ICI
bandwidth per device is divided by the number of its groups that hold a device on the chip (each
such group's ring crosses the chip's links once per direction and step), so a group holding both
cores of each of its chips is not divided and one core per chip is divided by 2 (the tpu7x
all-gather table's setup: two groups at once, :mod:`~harness.metrics.timeline.rates`); a group that
spans chips and holds several cores of one also crosses the on-chip link, and runs at the slower of
the two. A lone group (``route`` without ``sharing``) is divided by devices per chip. The interval's
other points: ``"own"`` gives each core the chip's ports (it prices the table's own one-core-per-chip
groups at twice their measured rate), ``"per_core"`` divides by devices per chip whatever the groups
(ports owned per die, a ring leaving each chip from one die). A group inside one chip uses ``on_chip_bytes_per_s``. GPUs
behind NVSwitch: any group gets the
GPU's NVLink bandwidth. A link's rate is the datasheet's times the spec's ``link_efficiency``
where it has one (a published collective table's large-message bandwidth over its route's,
:mod:`~harness.metrics.timeline.rates`). CPU: a copy at ``link_bytes_per_s`` (the measured copy
bandwidth).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness.metrics.hlo.model import Groups
from harness.metrics.timeline.specs import TimelineSpec, Topology


def all_devices(groups: Groups | None, num_devices: int) -> Groups:
    """A collective's device groups as parsed; one group of all ``num_devices`` when they are
    empty or absent."""
    if not groups or not any(groups):
        return (tuple(range(num_devices)),)
    return groups


@dataclass(frozen=True)
class Route:
    """The links one group's transfer uses: ``queues`` (the link sets it occupies: ``dim0``, ``core``,
    ``nvlink``, ``memcpy``) and its bandwidth per device, one direction, in B/s."""

    queues: tuple[str, ...]
    bytes_per_s: float
    size: int


def _torus_route(devices: Sequence[int], spec: TimelineSpec, topo: Topology, sharing: int | None) -> Route:
    coords = [topo.device_coords[d] for d in devices if d < len(topo.device_coords)]
    if len(coords) < 2:
        return Route((), math.inf, len(devices))
    link = link_bytes_per_s(spec)
    queues, bandwidth = [], 0.0
    for dim, extent in enumerate(topo.shape):
        values = {c[dim] for c in coords}
        if len(values) < 2:
            continue
        ring = topo.wraparound[dim] and len(values) == extent
        queues.append(f"dim{dim}")
        bandwidth += link * (2 if ring else 1)
    if queues:
        shared = topo.devices_per_chip if sharing is None or spec.core_links == "per_core" else sharing
        per_device = bandwidth / (1 if spec.core_links == "own" else shared)
        if len({c[:-1] for c in coords}) < len(coords) and "on_chip_bytes_per_s" in spec.constants:
            per_device = min(per_device, spec.value("on_chip_bytes_per_s"))  # the ring's on-chip hops
        return Route(tuple(queues), per_device, len(devices))
    if len({c[-1] for c in coords}) > 1:  # only the core on the chip differs
        return Route(("core",), spec.value("on_chip_bytes_per_s"), len(devices))
    return Route((), math.inf, len(devices))


def route(devices: Sequence[int], spec: TimelineSpec, sharing: int | None = None) -> Route:
    """The links and bandwidth of one group of devices on the spec's topology; ``sharing``: how many
    groups of the same collective use each of its chips' ports (default: the chip's devices)."""
    topo = spec.topology
    if len(devices) < 2:
        return Route((), math.inf, len(devices))
    if topo.kind == "torus":
        return _torus_route(devices, spec, topo, sharing)
    return Route((topo.kind if topo.kind != "switch" else "nvlink",), link_bytes_per_s(spec), len(devices))


def link_bytes_per_s(spec: TimelineSpec) -> float:
    """One link's rate, one direction: the datasheet's times the measured ``link_efficiency`` where the
    spec has one (:mod:`~harness.metrics.timeline.rates`)."""
    eff = spec.constants.get("link_efficiency")
    return spec.value("link_bytes_per_s") * (eff.value if eff is not None else 1.0)


def slowest_route(groups: Groups, spec: TimelineSpec) -> Route:
    """Every group of an SPMD collective runs at once and the program waits for all of them at its
    next collective: the slowest group sets the pace (lowest bandwidth, then the largest group)."""
    routes = [route(g, spec, n) for g, n in zip(groups, groups_sharing_chips(groups, spec), strict=True)]
    return min(routes or [Route((), math.inf, 1)], key=lambda r: (r.bytes_per_s, -r.size))


def groups_sharing_chips(groups: Groups, spec: TimelineSpec) -> list[int | None]:
    """Per group: the most groups of the collective that hold a device on any one of its chips (the
    ways its chips' ports are shared); None off a torus."""
    topo = spec.topology
    if topo.kind != "torus":
        return [None] * len(groups)
    coords = topo.device_coords

    def chips(g: Sequence[int]) -> set[tuple[int, ...]]:
        return {coords[d][:-1] for d in g if d < len(coords)}

    on_chip: dict[tuple[int, ...], int] = {}
    for g in groups:
        for chip in chips(g):
            on_chip[chip] = on_chip.get(chip, 0) + 1
    return [max((on_chip[c] for c in chips(g)), default=1) for g in groups]


def permute_route(pairs: Sequence[tuple[int, int]], spec: TimelineSpec) -> Route:
    """A collective-permute's slowest real transfer (a device sending to itself moves nothing)."""
    moves = [route((s, t), spec) for s, t in pairs if s != t]
    if not moves:
        return Route((), math.inf, 1)
    return min(moves, key=lambda r: r.bytes_per_s)
