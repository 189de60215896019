"""Control flow of a module's text: what each op calls, how many times a ``while`` runs, which
computations run as ops of their own and how often each runs per call of ENTRY.

A ``while``'s trip count is read from the ``known_trip_count`` backend config (CPU, GPU) or,
failing that, from a ``compare(i, constant)`` in the loop condition (TPU; the induction variable
is assumed to start at 0 and step by 1). Pure Python.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence

from harness.metrics.hlo.text import Line

_CALLEES = re.compile(
    r"\b(?:calls|to_apply|body|condition|branch_computations|called_computations"
    r"|true_computation|false_computation)=(\{[^}]*\}|%?[\w.\-]+)"
)
_CONDITION = re.compile(r"\bcondition=%?([\w.\-]+)")
_BODY = re.compile(r"\bbody=%?([\w.\-]+)")
_KNOWN_TRIP_COUNT = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_DIRECTION = re.compile(r"\bdirection=([A-Z]+)")
_INT_LITERAL = re.compile(r"^\s*(-?\d+)\s*$")
CONTROL_FLOW = ("while", "call", "conditional")  # ops whose work is that of the computations they run
# Substrings every attribute _CALLEES matches contains: most ops name no computation, and testing
# these is cheaper than running the regex over their metadata.
_CALLEE_KEYS = ("calls=", "to_apply=", "body=", "condition=", "computation")


def callees(line: Line) -> tuple[str, ...]:
    """Names of the computations an op names: fusion bodies, reducers, branches (both forms of a
    conditional), and for a ``while`` its condition then its body."""
    if line.opcode == "while":
        found = (_CONDITION.search(line.attributes), _BODY.search(line.attributes))
        return tuple(m.group(1) for m in found if m)
    names: list[str] = []
    if not any(key in line.attributes for key in _CALLEE_KEYS):
        return ()
    for group in _CALLEES.findall(line.attributes):
        names += [n.strip().lstrip("%") for n in group.strip("{}").split(",") if n.strip()]
    return tuple(names)


def _int_constant(name: str, scope: Sequence[Line]) -> int | None:
    for instr in scope:
        if instr.name == name and instr.opcode == "constant":
            m = _INT_LITERAL.match(instr.literal)
            return int(m.group(1)) if m else None
    return None


def _fused_constant(name: str, fusion: Line, fused: Sequence[Line], outer: Sequence[Line]) -> int | None:
    """Integer constant behind `name` inside a fused computation; parameters map to fusion operands."""
    for instr in fused:
        if instr.name == name and instr.opcode == "parameter":
            index = int(instr.literal)
            return _int_constant(fusion.operands[index], outer) if index < len(fusion.operands) else None
    return _int_constant(name, fused)


def _direction(instr: Line) -> str:
    m = _DIRECTION.search(instr.attributes)
    return m.group(1) if m else ""


def _comparisons(
    cond: Sequence[Line], computations: Mapping[str, Sequence[Line]]
) -> Iterator[tuple[str, int | None, int | None]]:
    """(direction, lhs constant, rhs constant) for compares in a loop condition, seeing into fusions."""
    for instr in cond:
        if instr.opcode == "compare":
            lhs, rhs = (_int_constant(n, cond) for n in instr.operands[:2])
            yield _direction(instr), lhs, rhs
        for callee in callees(instr) if instr.opcode == "fusion" else ():
            fused = computations.get(callee, [])
            for inner in (i for i in fused if i.opcode == "compare"):
                lhs, rhs = (_fused_constant(n, instr, fused, cond) for n in inner.operands[:2])
                yield _direction(inner), lhs, rhs


def trip_count(line: Line, computations: Mapping[str, Sequence[Line]]) -> int | None:
    """Trip count of a ``while``: ``known_trip_count``, else ``i < N``, ``i <= N``, ``N > i`` or
    ``N >= i`` in its condition (i from 0, step 1); None when neither gives one."""
    m = _KNOWN_TRIP_COUNT.search(line.attributes)
    if m:
        return int(m.group(1))
    cond = _CONDITION.search(line.attributes)
    for direction, lhs, rhs in _comparisons(computations.get(cond.group(1), []) if cond else [], computations):
        if lhs is None and rhs is not None and direction in ("LT", "LE"):
            return rhs + (direction == "LE")
        if rhs is None and lhs is not None and direction in ("GT", "GE"):
            return lhs + (direction == "GE")
    return None


def running(
    entry: str | None, computations: Mapping[str, Sequence[Line]], callees_of: Mapping[int, tuple[str, ...]]
) -> set[str]:
    """ENTRY and the computations control flow runs (loop bodies and conditions, called
    computations, branches), not fused computations or reducers. ``callees_of``: ``id(line)`` ->
    :func:`callees`."""
    out = {entry} if entry else set()
    for lines in computations.values():
        for line in lines:
            if line.opcode in CONTROL_FLOW:
                out.update(callees_of[id(line)])
    return out


def executions(
    entry: str | None,
    computations: Mapping[str, Sequence[Line]],
    callees_of: Mapping[int, tuple[str, ...]],
    trips: Mapping[int, int | None],
) -> dict[str, int]:
    """Computation -> times it runs per call of ENTRY (loop bodies times their trip count, once
    where unknown; every branch of a conditional once; fused computations as often as their op).
    ``trips``: ``id(line)`` -> trip count of each ``while``."""
    calls: dict[str, list[tuple[str, int]]] = defaultdict(list)  # callee -> (caller computation, times)
    for name, lines in computations.items():
        for line in lines:
            times = (trips.get(id(line)) or 1) if line.opcode == "while" else 1
            for callee in callees_of[id(line)]:
                calls[callee].append((name, times))

    @functools.cache
    def count(name: str) -> int:
        if name == entry:
            return 1
        return sum(count(caller) * times for caller, times in calls.get(name, ()) if caller != name)

    return {name: count(name) for name in computations}
