"""Collectives of a parsed module: what kind an op is, which collective an async op runs and which
devices it spans (read once, while parsing), and the per-kind totals of a program.

Totals are per device, per call of the ENTRY computation:

* sync collectives count once each; async `-start`/`-done` pairs count once, with
  operand bytes taken from the start and result bytes from the done;
* on TPU a reduce-scatter is a fusion that calls a computation named
  `all-reduce-scatter*` (an all-reduce plus a dynamic-slice); it counts as one
  reduce-scatter with the fusion's own operand and result shapes;
* a TPU async collective fusion (start, continuation and done fusions, each holding the
  collective) counts once, in its start;
* collectives inside a `while` body are multiplied by the loop's trip count
  (:mod:`harness.metrics.hlo.loops`); a loop whose trip count cannot be found is counted once
  and listed in `CollectiveStats.unknown_trip_count_loops`;
* every branch of a `conditional` is counted, so conditionals give an upper bound.

`lowered.as_text()` is StableHLO before partitioning and holds no collectives.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.metrics.hlo.model import Groups, HloModule, Instruction
from harness.metrics.hlo.replica_groups import device_groups, pairs
from harness.metrics.hlo.text import Line
from harness.vocabulary import KINDS

_REDUCE_SCATTER_COMPUTATION = "all-reduce-scatter"
# Ops that only finish or advance an async op started elsewhere: never descend into them.
ASYNC_CONTINUATIONS = ("async-update", "async-done")
_ASYNC_TARGET = re.compile(r'custom_call_target="AsyncCollective(Start|Done)"')  # TPU async collective fusions
_WRAPPERS = ("async-start", "call-start")  # ops that run the computation they call, collective or not


def collective_kind(opcode: str, callees: Sequence[str]) -> str | None:
    """The collective kind of an op (sync, ``-start`` or ``-done``, or a TPU reduce-scatter fusion), else None."""
    if any(c.startswith(_REDUCE_SCATTER_COMPUTATION) for c in callees):
        return "reduce-scatter"
    base = opcode.removesuffix("-start").removesuffix("-done") if opcode.endswith(("-start", "-done")) else opcode
    return base if base in KINDS else None


@dataclass(frozen=True)
class CollectiveFacts:
    """What parsing reads about one op's collective: its own kind, the kind it wraps (an
    ``async-start`` / ``call-start`` or TPU async collective fusion: the first collective in what
    it calls), its async fusion role, and the device groups / permute pairs it names (its own,
    else those of the first instruction it calls that names any: the all-reduce inside a TPU
    reduce-scatter fusion, the collective an async op runs)."""

    kind: str | None = None
    wraps: str | None = None
    async_role: str | None = None
    groups: Groups | None = None
    pairs: tuple[tuple[int, int], ...] = ()


NONE = CollectiveFacts()


def _root(lines: Sequence[Line]) -> Line | None:
    return next((i for i in lines if i.root), lines[-1] if lines else None)


def _async_role(line: Line, called: Sequence[Sequence[Line]]) -> str | None:
    """``start`` / ``done`` for a fusion whose computation ends in the ``AsyncCollectiveStart`` /
    ``-Done`` custom call, ``continuation`` for a compute fusion with a ``continuation_config``
    (it advances the collective, its state passed through as aliased operands), else None."""
    role = "continuation" if '"continuation_config"' in line.attributes else None
    for body in called:
        root = _root(body)
        m = _ASYNC_TARGET.search(root.attributes) if root is not None and root.opcode == "custom-call" else None
        role = m.group(1).lower() if m else role
    return role


def _names_groups(attributes: str) -> bool:
    return "replica_groups" in attributes or "source_target_pairs" in attributes


def collective_facts(
    line: Line,
    callees: Sequence[str],
    computations: Mapping[str, Sequence[Line]],
    kind_of: Callable[[Line], str | None],
) -> CollectiveFacts:
    """:class:`CollectiveFacts` of one line (``kind_of``: any line's :func:`collective_kind`)."""
    kind = kind_of(line)
    if kind is None and line.opcode not in _WRAPPERS and line.opcode != "fusion":
        return NONE  # most ops: nothing to look up
    called = [computations[c] for c in callees if c in computations]
    role = _async_role(line, called) if line.opcode == "fusion" else None
    wraps = None
    if line.opcode in _WRAPPERS or role is not None:
        wraps = next((k for body in called for i in body if (k := kind_of(i)) is not None), None)
    if kind is None and wraps is None:
        return CollectiveFacts(async_role=role) if role else NONE
    source = line.attributes
    if not _names_groups(source):
        found = next((i for body in called for i in body if _names_groups(i.attributes)), None)
        source = found.attributes if found is not None else source
    groups = device_groups(source)
    return CollectiveFacts(
        kind,
        wraps,
        role,
        None if groups is None else tuple(tuple(g) for g in groups),
        pairs(source),
    )


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


def own_collective(instr: Instruction) -> CollectiveCount:
    """One collective op's contribution: start -> count + operands, done -> result, sync -> all."""
    is_start, is_done = instr.opcode.endswith("-start"), instr.opcode.endswith("-done")
    return CollectiveCount(
        count=0 if is_done else 1,
        operand_bytes=0 if is_done else instr.operand_bytes,
        result_bytes=0 if is_start else instr.bytes,
    )


@dataclass(frozen=True)
class _Tally:
    by_kind: Mapping[str, CollectiveCount]
    unknown_loops: frozenset[str] = frozenset()

    def plus(self, other: _Tally, times: int = 1) -> _Tally:
        kinds = {k: self.by_kind.get(k, CollectiveCount()) + c * times for k, c in other.by_kind.items()}
        return _Tally({**self.by_kind, **kinds}, self.unknown_loops | other.unknown_loops)


def _tally(module: HloModule) -> _Tally:
    @functools.cache
    def visit(computation: str) -> _Tally:
        tally = _Tally({})
        comp = module.computations.get(computation)
        for instr in comp.instructions if comp is not None else ():
            if instr.collective is not None:
                tally = tally.plus(_Tally({instr.collective: own_collective(instr)}))
                continue
            if instr.opcode in ASYNC_CONTINUATIONS or instr.async_role in ("done", "continuation"):
                continue  # an async collective counts once, in its start
            times = 1
            if instr.opcode == "while":
                times = 1 if instr.trip_count is None else instr.trip_count
                if instr.trip_count is None:
                    tally = tally.plus(_Tally({}, frozenset({instr.name})))
            for callee in instr.callees:
                if callee in module.computations:
                    tally = tally.plus(visit(callee), times)
        return tally

    return visit(module.entry) if module.entry else _Tally({})


def collective_stats(module: HloModule) -> CollectiveStats:
    """Collectives of an optimized HLO module, per device, trip-count weighted."""
    tally = _tally(module)
    by_kind = {k: tally.by_kind.get(k, CollectiveCount()) for k in KINDS}
    return CollectiveStats(by_kind, tuple(sorted(tally.unknown_loops)))


def collective_instructions(module: HloModule) -> dict[str, str]:
    """Instruction name -> collective kind, for every collective op in the module.

    Trace events are named after instructions; this tells which ones are collectives
    when the name alone does not (a TPU reduce-scatter fusion may be called `fusion.65`).
    """
    return {instr.name: instr.collective for _, instr in module.instructions() if instr.collective is not None}
