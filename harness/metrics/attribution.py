"""Where a compiled program's work goes, by model scope (:mod:`ltx2.scopes`).

Every HLO instruction's ``metadata.op_name`` is the JAX path it was traced under; the model's
named scopes in that path are its *scope* (``transformer/block/ff/proj_in``). From the optimized
HLO text alone (so compile-only programs too), per scope:

* matmul FLOPs (:func:`harness.metrics.hlo_cost.instruction_flops` of every dot, convolution and splash
  kernel, fused or not, attributed to its own scope);
* bytes read and written by top-level ops (:func:`harness.metrics.hlo_cost.instruction_traffic`);
* collectives by kind (count and operand bytes), each with the sharding rule that caused it where
  that can be derived (:mod:`harness.metrics.collective_cause`);

every amount multiplied by how often its computation runs per call of the program (loop trip
counts, as :mod:`harness.metrics.hlo` does). Time by scope comes from any per-instruction timeline
through one function, :func:`time_by_scope`: the ops of a measured trace, or the events of a
predicted timeline. An instruction with no scope in its path is *unattributed*; a fusion without
one of its own takes the scope most of its fused instructions have; an op without metadata (XLA
made it) takes the scope most of its users have, else its operands', else its fusion's. Pure
Python (JAX-free).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.metrics import hlo, hlo_cost
from harness.metrics.collective_cause import ShardingFacts, explain
from harness.metrics.hlo_parse import Instruction, Module, parse_module, source_lines
from harness.vocabulary import UNATTRIBUTED

ScopePath = Callable[[str], tuple[str, ...]]


@dataclass(frozen=True)
class Scopes:
    """Instruction name -> scope (``a/b/c``, "" when unattributed) and -> source line, for one module."""

    module: str
    scope: Mapping[str, str]
    source: Mapping[str, str]

    def of(self, instruction: str) -> str:
        return self.scope.get(instruction, UNATTRIBUTED)


def _from_neighbours(instrs: list[Instruction], scope: dict[str, str]) -> None:
    """Give an unattributed op the scope most of its users have (walking back from the end, so a
    chain of such ops inherits from the first op that has one), else most of its operands'."""
    users: dict[str, list[str]] = defaultdict(list)
    for instr in instrs:
        for operand in instr.operands:
            users[operand].append(instr.name)
    skip = ("parameter", "constant", "tuple", "get-tuple-element")
    for order, near in ((reversed(instrs), lambda i: users.get(i.name, ())), (instrs, lambda i: i.operands)):
        for instr in order:
            if scope[instr.name] or instr.opcode in skip:
                continue
            found = [scope[n] for n in near(instr) if scope.get(n)]
            if found:
                scope[instr.name] = Counter(found).most_common(1)[0][0]


def _module_name(hlo_text: str) -> str:
    first = hlo_text.split("\n", 1)[0].split()
    return first[1].rstrip(",") if len(first) > 1 and first[0] == "HloModule" else ""


def instruction_scopes(hlo_text: str, scope_path: ScopePath, module: Module | None = None) -> Scopes:
    """Scope and source line of every instruction of an optimized HLO module."""
    module = module or parse_module(hlo_text)
    frames = source_lines(hlo_text)
    own = {i.name: "/".join(scope_path(i.op_name)) for instrs in module.computations.values() for i in instrs}
    scope = dict(own)
    caller: dict[str, str] = {}  # fused computation -> the fusion op running it
    for instrs in module.computations.values():
        for instr in instrs:
            if instr.opcode != "fusion":
                continue
            for c in hlo.callees(instr):
                caller.setdefault(c, instr.name)
            if not own[instr.name]:
                fused = [own[i.name] for c in hlo.callees(instr) for i in module.computations.get(c, []) if own[i.name]]
                if fused:
                    scope[instr.name] = Counter(fused).most_common(1)[0][0]
    for instrs in module.computations.values():
        _from_neighbours(instrs, scope)  # an op XLA made without metadata: its users' or operands' scope
    for comp, instrs in module.computations.items():
        if (fusion := caller.get(comp)) is not None:  # ... or, inside a fusion, the fusion's
            for instr in instrs:
                scope[instr.name] = scope[instr.name] or scope.get(fusion, UNATTRIBUTED)
    source = {
        i.name: frames[f]
        for instrs in module.computations.values()
        for i in instrs
        if (f := i.stack_frame) is not None and f in frames
    }
    return Scopes(_module_name(hlo_text), scope, source)


# --------------------------------------------------------------------------- how often code runs


def executions(module: Module) -> dict[str, int]:
    """Computation -> times it runs per call of ENTRY (loop bodies times their trip count, once
    where unknown; every branch of a conditional once; fused computations as often as their op)."""
    calls: dict[str, list[tuple[str, int]]] = defaultdict(list)  # callee -> (caller computation, times)
    for name, instrs in module.computations.items():
        for instr in instrs:
            times = (hlo.while_trip_count(instr, module) or 1) if instr.opcode == "while" else 1
            for callee in hlo.callees(instr):
                calls[callee].append((name, times))

    @functools.cache
    def count(name: str) -> int:
        if name == module.entry:
            return 1
        return sum(count(caller) * times for caller, times in calls.get(name, ()) if caller != name)

    return {name: count(name) for name in module.computations}


def _running(module: Module) -> set[str]:
    """Computations whose ops run as ops of their own: ENTRY and what control flow runs (loop
    bodies and conditions, called computations, branches), not fused computations or reducers."""
    out = {module.entry} if module.entry else set()
    for instrs in module.computations.values():
        for instr in instrs:
            if instr.opcode in hlo_cost.CONTROL_FLOW:
                out.update(hlo.callees(instr))
    return out


# --------------------------------------------------------------------------- static, by scope


@dataclass
class ScopeStatic:
    """Per-device amounts of one scope, per call of the program."""

    flops: float = 0.0
    bytes: float = 0.0
    collectives: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> {count, bytes}

    def to_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "bytes": self.bytes, "collectives": self.collectives}


@dataclass(frozen=True)
class CollectiveSite:
    """Collectives of one kind at one scope with one cause, per device and call of the program."""

    scope: str
    kind: str
    count: float
    bytes: float
    cause: str
    axes: tuple[str, ...]
    logical: str | None
    example: str  # one instruction name

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "kind": self.kind,
            "count": self.count,
            "bytes": self.bytes,
            "cause": self.cause,
            "axes": list(self.axes),
            "logical": self.logical,
            "example": self.example,
        }


def static_by_scope(hlo_text: str, scope_path: ScopePath, facts: ShardingFacts | None = None) -> dict[str, Any]:
    """FLOPs, bytes and collectives of an optimized HLO module by scope, with coverage: the share
    of each total that has a scope. JSON-able: ``{"by_scope": {scope: {...}}, "collective_sites":
    [...], "coverage": {"flops", "bytes", "collective_bytes"}, "module"}``."""
    module = parse_module(hlo_text)
    names = instruction_scopes(hlo_text, scope_path, module)
    runs, running = executions(module), _running(module)
    by_scope: dict[str, ScopeStatic] = defaultdict(ScopeStatic)
    sites: dict[tuple[str, str, str], list[Any]] = {}
    for comp, instrs in module.computations.items():
        times = runs.get(comp, 0)
        if not times:
            continue
        shapes = {i.name: i.shape for i in instrs}
        for instr in instrs:
            scope = names.of(instr.name)
            if (flops := hlo_cost.instruction_flops(instr, shapes)) is not None:
                by_scope[scope].flops += flops * times
            if comp not in running:
                continue
            by_scope[scope].bytes += hlo_cost.instruction_traffic(instr, shapes, module) * times
            kind = hlo.collective_kind(instr)
            if kind is None or instr.opcode.endswith("-done"):
                continue
            own = hlo.own_collective(instr, shapes)
            entry = by_scope[scope].collectives.setdefault(kind, {"count": 0.0, "bytes": 0.0})
            entry["count"] += own.count * times
            entry["bytes"] += own.operand_bytes * times
            cause = explain(_grouped(instr, module), kind, shapes, facts, scope)
            site = sites.setdefault((scope, kind, cause.text), [0.0, 0.0, cause, instr.name])
            site[0] += own.count * times
            site[1] += own.operand_bytes * times
    collective_sites = sorted(
        (CollectiveSite(s, k, n, b, c.text, c.axes, c.logical, ex) for (s, k, _), (n, b, c, ex) in sites.items()),
        key=lambda x: (-x.bytes, x.scope),
    )
    return {
        "module": names.module,
        "by_scope": {s: v.to_dict() for s, v in sorted(by_scope.items())},
        "collective_sites": [s.to_dict() for s in collective_sites],
        "coverage": _static_coverage(by_scope),
    }


def _grouped(instr: Instruction, module: Module) -> Instruction:
    """A TPU reduce-scatter fusion names its device groups on the all-reduce it calls: the fusion
    with that op's attributes appended (so its cause can be derived), else the op itself."""
    if instr.opcode != "fusion" or "replica_groups" in instr.attributes:
        return instr
    for callee in hlo.callees(instr):
        for inner in module.computations.get(callee, ()):
            if "replica_groups" in inner.attributes:
                return dataclasses.replace(instr, attributes=f"{instr.attributes}, {inner.attributes}")
    return instr


def _static_coverage(by_scope: Mapping[str, ScopeStatic]) -> dict[str, float | None]:
    def share(values: Mapping[str, float]) -> float | None:
        total = sum(values.values())
        return None if total <= 0 else 1.0 - values.get(UNATTRIBUTED, 0.0) / total

    coll = {s: sum(c["bytes"] for c in v.collectives.values()) for s, v in by_scope.items()}
    return {
        "flops": share({s: v.flops for s, v in by_scope.items()}),
        "bytes": share({s: v.bytes for s, v in by_scope.items()}),
        "collective_bytes": share(coll),
    }


# --------------------------------------------------------------------------- time, by scope


def time_by_scope(spans: Iterable[tuple[str, float]], scopes: Scopes | Mapping[str, str]) -> dict[str, float]:
    """Total time per scope of ``(instruction name, seconds or ns)`` spans: the ops of a measured
    trace (their self time) or the events of a predicted timeline. Instructions the table does
    not know count as unattributed."""
    of = scopes.of if isinstance(scopes, Scopes) else (lambda name: scopes.get(name, UNATTRIBUTED))
    out: dict[str, float] = defaultdict(float)
    for name, duration in spans:
        out[of(name)] += duration
    return dict(out)


def coverage(amounts: Mapping[str, float]) -> float | None:
    """Share of a by-scope total that has a scope (None when the total is 0)."""
    total = sum(amounts.values())
    return None if total <= 0 else 1.0 - amounts.get(UNATTRIBUTED, 0.0) / total


def rollup(amounts: Mapping[str, float], depth: int) -> dict[str, float]:
    """Amounts by scope summed to the first ``depth`` components (``a/b/c`` -> ``a/b`` at depth 2)."""
    out: dict[str, float] = defaultdict(float)
    for scope, value in amounts.items():
        out["/".join(scope.split("/")[:depth])] += value
    return dict(out)


def instruction_table(instrs: Iterable[Instruction], scope_path: ScopePath) -> dict[str, str]:
    """Instruction name -> scope for instructions parsed elsewhere (e.g. a simulator's program)."""
    return {i.name: "/".join(scope_path(i.op_name)) for i in instrs}
