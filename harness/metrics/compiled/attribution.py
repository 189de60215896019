"""Where a compiled program's work goes, by model scope (:mod:`ltx2.scopes`).

Every HLO instruction's ``metadata.op_name`` is the JAX path it was traced under; the model's
named scopes in that path are its *scope* (``transformer/block/ff/proj_in``). From the parsed
optimized HLO alone (:class:`harness.metrics.hlo.HloModule`, so compile-only programs too), per scope:

* matmul FLOPs (``Instruction.flops`` of every dot, convolution and splash kernel, fused or not,
  attributed to its own scope);
* bytes read and written by ops that run as ops of their own (``Instruction.traffic``);
* collectives by kind (count and operand bytes), each with the sharding rule that caused it where
  that can be derived (:mod:`harness.metrics.compiled.collective_cause`);

every amount multiplied by how often its computation runs per call of the program
(``Computation.runs``: loop trip counts, every branch of a conditional). Time by scope comes from
any per-instruction timeline through one function, :func:`time_by_scope`: the ops of a measured
trace, or the events of a predicted timeline. An instruction with no scope in its path is
*unattributed*; a fusion without one of its own takes the scope most of its fused instructions
have; an op without metadata (XLA made it) takes the scope most of its users have, else its
operands', else its fusion's. Those scopes are *inferred*, and coverage reports their share apart
from the total. Pure Python (JAX-free).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness import families
from harness.metrics.compiled.collective_cause import ShardingFacts, explain
from harness.metrics.hlo.collectives import own_collective
from harness.metrics.hlo.model import HloModule, Instruction
from harness.vocabulary import UNATTRIBUTED

ScopePath = Callable[[str], tuple[str, ...]]


@dataclass(frozen=True)
class Scopes:
    """Instruction name -> scope (``a/b/c``, "" when unattributed) and -> source line, for one
    module; ``inferred``: the instructions whose scope comes from their fusion's ops, their
    neighbours or their fusion, not their own ``op_name``."""

    module: str
    scope: Mapping[str, str]
    source: Mapping[str, str]
    inferred: frozenset[str] = frozenset()

    def of(self, instruction: str) -> str:
        return self.scope.get(instruction, UNATTRIBUTED)


def _from_neighbours(instrs: tuple[Instruction, ...], scope: dict[str, str]) -> None:
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


def instruction_scopes(module: HloModule, scope_path: ScopePath) -> Scopes:
    """Scope and source line of every instruction of an optimized HLO module."""
    own = {i.name: "/".join(scope_path(i.op_name)) for _, i in module.instructions()}
    scope = dict(own)
    caller: dict[str, str] = {}  # fused computation -> the fusion op running it
    for _, instr in module.instructions():
        if instr.opcode != "fusion":
            continue
        for c in instr.callees:
            caller.setdefault(c, instr.name)
        if not own[instr.name]:
            fused = [own[i.name] for c in instr.callees for i in module.computations.get(c, ()) if own[i.name]]
            if fused:
                scope[instr.name] = Counter(fused).most_common(1)[0][0]
    for comp in module.computations.values():
        _from_neighbours(comp.instructions, scope)  # an op XLA made without metadata: its users' or operands' scope
    for name, comp in module.computations.items():
        if (fusion := caller.get(name)) is not None:  # ... or, inside a fusion, the fusion's
            for instr in comp.instructions:
                scope[instr.name] = scope[instr.name] or scope.get(fusion, UNATTRIBUTED)
    source = {i.name: i.source for _, i in module.instructions() if i.source}
    inferred = frozenset(n for n, s in scope.items() if s and not own[n])
    return Scopes(module.name, scope, source, inferred)


# --------------------------------------------------------------------------- static, by scope


@dataclass
class ScopeStatic:
    """Per-device amounts of one scope, per call of the program."""

    flops: float = 0.0
    bytes: float = 0.0
    collectives: dict[str, dict[str, float]] = field(default_factory=dict)  # kind -> {count, bytes}

    def family(self) -> families.ScopeStatic:
        totals = {k: families.CollectiveTotals(count=c["count"], bytes=c["bytes"]) for k, c in self.collectives.items()}
        return families.ScopeStatic(flops=self.flops, bytes=self.bytes, collectives=totals)

    def add_collective(self, kind: str, count: float, operand_bytes: float) -> None:
        entry = self.collectives.setdefault(kind, {"count": 0.0, "bytes": 0.0})
        entry["count"] += count
        entry["bytes"] += operand_bytes


def static_by_scope(
    module: HloModule, scope_path: ScopePath, facts: ShardingFacts | None = None
) -> families.Attribution:
    """FLOPs, bytes and collectives of an optimized HLO module by scope, with coverage: the share
    of each total that has a scope, and of that the share whose scope was inferred (:class:`Scopes`):
    ``coverage`` is ``{"flops", "bytes", "collective_bytes", "inferred": {the same three}}``."""
    names = instruction_scopes(module, scope_path)
    by_scope: dict[str, ScopeStatic] = defaultdict(ScopeStatic)
    inferred = ScopeStatic()  # the amounts attributed by inference, all scopes together
    sites: dict[tuple[str, str, str], list[Any]] = {}
    for comp in module.computations.values():
        times = comp.runs
        if not times:
            continue
        shapes = comp.shapes
        for instr in comp.instructions:
            scope = names.of(instr.name)
            guessed = inferred if instr.name in names.inferred else ScopeStatic()  # the latter: thrown away
            if instr.flops is not None:
                by_scope[scope].flops += instr.flops * times
                guessed.flops += instr.flops * times
            if not comp.running:
                continue
            by_scope[scope].bytes += instr.traffic * times
            guessed.bytes += instr.traffic * times
            kind = instr.collective
            if kind is None or instr.opcode.endswith("-done"):
                continue
            own = own_collective(instr)
            by_scope[scope].add_collective(kind, own.count * times, own.operand_bytes * times)
            guessed.add_collective(kind, own.count * times, own.operand_bytes * times)
            cause = explain(instr, kind, shapes, facts, scope)
            site = sites.setdefault((scope, kind, cause.text), [0.0, 0.0, cause, instr.name])
            site[0] += own.count * times
            site[1] += own.operand_bytes * times
    collective_sites = sorted(
        (
            families.CollectiveSite(
                scope=s, kind=k, count=n, bytes=b, cause=c.text, axes=list(c.axes), logical=c.logical, example=ex
            )
            for (s, k, _), (n, b, c, ex) in sites.items()
        ),
        key=lambda x: (-(x.bytes or 0.0), x.scope),
    )
    return families.Attribution(
        module=names.module,
        by_scope={s: v.family() for s, v in sorted(by_scope.items())},
        collective_sites=tuple(collective_sites),
        coverage=_static_coverage(by_scope, inferred),
    )


def _totals(amounts: ScopeStatic) -> dict[str, float]:
    return {
        "flops": amounts.flops,
        "bytes": amounts.bytes,
        "collective_bytes": sum(c["bytes"] for c in amounts.collectives.values()),
    }


def _static_coverage(by_scope: Mapping[str, ScopeStatic], inferred: ScopeStatic) -> dict[str, Any]:
    """Share of each total that has a scope, and (``inferred``) the share whose scope was inferred."""
    totals = {s: _totals(v) for s, v in by_scope.items()}
    out: dict[str, Any] = {}
    guessed: dict[str, float | None] = {}
    for key in ("flops", "bytes", "collective_bytes"):
        total = sum(t[key] for t in totals.values())
        unattributed = totals.get(UNATTRIBUTED, {}).get(key, 0.0)
        out[key] = None if total <= 0 else 1.0 - unattributed / total
        guessed[key] = None if total <= 0 else _totals(inferred)[key] / total
    out["inferred"] = guessed
    return out


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
