"""The programs a profile ran, from the scheduled HLO protos in its ``/host:metadata`` plane, as
HLO text :func:`harness.metrics.hlo.parse` reads (so the timeline can predict exactly them).

A TPU profile's ``/host:metadata`` holds, per program, an ``xla.HloProto`` whose ``hlo_module``
(field 1) is the scheduled ``HloModuleProto``. jaxlib prints it (``HloModule.
from_serialized_hlo_module_proto(...).to_string()``), but what it prints is not the whole program:

* the module's partition and replica counts live in its config, not in the proto: jaxlib's module
  gets the default config (1 and 1) and prints no ``num_partitions``. They are read here from the
  proto's ``device_assignment`` (field 15: ``DeviceAssignmentProto`` replica_count=1,
  computation_count=2, computation_devices=3 with replica_device_ids=1) and written into the
  ``HloModule`` line, as ``compiled.as_text()`` writes them;
* jaxlib 0.10.2 prints ``replica_groups={}`` (all devices) for a collective whose groups the proto
  gives as an iota list (``HloInstructionProto.collective_device_list`` = field 87:
  ``CollectiveDeviceListProto`` replica_groups=1, iota_replica_group_list=2 with
  num_replica_groups=1, num_devices_per_group=2, iota_reshape_dims=3, iota_transpose_perm=4).
  The groups are decoded from the proto here and written back in XLA's printed iota form
  (``[4,2]<=[2,4]T(1,0)``), the form the profile's own op text carries.

Each repair is listed in :attr:`ProfileProgram.repairs`. jaxlib prints computations with their
signatures here; ``XlaComputation.as_hlo_text()`` prints them without, and the parser reads both.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.metrics.hlo.text import instruction_name
from harness.metrics.measured.xplane_read import XPlane, fields, hlo_protos, varint


@dataclass(frozen=True)
class ProfileProgram:
    """One program of a profile: its HLO text (repaired, see the module docstring), its replica
    and partition counts, the device ids of its device assignment in (replica, partition) order,
    and what was written into jaxlib's text."""

    name: str
    text: str
    replica_count: int
    num_partitions: int
    devices: tuple[int, ...]
    repairs: tuple[str, ...]


def _ints(values: list[Any]) -> list[int]:
    """A repeated int field: packed (bytes) or one value per occurrence."""
    out: list[int] = []
    for v in values:
        if isinstance(v, bytes):
            i = 0
            while i < len(v):
                n, i = varint(v, i)
                out.append(n)
        else:
            out.append(int(v))
    return out


def _repeated(message: bytes) -> dict[int, list[Any]]:
    out: dict[int, list[Any]] = {}
    for number, value in fields(message):
        out.setdefault(number, []).append(value)
    return out


def module_proto(hlo_proto: bytes) -> bytes:
    """The ``HloModuleProto`` of an ``xla.HloProto`` (its field 1); ValueError when absent."""
    found = _repeated(hlo_proto).get(1)
    if not found:
        raise ValueError("HloProto has no hlo_module (field 1)")
    return bytes(found[0])


def device_assignment(module: bytes) -> tuple[int, int, tuple[int, ...]]:
    """(replica count, partition count, device ids in (replica, partition) order) of a module's
    ``device_assignment``; (1, 1, ()) where the proto has none."""
    raw = _repeated(module).get(15)
    if not raw:
        return 1, 1, ()
    da = _repeated(bytes(raw[0]))
    replicas, partitions = int(da.get(1, [1])[0]), int(da.get(2, [1])[0])
    per_partition = [_ints(_repeated(bytes(c)).get(1, [])) for c in da.get(3, [])]
    devices = tuple(
        per_partition[p][r] for r in range(replicas) for p in range(partitions) if r < len(per_partition[p])
    )
    return replicas, partitions, devices


def _iota(raw: bytes) -> str:
    iota = _repeated(raw)
    groups, size = int(iota.get(1, [0])[0]), int(iota.get(2, [0])[0])
    dims, perm = _ints(iota.get(3, [])), _ints(iota.get(4, []))
    text = f"[{groups},{size}]<=[{','.join(map(str, dims or [groups * size]))}]"
    return text + (f"T({','.join(map(str, perm))})" if perm and perm != sorted(perm) else "")


def _device_list(instruction: Mapping[int, list[Any]]) -> str | None:
    """An instruction's groups in printed form from its proto (explicit or iota), None where none."""
    explicit = [_ints(_repeated(bytes(g)).get(1, [])) for g in instruction.get(49, [])]
    if 87 in instruction:
        listed = _repeated(bytes(instruction[87][0]))
        if 2 in listed:
            return _iota(bytes(listed[2][0]))
        explicit = explicit or [_ints(_repeated(bytes(g)).get(1, [])) for g in listed.get(1, [])]
    if not explicit:
        return None
    return "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in explicit) + "}"


def collective_groups(module: bytes) -> dict[str, str]:
    """Instruction name -> its device groups in printed form, for every instruction whose proto names
    groups (``replica_groups`` field 49 or ``collective_device_list`` field 87)."""
    out = {}
    for comp in _repeated(module).get(3, []):
        for raw in _repeated(bytes(comp)).get(2, []):
            instruction = _repeated(bytes(raw))
            groups = _device_list(instruction)
            if groups is not None:
                out[bytes(instruction[1][0]).decode()] = groups
    return out


_EMPTY_GROUPS = "replica_groups={}"


def repair(text: str, module: bytes) -> tuple[str, tuple[str, ...]]:
    """jaxlib's text of ``module`` with its partition count and the device groups jaxlib dropped
    written in (see the module docstring); the repairs made, in words."""
    replicas, partitions, devices = device_assignment(module)
    lines = text.split("\n")
    repairs = []
    if "num_partitions=" not in lines[0] and lines[0].startswith("HloModule"):
        lines[0] += f", replica_count={replicas}, num_partitions={partitions}"
    if (replicas, partitions) != (1, 1):
        repairs.append(
            f"replica_count={replicas}, num_partitions={partitions} from the proto's device assignment "
            f"({len(devices)} devices: {', '.join(map(str, devices))}); jaxlib's text has the default config's 1"
        )
    groups = collective_groups(module)
    for i, line in enumerate(lines):
        name = instruction_name(line) if _EMPTY_GROUPS in line else None
        printed = groups.get(name) if name else None
        if printed and printed != "{}":
            lines[i] = line.replace(_EMPTY_GROUPS, f"replica_groups={printed}", 1)
            repairs.append(f"{name}: replica_groups={printed} from the proto (jaxlib printed {_EMPTY_GROUPS})")
    return "\n".join(lines), tuple(repairs)


def hlo_text(module: bytes) -> str:
    """jaxlib's printing of a serialized ``HloModuleProto`` (computation signatures included)."""
    hlo = importlib.import_module("jaxlib._hlo")  # jaxlib's HLO bindings (no stubs: typed Any)
    return str(hlo.HloModule.from_serialized_hlo_module_proto(module).to_string())


def profile_programs(planes: tuple[XPlane, ...]) -> dict[str, ProfileProgram]:
    """Every program whose HLO the profile's ``/host:metadata`` holds, by module name (see the
    module docstring); empty for a profile without them."""
    out = {}
    for name, proto in sorted(hlo_protos(planes).items()):
        module = module_proto(proto)
        text, repairs = repair(hlo_text(module), module)
        replicas, partitions, devices = device_assignment(module)
        out[name] = ProfileProgram(name, text, replicas, partitions, devices, repairs)
    return out
