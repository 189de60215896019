"""The scheduled program as the simulator walks it: each computation's instructions in schedule
order, each classified once (what it costs is independent of the spec's constants).

Classes of instruction:

* ``free``: bookkeeping that moves no data (parameter, constant, tuple, get-tuple-element,
  bitcast, partition-id, ...) and async DMAs (``copy-start``/``-done``, TPU ``slice-start``/
  ``-done`` and ``dynamic-slice-start``/``-done``: prefetches run by DMA engines beside compute;
  their HBM traffic is not priced, the ops that read the result are);
* ``compute``: everything else that runs, priced by its matmul FLOPs (a fusion: those of the
  computations it calls; the splash kernel: :func:`harness.metrics.hlo_cost.instruction_flops`) and
  the bytes it reads and writes (:func:`harness.metrics.hlo_cost.instruction_traffic`);
* ``sync`` / ``start`` / ``done``: collectives (a TPU reduce-scatter fusion is a sync
  reduce-scatter; ``async-start`` calling a collective is that collective's start; a TPU async
  collective fusion, :func:`harness.metrics.hlo.async_collective_fusion`, whose computation ends in
  the ``AsyncCollectiveStart`` / ``-Done`` custom call, is a start / done; a ``call-start`` /
  ``call-done`` pair running a collective on another execution thread -- libtpu 0.0.42.1 schedules
  the tpu7x step's all-gathers and all-reduces this way, ``async_execution_thread="sparsecore"``
  -- is that collective's start / done, and one running a copy there is free like ``copy-start``);
* ``continuation``: a TPU compute fusion that also advances an async collective fusion (libtpu's
  ``xla_tpu_enable_async_collective_fusion_multiple_steps``): compute, priced by its own FLOPs and
  bytes (the collective's state it passes through left out); the transfer runs from start to done;
* ``while`` / ``call`` / ``conditional``: control flow, run by the simulator.

Pure Python.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from harness.metrics import hlo, hlo_cost
from harness.metrics.aot import ring_wire_bytes
from harness.metrics.hlo_parse import Instruction, Module, aliased_operands, parse_module, shape_bytes
from harness.metrics.timeline.groups import Groups, permute_pairs, replica_groups

FREE = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "bitcast",
        "after-all",
        "partition-id",
        "replica-id",
        "opt-barrier",
        "add-dependency",
        "domain",
        "copy-start",
        "copy-done",
        "async-update",
        "get-dimension-size",
        "set-dimension-size",
        "slice-start",
        "slice-done",
        "dynamic-slice-start",
        "dynamic-slice-done",
    }
)
_PASS_THROUGH = frozenset({"bitcast", "opt-barrier", "copy-start", "copy-done", "async-update", "add-dependency"})
_BRANCHES = re.compile(r"\b(?:true_computation|false_computation)=%?([\w.\-]+)")
_NUM_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")
_INDEX = re.compile(r"\bindex=(\d+)")


@dataclass(frozen=True)
class Op:
    """One instruction, classified. ``flops``/``bytes``: one execution of a compute op.
    Collectives: ``kind``, ``operand_bytes``, ``groups`` (device ids) or ``pairs`` (a permute)."""

    instr: Instruction
    cls: str
    flops: float = 0.0
    bytes: float = 0.0
    kind: str = ""
    operand_bytes: float = 0.0
    groups: Groups = ()
    pairs: tuple[tuple[int, int], ...] = ()
    callees: tuple[str, ...] = ()
    trip_count: int | None = None
    index: int = -1  # get-tuple-element index, parameter number

    @property
    def name(self) -> str:
        return self.instr.name

    def wire_bytes(self, group_size: int) -> float:
        """Bytes one device sends for this collective (ring algorithms, :func:`ring_wire_bytes`)."""
        return ring_wire_bytes(self.kind, self.operand_bytes, group_size)


@dataclass
class Program:
    """Every computation's ops in schedule order, the ENTRY computation, roots and device count."""

    module: Module
    ops: dict[str, list[Op]] = field(default_factory=dict)
    num_devices: int = 1
    unknown_trip_counts: list[str] = field(default_factory=list)

    @property
    def entry(self) -> str:
        if not self.module.entry:
            raise ValueError("HLO text has no ENTRY computation")
        return self.module.entry


def _async_collective(instr: Instruction, module: Module) -> Instruction | None:
    """The collective an ``async-start`` runs (its ``calls=`` computation holds it), else None."""
    for callee in hlo.callees(instr):
        for inner in module.computations.get(callee, ()):
            if hlo.collective_kind(inner) is not None:
                return inner
    return None


def _collective(
    instr: Instruction,
    cls: str,
    kind: str,
    shapes: Mapping[str, str],
    module: Module,
    devices: int,
    grouped: Instruction | None = None,
) -> Op:
    """A collective op; ``grouped`` is the instruction whose attributes name its groups (the
    all-reduce inside a TPU reduce-scatter fusion, the collective an async-start wraps)."""
    source = grouped or instr
    attrs = source.attributes
    operand = hlo.own_collective(instr, shapes).operand_bytes
    if kind == "collective-permute":
        return Op(instr, cls, kind=kind, operand_bytes=operand, pairs=permute_pairs(attrs))
    return Op(instr, cls, kind=kind, operand_bytes=operand, groups=replica_groups(attrs, devices))


def _fused_groups(instr: Instruction, module: Module) -> Instruction | None:
    for callee in hlo.callees(instr):
        for inner in module.computations.get(callee, ()):
            if "replica_groups" in inner.attributes:
                return inner
    return None


def _async_fusion(
    instr: Instruction,
    role: str,
    collective: Instruction,
    shapes: Mapping[str, str],
    module: Module,
    devices: int,
    flops_of: Callable[[str], int],
) -> Op:
    """A TPU async collective fusion: its start issues the collective (groups from the one inside), its
    done waits for it; a continuation is compute, priced without the collective's state it passes through
    (aliased operands, read and written in place: the transfer's, not the compute's, bytes)."""
    kind = hlo.collective_kind(collective) or ""
    if role == "start":
        return _collective(instr, "start", kind, shapes, module, devices, collective)
    if role == "done":
        return Op(instr, "done", kind=kind)
    aliased = [i for i in aliased_operands(instr) if i < len(instr.operands)]
    size = {i: shape_bytes(instr.operand_shapes[i] or shapes.get(instr.operands[i], "")) for i in aliased}
    state = sum(size.values()) + sum(size[i] for i in aliased)  # each state operand read, each aliased output written
    flops = sum(flops_of(c) for c in hlo.callees(instr) if c in module.computations)
    traffic = hlo_cost.instruction_traffic(instr, shapes, module)
    return Op(instr, "continuation", flops=float(flops), bytes=float(max(traffic - state, 0)), kind=kind)


def classify(
    instr: Instruction, shapes: Mapping[str, str], module: Module, devices: int, flops_of: Callable[[str], int]
) -> Op:
    """One instruction's :class:`Op` (see the module docstring)."""
    op = instr.opcode
    if op == "get-tuple-element" or op == "parameter":
        m = _INDEX.search(instr.attributes) if op == "get-tuple-element" else None
        index = int(m.group(1)) if m else int(instr.literal.strip() or -1) if op == "parameter" else -1
        return Op(instr, "free", index=index)
    if op in FREE:
        return Op(instr, "free")
    if op == "async-start":
        inner = _async_collective(instr, module)
        kind = hlo.collective_kind(inner) if inner is not None else None
        if inner is not None and kind is not None:
            return _collective(instr, "start", kind, shapes, module, devices, inner)
    if op == "async-done":
        return Op(instr, "done")
    if op == "call-start":  # TPU work offloaded to another execution thread (v7x: the SparseCore)
        inner = _async_collective(instr, module)
        kind = hlo.collective_kind(inner) if inner is not None else None
        if inner is not None and kind is not None:
            return _collective(instr, "start", kind, shapes, module, devices, inner)
        return Op(instr, "free")  # an offloaded copy: a DMA beside compute, as copy-start
    if op == "call-done":
        return Op(instr, "done")  # build_program frees the dones of offloaded copies
    fused = hlo.async_collective_fusion(instr, module)
    if fused is not None and fused.collective is not None:
        return _async_fusion(instr, fused.role, fused.collective, shapes, module, devices, flops_of)
    kind = hlo.collective_kind(instr)
    if kind is not None:
        if op.endswith("-done"):
            return Op(instr, "done", kind=kind)
        cls = "start" if op.endswith("-start") else "sync"
        grouped = _fused_groups(instr, module) if op == "fusion" else None
        return _collective(instr, cls, kind, shapes, module, devices, grouped)
    if op == "while":
        body = re.search(r"\bbody=%?([\w.\-]+)", instr.attributes)
        cond = re.search(r"\bcondition=%?([\w.\-]+)", instr.attributes)
        callees = tuple(m.group(1) for m in (cond, body) if m)
        return Op(instr, "while", callees=callees, trip_count=hlo.while_trip_count(instr, module))
    if op in ("call", "conditional"):
        callees = tuple(hlo.callees(instr)) + tuple(_BRANCHES.findall(instr.attributes))
        return Op(instr, op, callees=tuple(c for c in callees if c in module.computations))
    own = hlo_cost.instruction_flops(instr, shapes)
    flops = own if own is not None else sum(flops_of(c) for c in hlo.callees(instr) if c in module.computations)
    return Op(instr, "compute", flops=float(flops), bytes=float(hlo_cost.instruction_traffic(instr, shapes, module)))


def _running(module: Module) -> set[str]:
    """ENTRY and the computations control flow runs (not fused computations or reducers)."""
    out = {module.entry} if module.entry else set()
    for instrs in module.computations.values():
        for instr in instrs:
            if instr.opcode in hlo_cost.CONTROL_FLOW:
                out.update(hlo.callees(instr))
                out.update(_BRANCHES.findall(instr.attributes))
    return out


def build_program(hlo_text: str) -> Program:
    """Parse and classify every instruction of the computations that run as ops of their own."""
    module = parse_module(hlo_text)
    if not module.entry:
        raise ValueError("HLO text has no ENTRY computation (expected compiled.as_text() of a scheduled module)")
    header = hlo_text.split("\n", 1)[0]
    m = _NUM_PARTITIONS.search(header)
    program = Program(module, num_devices=int(m.group(1)) if m else 1)
    flops_of = hlo_cost.computation_flops(module)
    for name in _running(module):
        instrs = module.computations.get(name, [])
        shapes = {i.name: i.shape for i in instrs}
        ops = [classify(i, shapes, module, program.num_devices, flops_of) for i in instrs]
        collective_calls = {o.name for o in ops if o.cls == "start" and o.instr.opcode == "call-start"}
        program.ops[name] = [
            Op(o.instr, "free") if o.instr.opcode == "call-done" and not set(o.instr.operands) & collective_calls else o
            for o in ops
        ]
        program.unknown_trip_counts += [o.name for o in program.ops[name] if o.cls == "while" and o.trip_count is None]
    return program


def pass_through(op: Op) -> bool:
    """Whether a free op's result is its first operand's value (tokens of async transfers flow through)."""
    return op.instr.opcode in _PASS_THROUGH
