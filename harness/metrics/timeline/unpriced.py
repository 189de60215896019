"""What a prediction cannot price, named in its notes: nothing is priced as free in silence.

Three kinds, each a note listing the ops (the first few by name, and how many):

* **host copies** (``copy-start`` to or from host memory, ``S(5)``): priced at the spec's
  ``host_bytes_per_s`` with its source; a spec without one prices them at HBM bandwidth, and says so;
* **ops of a kind the simulator does not know**: a ``custom-call`` other than the splash attention
  kernel has no FLOPs in its HLO, so it is priced by its HBM bytes alone;
* **devices the topology lacks**: a collective whose groups or pairs name device ids the spec's
  topology has no coordinates for (a program for more devices than the slice) is routed without
  them, so its links and time are a guess;
* **memory spaces without a rate**: an op other than a host copy that reads or writes host memory
  (``S(5)``) is priced as HBM traffic for its device-memory bytes only.

Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.metrics.hlo.text import shape_bytes
from harness.metrics.timeline.program import HOST_MEMORY, OFFLOAD, Op, Program
from harness.metrics.timeline.specs import TimelineSpec

HOST_RATE = "host_bytes_per_s"
_SHOWN = 5
_KNOWN_CUSTOM_CALLS = ("splash_mha",)


def _names(ops: Sequence[Op]) -> str:
    shown = ", ".join(o.name for o in ops[:_SHOWN])
    return shown + (f" and {len(ops) - _SHOWN} more" if len(ops) > _SHOWN else "")


def _devices(spec: TimelineSpec) -> int | None:
    coords = spec.topology.device_coords
    return len(coords) if spec.topology.kind == "torus" and coords else None


def _outside(op: Op, devices: int) -> bool:
    ids = [d for g in op.groups for d in g] + [d for pair in op.pairs for d in pair]
    return any(d >= devices for d in ids)


def _touches_host(op: Op) -> bool:
    shapes = (op.instr.shape, *op.instr.operand_shapes)
    return any(shape_bytes(s, HOST_MEMORY) for s in shapes if s)


def pricing_notes(program: Program, spec: TimelineSpec) -> list[str]:
    """The notes for what ``program`` holds that ``spec`` cannot price (see the module docstring)."""
    ops = [op for comp in program.ops.values() for op in comp]
    notes = []
    host = [o for o in ops if o.cls == OFFLOAD and o.host]
    if host:
        moved = sum(o.bytes for o in host) / 1e9
        rate = spec.constants.get(HOST_RATE)
        where = (
            f"at the host link, {HOST_RATE} = {rate.value / 1e9:g} GB/s one way ({rate.source})"
            if rate is not None
            else f"at HBM bandwidth: spec {spec.name!r} has no host link rate ({HOST_RATE})"
        )
        notes.append(f"host-offload copies ({len(host)}, {moved:.3g} GB: {_names(host)}) priced {where}")
    custom = [
        o
        for o in ops
        if o.cls == "compute" and o.instr.opcode == "custom-call" and not o.flops
        if not o.name.startswith(_KNOWN_CUSTOM_CALLS)
    ]
    if custom:
        notes.append(
            f"custom calls of a kind the simulator does not know, priced by their HBM bytes alone: {_names(custom)}"
        )
    devices = _devices(spec)
    if devices is not None:
        lacking = [o for o in ops if o.cls in ("sync", "start") and _outside(o, devices)]
        if lacking or program.num_devices > devices:
            notes.append(
                f"the program runs on {program.num_devices} devices, the topology {spec.name!r} has {devices}: "
                f"collectives naming devices it lacks are routed without them: {_names(lacking) or 'none'}"
            )
    on_host = [o for o in ops if o.cls == "compute" and _touches_host(o)]
    if on_host:
        notes.append(
            "ops reading or writing host memory (S(5)) outside a host copy: only their device-memory bytes "
            f"are priced (no rate for host-memory compute): {_names(on_host)}"
        )
    return notes
