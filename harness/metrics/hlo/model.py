"""The parsed HLO module every metric reads: computations in schedule order, each instruction with
what the analyses need of it derived once (:func:`harness.metrics.hlo.parse` builds it).

Rules the model fixes for every reader:

* an instruction's callees are every computation it names (``calls``, ``to_apply``, ``condition``
  then ``body`` of a ``while``, ``branch_computations`` and the ``true_computation`` /
  ``false_computation`` of a predicated ``conditional``, ``called_computations``): a
  conditional's branches all count, so a conditional is an upper bound;
* a computation *runs as ops of its own* (:attr:`Computation.running`) when it is ENTRY or
  control flow (``while``, ``call``, ``conditional``) calls it; fused computations, reducers and
  the computations an async op wraps do not;
* :attr:`Computation.runs` is how often it runs per call of ENTRY (loop bodies and conditions
  times their trip count, once where unknown; fused computations as often as their op).

Immutable and pure Python.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from harness.metrics.hlo.text import Line

Groups = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class DotDims:
    """A ``dot``'s batch and contracting dimensions of each operand (``lhs_batch_dims={0}`` ...)."""

    lhs_batch: tuple[int, ...] = ()
    lhs_contracting: tuple[int, ...] = ()
    rhs_batch: tuple[int, ...] = ()
    rhs_contracting: tuple[int, ...] = ()


@dataclass(frozen=True)
class Instruction(Line):
    """One instruction (:class:`~harness.metrics.hlo.text.Line`) and what is derived from it.

    * ``op_name``: ``metadata.op_name`` (the JAX path it was traced under), ``source``: the
      ``file:line (function)`` of its innermost stack frame ("" where unknown);
    * ``callees``: the computations it names (see the module docstring);
    * ``bytes``: of its result; ``operand_bytes``: of its operands (inline shapes, else the shapes
      of the instructions named);
    * ``collective``: its collective kind (a sync op, a ``-start`` or ``-done``, a TPU reduce-scatter
      fusion), else None; ``wraps``: the kind of the collective an ``async-start`` / ``call-start``
      or a TPU async collective fusion runs; ``async_role``: ``start`` / ``done`` / ``continuation``
      for a TPU async collective fusion;
    * ``groups``: the device groups it (or the collective it wraps or fuses) names, ``((),)`` for
      ``replica_groups={}`` (all devices), None where none; ``pairs``: a permute's
      ``source_target_pairs``;
    * ``trip_count``: of a ``while`` (None where unknown); ``index``: a ``get-tuple-element``'s
      index or a parameter's number (-1 otherwise);
    * ``flops``: matmul FLOPs of one execution of a ``dot``, ``convolution`` or splash kernel,
      None for any other op; ``traffic``: bytes one execution reads and writes as an op of its
      own (0 in a computation that does not run as ops of its own, and for control flow);
    * ``dimensions``: a collective's ``dimensions={...}``; ``dot``: a dot's batch and contracting
      dimensions; ``dim_labels``: a convolution's (lhs, rhs, output) labels; ``estimated_cycles``:
      the compiler's estimate in its backend_config (TPU), None where it gives none.
    """

    op_name: str = ""
    source: str = ""
    callees: tuple[str, ...] = ()
    bytes: int = 0
    operand_bytes: int = 0
    collective: str | None = None
    wraps: str | None = None
    async_role: str | None = None
    groups: Groups | None = None
    pairs: tuple[tuple[int, int], ...] = ()
    trip_count: int | None = None
    index: int = -1
    flops: int | None = None
    traffic: int = 0
    dimensions: tuple[int, ...] = ()
    dot: DotDims | None = None
    dim_labels: tuple[str, str, str] | None = None
    estimated_cycles: int | None = None


@dataclass(frozen=True)
class Computation:
    """One computation: its instructions in schedule order, its ROOT, how often it runs per call
    of ENTRY, whether it runs as ops of its own, and ``flops``: matmul FLOPs of one run of it (its
    ops' and, nested, those of what they call; loop bodies times their trip counts)."""

    name: str
    instructions: tuple[Instruction, ...]
    root: str | None
    runs: int
    running: bool
    flops: int

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    def __getitem__(self, index: int | slice) -> Instruction | tuple[Instruction, ...]:
        return self.instructions[index]

    @property
    def shapes(self) -> dict[str, str]:
        """Instruction name -> shape."""
        return {i.name: i.shape for i in self.instructions}


@dataclass(frozen=True)
class HloModule:
    """A compiled program's module: its name, ``num_partitions`` (devices under SPMD), ENTRY, and
    every computation by name in text order."""

    name: str
    entry: str | None
    computations: Mapping[str, Computation]
    num_partitions: int = 1

    def instructions(self) -> Iterator[tuple[Computation, Instruction]]:
        """Every (computation, instruction) pair, computations in text order."""
        for comp in self.computations.values():
            for instr in comp.instructions:
                yield comp, instr

    @property
    def unknown_trip_counts(self) -> tuple[str, ...]:
        """Names of the ``while`` loops in running computations whose trip count is unknown."""
        return tuple(
            i.name for c, i in self.instructions() if c.running and i.opcode == "while" and i.trip_count is None
        )
