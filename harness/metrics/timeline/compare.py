"""The simulator's per-instruction prices against the compiler's own estimates.

libtpu writes its cost model's estimate of each fusion into the instruction's backend_config
(``"estimated_cycles":"1234"``). :func:`compiler_estimates` reads them from a compiled program's
text; :func:`op_prices` is what the timeline charges each compute instruction for one execution
(:mod:`~harness.metrics.timeline.pricing`); :func:`agreement` compares the two over the
instructions both price: Spearman rank correlation, the median ratio predicted / compiler (in ns
when a clock is given, else ns per cycle) and the instructions whose ratio is furthest from that
median (the ones the two models disagree on most). Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness import agreement as scores
from harness.metrics.hlo.model import HloModule
from harness.metrics.timeline.program import Program, build_program
from harness.metrics.timeline.simulate import NS, Simulator
from harness.metrics.timeline.specs import TimelineSpec

WORST = 10


def compiler_estimates(program: Program) -> dict[str, float]:
    """Instruction name -> the compiler's estimated cycles, for every instruction of a running
    computation whose backend_config carries ``estimated_cycles``."""
    out = {}
    for ops in program.ops.values():
        for op in ops:
            if op.instr.estimated_cycles:
                out[op.name] = float(op.instr.estimated_cycles)
    return out


def op_prices(program: Program, spec: TimelineSpec) -> dict[str, float]:
    """Instruction name -> the simulator's ns for one execution, for every compute instruction."""
    sim = Simulator(program, spec, record=False)
    return {
        op.name: sim.compute_ns(op)
        for ops in program.ops.values()
        for op in ops
        if op.cls in ("compute", "continuation")
    }


@dataclass(frozen=True)
class Agreement:
    """How the simulator's prices and the compiler's estimates agree over ``n`` instructions.
    ``median_ratio``: predicted ns / compiler ns (with a clock) or predicted ns per compiler cycle;
    ``worst``: ``(name, predicted_ns, compiler_cycles, ratio / median_ratio)``, the largest
    disagreements first."""

    n: int
    spearman: float
    median_ratio: float
    unit: str
    worst: tuple[tuple[str, float, float, float], ...]

    def to_dict(self) -> dict[str, Any]:
        worst = [{"op": o, "predicted_ns": p, "compiler_cycles": c, "vs_median": r} for o, p, c, r in self.worst]
        return {**asdict(self), "worst": worst}


def agreement(
    predicted_ns: Mapping[str, float], cycles: Mapping[str, float], clock_hz: float | None = None
) -> Agreement | None:
    """Compare the two over the instructions both price (None with fewer than 2)."""
    names = sorted(n for n in predicted_ns if n in cycles and predicted_ns[n] > 0 and cycles[n] > 0)
    if len(names) < 2:
        return None
    pred = [predicted_ns[n] for n in names]
    comp = [cycles[n] / clock_hz * NS if clock_hz else cycles[n] for n in names]
    ratios = [p / c for p, c in zip(pred, comp, strict=True)]
    median = scores.median(ratios)
    off = sorted(
        ((n, p, cycles[n], r / median) for n, p, r in zip(names, pred, ratios, strict=True)),
        key=lambda w: (-abs(math.log(w[3])), w[0]),
    )
    unit = "predicted ns / compiler ns" if clock_hz else "predicted ns per compiler cycle"
    return Agreement(len(names), scores.spearman(pred, comp), median, unit, tuple(off[:WORST]))


def compare_program(module: HloModule | Program, spec: TimelineSpec, clock_hz: float | None = None) -> Agreement | None:
    """:func:`agreement` of one compiled program on ``spec`` (None: no estimates in it)."""
    program = build_program(module) if isinstance(module, HloModule) else module
    return agreement(op_prices(program, spec), compiler_estimates(program), clock_hz)
