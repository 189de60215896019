"""Count collectives in optimized, post-SPMD HLO text (`jax.stages.Compiled.as_text()`).

Numbers are per device, per call of the ENTRY computation:

* sync collectives count once each; async `-start`/`-done` pairs count once, with
  operand bytes taken from the start and result bytes from the done;
* on TPU a reduce-scatter is a fusion that calls a computation named
  `all-reduce-scatter*` (an all-reduce plus a dynamic-slice); it counts as one
  reduce-scatter with the fusion's own operand and result shapes;
* a TPU async collective fusion (start, continuation and done fusions, each holding the collective:
  :func:`async_collective_fusion`) counts once, in its start;
* collectives inside a `while` body are multiplied by the loop's trip count, read
  from the `known_trip_count` backend config (CPU, GPU) or, failing that, from a
  `compare(i, constant)` in the loop condition (TPU; the induction variable is
  assumed to start at 0 and step by 1). A loop whose trip count cannot be found is
  counted once and listed in `CollectiveStats.unknown_trip_count_loops`;
* every branch of a `conditional` is counted, so conditionals give an upper bound.

`lowered.as_text()` is StableHLO before partitioning and holds no collectives. Parsing the text
is :mod:`harness.metrics.hlo_parse` (its names are importable from here too).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from harness.metrics.hlo_parse import (
    Instruction,
    Module,
    parse_instruction,
    parse_module,
    shape_bytes,
    shape_dims,
    top_level_items,
)
from harness.vocabulary import KINDS

_Module = Module  # the parsed-module type's name before it moved to hlo_parse


_CALLEES = re.compile(
    r"\b(?:calls|to_apply|body|condition|branch_computations|called_computations)=(\{[^}]*\}|%?[\w.\-]+)"
)
_KNOWN_TRIP_COUNT = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_DIRECTION = re.compile(r"\bdirection=([A-Z]+)")
_PARAMETER_INDEX = re.compile(r"^\s*(\d+)\s*$")
_INT_LITERAL = re.compile(r"^\s*(-?\d+)\s*$")
_REDUCE_SCATTER_COMPUTATION = "all-reduce-scatter"
# Ops that only finish or advance an async op started elsewhere: never descend into them.
ASYNC_CONTINUATIONS = ("async-update", "async-done")
_ASYNC_TARGET = re.compile(r'custom_call_target="AsyncCollective(Start|Done)"')  # TPU async collective fusions


@dataclass(frozen=True)
class CollectiveCount:
    """Totals for one collective kind, per device, per call of the program."""

    count: int = 0
    operand_bytes: int = 0
    result_bytes: int = 0

    def __add__(self, other: CollectiveCount) -> CollectiveCount:
        return CollectiveCount(
            self.count + other.count,
            self.operand_bytes + other.operand_bytes,
            self.result_bytes + other.result_bytes,
        )

    def __mul__(self, n: int) -> CollectiveCount:
        return CollectiveCount(self.count * n, self.operand_bytes * n, self.result_bytes * n)


@dataclass(frozen=True)
class CollectiveStats:
    """Collectives of one compiled program, every kind in `KINDS` present (zero if absent)."""

    by_kind: Mapping[str, CollectiveCount]
    unknown_trip_count_loops: tuple[str, ...] = ()

    def __getitem__(self, kind: str) -> CollectiveCount:
        return self.by_kind[kind]

    @property
    def total_count(self) -> int:
        return sum(c.count for c in self.by_kind.values())

    def to_dict(self) -> dict[str, object]:
        """JSON-serialisable form: `{kind: {count, operand_bytes, result_bytes}, ...}`."""
        return {
            "by_kind": {k: vars(c).copy() for k, c in self.by_kind.items()},
            "unknown_trip_count_loops": list(self.unknown_trip_count_loops),
        }


def callees(instr: Instruction) -> list[str]:
    """Names of the computations an instruction calls (fusion bodies, loop bodies, branches, reducers)."""
    return _callees(instr)


def _callees(instr: Instruction) -> list[str]:
    names: list[str] = []
    for group in _CALLEES.findall(instr.attributes):
        names += [n.strip().lstrip("%") for n in group.strip("{}").split(",") if n.strip()]
    return names


def collective_kind(instr: Instruction) -> str | None:
    """The collective kind of an op (sync, ``-start`` or ``-done``, or a TPU reduce-scatter fusion), else None."""
    return _collective_kind(instr)


def own_collective(instr: Instruction, shapes: Mapping[str, str]) -> CollectiveCount:
    """One collective op's contribution: a start or sync op counts once with its operand bytes."""
    return _own_collective(instr, shapes)


def _collective_kind(instr: Instruction) -> str | None:
    """Kind for a collective op (sync, -start or -done) or a TPU reduce-scatter fusion."""
    if any(c.startswith(_REDUCE_SCATTER_COMPUTATION) for c in _callees(instr)):
        return "reduce-scatter"
    base = re.sub(r"-(start|done)$", "", instr.opcode)
    return base if base in KINDS else None


@dataclass(frozen=True)
class AsyncCollectiveFusion:
    """A TPU async collective fusion: ``role`` ``start`` / ``done`` (its ROOT is the ``AsyncCollectiveStart`` /
    ``-Done`` custom call) or ``continuation`` (a compute fusion with a ``continuation_config`` that also
    advances the collective, its state passed through as aliased operands); ``collective``: the one inside."""

    role: str
    collective: Instruction | None


def async_collective_fusion(instr: Instruction, module: _Module) -> AsyncCollectiveFusion | None:
    """The async collective fusion an instruction is, else None (see :class:`AsyncCollectiveFusion`)."""
    if instr.opcode != "fusion":
        return None
    role = "continuation" if '"continuation_config"' in instr.attributes else None
    inner = None
    for callee in _callees(instr):
        body = module.computations.get(callee, [])
        root = next((i for i in body if i.name == module.roots.get(callee)), body[-1] if body else None)
        m = _ASYNC_TARGET.search(root.attributes) if root is not None and root.opcode == "custom-call" else None
        role = m.group(1).lower() if m else role
        inner = inner or next((i for i in body if _collective_kind(i) is not None), None)
    return AsyncCollectiveFusion(role, inner) if role else None


def operand_bytes(instr: Instruction, shapes: Mapping[str, str]) -> int:
    return sum(
        shape_bytes(inline or shapes.get(name, ""))
        for name, inline in zip(instr.operands, instr.operand_shapes, strict=True)
    )


def _own_collective(instr: Instruction, shapes: Mapping[str, str]) -> CollectiveCount:
    """This instruction's contribution: start -> count + operands, done -> result, sync -> all."""
    is_start, is_done = instr.opcode.endswith("-start"), instr.opcode.endswith("-done")
    return CollectiveCount(
        count=0 if is_done else 1,
        operand_bytes=0 if is_done else operand_bytes(instr, shapes),
        result_bytes=0 if is_start else shape_bytes(instr.shape),
    )


def _int_constant(name: str, scope: list[Instruction]) -> int | None:
    for instr in scope:
        if instr.name == name and instr.opcode == "constant":
            m = _INT_LITERAL.match(instr.literal)
            return int(m.group(1)) if m else None
    return None


def _fused_constant(name: str, fusion: Instruction, fused: list[Instruction], outer: list[Instruction]) -> int | None:
    """Integer constant behind `name` inside a fused computation; parameters map to fusion operands."""
    for instr in fused:
        if instr.name == name and instr.opcode == "parameter":
            index = int(instr.literal)
            return _int_constant(fusion.operands[index], outer) if index < len(fusion.operands) else None
    return _int_constant(name, fused)


def _comparisons(cond: list[Instruction], module: _Module) -> Iterator[tuple[str, int | None, int | None]]:
    """(direction, lhs constant, rhs constant) for compares in a loop condition, seeing into fusions."""
    for instr in cond:
        if instr.opcode == "compare":
            lhs, rhs = (_int_constant(n, cond) for n in instr.operands[:2])
            yield _direction(instr), lhs, rhs
        for callee in _callees(instr) if instr.opcode == "fusion" else ():
            fused = module.computations.get(callee, [])
            for inner in (i for i in fused if i.opcode == "compare"):
                lhs, rhs = (_fused_constant(n, instr, fused, cond) for n in inner.operands[:2])
                yield _direction(inner), lhs, rhs


def _direction(instr: Instruction) -> str:
    m = _DIRECTION.search(instr.attributes)
    return m.group(1) if m else ""


def _condition_trip_count(condition: str, module: _Module) -> int | None:
    """Trip count from `i < N`, `i <= N`, `N > i` or `N >= i` in the condition (i from 0, step 1)."""
    for direction, lhs, rhs in _comparisons(module.computations.get(condition, []), module):
        if lhs is None and rhs is not None and direction in ("LT", "LE"):
            return rhs + (direction == "LE")
        if rhs is None and lhs is not None and direction in ("GT", "GE"):
            return lhs + (direction == "GE")
    return None


def while_trip_count(instr: Instruction, module: _Module) -> int | None:
    """Trip count of a `while` instruction, or None when neither source gives one."""
    m = _KNOWN_TRIP_COUNT.search(instr.attributes)
    if m:
        return int(m.group(1))
    cond = re.search(r"\bcondition=%?([\w.\-]+)", instr.attributes)
    return _condition_trip_count(cond.group(1), module) if cond else None


@dataclass(frozen=True)
class _Tally:
    by_kind: Mapping[str, CollectiveCount]
    unknown_loops: frozenset[str] = frozenset()

    def plus(self, other: _Tally, times: int = 1) -> _Tally:
        kinds = {k: self.by_kind.get(k, CollectiveCount()) + c * times for k, c in other.by_kind.items()}
        return _Tally({**self.by_kind, **kinds}, self.unknown_loops | other.unknown_loops)


def _tally(module: _Module) -> _Tally:
    @functools.cache
    def visit(computation: str) -> _Tally:
        instrs = module.computations.get(computation, [])
        shapes = {i.name: i.shape for i in instrs}
        tally = _Tally({})
        for instr in instrs:
            kind = _collective_kind(instr)
            if kind is not None:
                tally = tally.plus(_Tally({kind: _own_collective(instr, shapes)}))
                continue
            if instr.opcode in ASYNC_CONTINUATIONS:
                continue
            if (fused := async_collective_fusion(instr, module)) is not None and fused.role != "start":
                continue  # the collective counts once, in its start fusion
            times = 1
            if instr.opcode == "while":
                trip = while_trip_count(instr, module)
                times = 1 if trip is None else trip
                if trip is None:
                    tally = tally.plus(_Tally({}, frozenset({instr.name})))
            for callee in _callees(instr):
                if callee in module.computations:
                    tally = tally.plus(visit(callee), times)
        return tally

    return visit(module.entry) if module.entry else _Tally({})


def collective_stats(hlo_text: str) -> CollectiveStats:
    """Collectives of an optimized HLO module, per device, trip-count weighted."""
    tally = _tally(parse_module(hlo_text))
    by_kind = {k: tally.by_kind.get(k, CollectiveCount()) for k in KINDS}
    return CollectiveStats(by_kind, tuple(sorted(tally.unknown_loops)))


def collective_instructions(hlo_text: str) -> dict[str, str]:
    """Instruction name -> collective kind, for every collective op in the module.

    Trace events are named after instructions; this tells which ones are collectives
    when the name alone does not (a TPU reduce-scatter fusion may be called `fusion.65`).
    """
    module = parse_module(hlo_text)
    return {
        instr.name: kind
        for instrs in module.computations.values()
        for instr in instrs
        if (kind := _collective_kind(instr)) is not None
    }


__all__ = [
    "KINDS",
    "AsyncCollectiveFusion",
    "CollectiveCount",
    "CollectiveStats",
    "Instruction",
    "Module",
    "async_collective_fusion",
    "callees",
    "collective_instructions",
    "collective_kind",
    "collective_stats",
    "operand_bytes",
    "own_collective",
    "parse_instruction",
    "parse_module",
    "shape_bytes",
    "shape_dims",
    "top_level_items",
    "while_trip_count",
]
