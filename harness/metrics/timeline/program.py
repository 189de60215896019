"""The scheduled program as the simulator walks it: each computation's instructions in schedule
order, each classified once (what it costs is independent of the spec's constants).

Classes of instruction:

* ``free``: bookkeeping that moves no data (parameter, constant, tuple, get-tuple-element,
  bitcast, partition-id, ...), and async DMAs that move no HBM bytes;
* ``compute``: everything else that runs, priced by its matmul FLOPs (a fusion: those of the
  computations it calls; the splash kernel: its own) and the bytes it reads and writes (both read
  once by :func:`harness.metrics.hlo.parse`: ``Instruction.flops`` and ``traffic``); a *scalar* one
  (``Op.scalar``: not a fusion or kernel, its result and every operand rank 0, e.g. a loop counter's
  add or a copy of an ``f32[]``) runs no tiled loop, which the spec's ``scalar_ops`` prices;
* ``sync`` / ``start`` / ``done``: collectives (a TPU reduce-scatter fusion is a sync
  reduce-scatter; ``async-start`` calling a collective is that collective's start; a TPU async
  collective fusion (``Instruction.async_role``), whose computation ends in
  the ``AsyncCollectiveStart`` / ``-Done`` custom call, is a start / done; a ``call-start`` /
  ``call-done`` pair running a collective on another execution thread -- libtpu 0.0.42.1 schedules
  the tpu7x step's all-gathers and all-reduces this way, ``async_execution_thread="sparsecore"``
  -- is that collective's start / done);
* ``offload`` / ``offload-done``: a ``call-start`` / ``call-done`` pair running a copy on another
  execution thread (libtpu's ``sparse-core-data-format`` calls re-tile the bf16 weight stacks for
  the matmuls, once per program run): the bytes its computation reads and writes, moved beside
  compute at HBM bandwidth (an upper bound on a SparseCore DMA's speed: no published figure); its
  done waits for them. The async DMAs (``copy-start``/``-done``, TPU ``slice-start``/``-done``,
  ``dynamic-slice-start``/``-done``: memory-space assignment prefetching a buffer, or a scan's weight
  slice, from HBM into VMEM, and evicting one back) are offloads too, priced by their HBM bytes
  (``Instruction.traffic``); the ops that then read or write the VMEM copy move no HBM bytes.
  A ``copy-start`` to or from host memory (``S(5)``: host offload) is a host copy (``Op.host``:
  ``in`` from the host, ``out`` to it): its bytes cross the host link (PCIe), one queue per
  direction, at the spec's ``host_bytes_per_s`` (:mod:`~harness.metrics.timeline.simulate`);
* ``continuation``: a TPU compute fusion that also advances an async collective fusion (libtpu's
  ``xla_tpu_enable_async_collective_fusion_multiple_steps``): compute, priced by its own FLOPs and
  bytes (the collective's state it passes through left out); the transfer runs from start to done;
* ``while`` / ``call`` / ``conditional``: control flow, run by the simulator (every branch of a
  conditional: the module's callees, :mod:`harness.metrics.hlo.model`).

Pure Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from harness.metrics.compiled.aot import ring_wire_bytes
from harness.metrics.hlo.model import HloModule, Instruction
from harness.metrics.hlo.text import shape_bytes, top_level_items
from harness.metrics.timeline.groups import Groups, all_devices

OFFLOAD, OFFLOAD_DONE = "offload", "offload-done"
HOST_MEMORY = 5  # XLA's host memory space (xla/layout.h kHostMemorySpace), printed S(5)
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
        "async-update",
        "get-dimension-size",
        "set-dimension-size",
    }
)
# Async DMAs: offloads where they move HBM bytes, else free (a VMEM-to-VMEM copy); a done waits for its start.
_DMA_STARTS = frozenset({"copy-start", "slice-start", "dynamic-slice-start"})
_DMA_DONES = frozenset({"copy-done", "slice-done", "dynamic-slice-done"})
_PASS_THROUGH = frozenset({"bitcast", "opt-barrier", "copy-start", "copy-done", "async-update", "add-dependency"})


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
    host: str = ""  # a host copy's direction: "in" (host -> device) or "out" (device -> host)
    scalar: bool = False  # a compute op on rank-0 values only, outside any fusion or kernel

    @property
    def name(self) -> str:
        return self.instr.name

    def wire_bytes(self, group_size: int) -> float:
        """Bytes one device sends for this collective (ring algorithms, :func:`ring_wire_bytes`)."""
        return ring_wire_bytes(self.kind, self.operand_bytes, group_size)


@dataclass
class Program:
    """Every running computation's ops in schedule order, the module they come from and its device count."""

    module: HloModule
    ops: dict[str, list[Op]] = field(default_factory=dict)
    num_devices: int = 1
    unknown_trip_counts: list[str] = field(default_factory=list)

    @property
    def entry(self) -> str:
        if not self.module.entry:
            raise ValueError("HLO text has no ENTRY computation")
        return self.module.entry

    @property
    def leads_with_scalar(self) -> bool:
        """Whether the first op the entry runs (past parameters, tuples and the like) is a scalar op."""
        return next((op.scalar for op in self.ops.get(self.module.entry or "", []) if op.cls != "free"), False)

    def root(self, computation: str) -> str | None:
        """The name of a computation's ROOT instruction (None where none is marked)."""
        comp = self.module.computations.get(computation)
        return comp.root if comp is not None else None


def _destination(instr: Instruction) -> str:
    """A ``copy-start``'s destination: element 0 of its ``(destination, source, context)`` tuple."""
    if not instr.shape.startswith("("):
        return instr.shape
    return next(top_level_items(instr.shape[1 : instr.shape.rindex(")")]), instr.shape)


def host_direction(instr: Instruction, shapes: dict[str, str]) -> str:
    """``out`` for a copy into host memory, ``in`` for one out of it, "" otherwise."""
    if shape_bytes(_destination(instr), HOST_MEMORY):
        return "out"
    source = (instr.operand_shapes[0] or shapes.get(instr.operands[0], "")) if instr.operands else ""
    return "in" if shape_bytes(source, HOST_MEMORY) else ""


def host_bytes(instr: Instruction) -> int:
    """Bytes a host copy moves across the host link: its destination's."""
    return shape_bytes(_destination(instr))


def _collective(instr: Instruction, cls: str, kind: str, devices: int) -> Op:
    """A collective op, its groups those the parse resolved (its own, or those of the all-reduce inside
    a TPU reduce-scatter fusion or of the collective an async op wraps)."""
    if kind == "collective-permute":
        return Op(instr, cls, kind=kind, operand_bytes=instr.operand_bytes, pairs=instr.pairs)
    return Op(instr, cls, kind=kind, operand_bytes=instr.operand_bytes, groups=all_devices(instr.groups, devices))


def _nested_flops(instr: Instruction, module: HloModule) -> int:
    return sum(module.computations[c].flops for c in instr.callees if c in module.computations)


def _async_fusion(instr: Instruction, kind: str, module: HloModule, devices: int) -> Op:
    """A TPU async collective fusion: its start issues the collective (groups from the one inside), its
    done waits for it; a continuation is compute, priced without the collective's state it passes through
    (aliased operands, read and written in place: the transfer's, not the compute's, bytes)."""
    if instr.async_role == "start":
        return _collective(instr, "start", kind, devices)
    if instr.async_role == "done":
        return Op(instr, "done", kind=kind)
    flops = _nested_flops(instr, module)  # its traffic leaves out the state (harness.metrics.hlo.cost)
    return Op(instr, "continuation", flops=float(flops), bytes=float(instr.traffic), kind=kind)


def classify(instr: Instruction, shapes: dict[str, str], module: HloModule, devices: int) -> Op:
    """One instruction's :class:`Op` (see the module docstring)."""
    op = instr.opcode
    if op == "get-tuple-element" or op == "parameter":
        return Op(instr, "free", index=instr.index)
    if op in FREE:
        return Op(instr, "free")
    if op == "copy-start" and (direction := host_direction(instr, shapes)):
        return Op(instr, OFFLOAD, bytes=float(host_bytes(instr)), kind=OFFLOAD, host=direction)
    if op in _DMA_STARTS:
        return Op(instr, OFFLOAD, bytes=float(instr.traffic), kind=OFFLOAD) if instr.traffic else Op(instr, "free")
    if op in _DMA_DONES:
        return Op(instr, "free")  # build_program makes the dones of offloaded DMAs theirs
    if op == "async-start" and instr.wraps is not None:
        return _collective(instr, "start", instr.wraps, devices)
    if op == "async-done":
        return Op(instr, "done")
    if op == "call-start":  # TPU work offloaded to another execution thread (v7x: the SparseCore)
        if instr.wraps is not None:
            return _collective(instr, "start", instr.wraps, devices)
        return Op(instr, OFFLOAD, bytes=float(instr.traffic), kind=OFFLOAD)  # its operands read, its copy written
    if op == "call-done":
        return Op(instr, "done")  # build_program makes the dones of offloaded copies theirs
    if instr.async_role is not None and instr.wraps is not None:
        return _async_fusion(instr, instr.wraps, module, devices)
    kind = instr.collective
    if kind is not None:
        if op.endswith("-done"):
            return Op(instr, "done", kind=kind)
        return _collective(instr, "start" if op.endswith("-start") else "sync", kind, devices)
    if op == "while":
        return Op(instr, "while", callees=instr.callees, trip_count=instr.trip_count)
    if op in ("call", "conditional"):
        return Op(instr, op, callees=tuple(c for c in instr.callees if c in module.computations))
    flops = instr.flops if instr.flops is not None else _nested_flops(instr, module)
    return Op(instr, "compute", flops=float(flops), bytes=float(instr.traffic), scalar=is_scalar(instr, shapes))


_KERNELS = frozenset({"fusion", "custom-call", "convolution", "dot"})
_RANK0 = re.compile(r"[a-z][a-z0-9]*\[\]")


def is_scalar(instr: Instruction, shapes: dict[str, str]) -> bool:
    """Whether ``instr`` is a scalar op: not a fusion or kernel, its result and every operand rank 0."""
    if instr.opcode in _KERNELS or not _RANK0.match(instr.shape):
        return False
    operands = zip(instr.operands, instr.operand_shapes, strict=True)
    return all(_RANK0.match(inline or shapes.get(name, "")) for name, inline in operands)


def build_program(module: HloModule) -> Program:
    """Classify every instruction of the computations that run as ops of their own."""
    if not module.entry:
        raise ValueError("HLO text has no ENTRY computation (expected compiled.as_text() of a scheduled module)")
    program = Program(module, num_devices=module.num_partitions)
    for comp in module.computations.values():
        if not comp.running:
            continue
        shapes = comp.shapes
        ops = [classify(i, shapes, module, program.num_devices) for i in comp.instructions]
        collective_calls = {o.name for o in ops if o.cls == "start" and o.instr.opcode == "call-start"}
        copies = {o.name for o in ops if o.cls == OFFLOAD}
        program.ops[comp.name] = [_call_done(o, collective_calls, copies) for o in ops]
    program.unknown_trip_counts = list(module.unknown_trip_counts)
    return program


def _call_done(op: Op, collective_calls: set[str], copies: set[str]) -> Op:
    """A ``call-done`` or DMA done as what its start ran: a collective's done, an offloaded copy's
    (``offload-done``), or free (a start this computation does not hold, a DMA that moved no HBM bytes)."""
    if op.instr.opcode in _DMA_DONES:
        return Op(op.instr, OFFLOAD_DONE, kind=OFFLOAD) if set(op.instr.operands) & copies else op
    if op.instr.opcode != "call-done" or set(op.instr.operands) & collective_calls:
        return op
    if set(op.instr.operands) & copies:
        return Op(op.instr, OFFLOAD_DONE, kind=OFFLOAD)
    return Op(op.instr, "free")


def pass_through(op: Op) -> bool:
    """Whether a free op's result is its first operand's value (tokens of async transfers flow through)."""
    return op.instr.opcode in _PASS_THROUGH
