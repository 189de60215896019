"""The search itself: prune, rank analytically, then a budgeted local search over compiled scores.

1. Every point of the space is normalised and pruned (:mod:`harness.search.space`), the same layout
   kept once; candidates whose weights alone exceed the device's memory
   (:mod:`harness.search.analytic`) are pruned too.
2. The survivors are ordered by the analytic estimate. The best one is compiled first (at the proxy
   depth when the space has one), with the seeds (the manifest's hand-written layouts the space can
   express): the search starts from the best of them; while none of the compiled ones fits, the
   next ones are.
3. Local search: the neighbours of the current best (one rule, the mesh or the kernel changed),
   best analytic estimate first, are compiled ``round_size`` at a time; the best compiled one
   becomes current when it beats it. It stops when the current one has no uncompiled neighbour
   left, or when the budget is spent.
4. The ``confirm`` best proxy results are compiled at full depth (these count against the budget).

``--budget N`` counts evaluations, compiled now or read from the store; a re-run with the same
budget takes the same path (everything deterministic) and finds every evaluation stored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from harness.plan.search_space import SearchSpace
from harness.search.analytic import Estimate, Hardware, estimate
from harness.search.facts import ModelFacts
from harness.search.space import (
    SAME,
    WEIGHTS,
    Candidate,
    Pruned,
    enumerate_space,
    layout_key,
    neighbours,
    prune_reason,
)
from harness.vocabulary import StageStatus

ROUND_SIZE = 4


@dataclass(frozen=True)
class Score:
    """A compiled candidate: predicted step at full depth (a proxy's scaled per block), fit, collectives."""

    status: StageStatus
    step_s: float | None = None
    depth: int = 0  # transformer blocks compiled
    fits: bool | None = None
    memory_bytes: float | None = None  # per device, at full depth (a proxy's scaled)
    exposed_all_gather: float | None = None
    exposed_collective_s: float | None = None
    wasted: float | None = None
    variant_id: str = ""
    error: str | None = None
    interval_s: tuple[float, float] | None = None  # the step's interval from the spec's uncertainty
    points_s: tuple[tuple[str, float], ...] = ()  # the step at each bound evaluated (timeline.uncertainty)
    spec: str = ""

    @property
    def usable(self) -> bool:
        return self.status == StageStatus.OK and self.fits is not False and self.step_s is not None


Evaluate = Callable[[Sequence[Candidate], bool], Mapping[Candidate, Score]]
"""``(candidates, full_depth) -> score per candidate``."""


@dataclass
class SearchResult:
    proxy: dict[Candidate, Score] = field(default_factory=dict)  # in evaluation order
    confirmed: dict[Candidate, Score] = field(default_factory=dict)
    estimates: dict[Candidate, Estimate] = field(default_factory=dict)
    layouts: dict[tuple[object, ...], Candidate] = field(default_factory=dict)  # layout -> its candidate
    pruned: dict[str, list[tuple[Candidate, Pruned]]] = field(default_factory=dict)  # kind -> candidates
    declared: int = 0
    full_layers: int = 0  # the model's depth: a score at another depth is a proxy's, scaled

    def ranked(self) -> list[tuple[Candidate, Score]]:
        """Confirmed candidates by full-depth step, then the other usable proxies, then the rest."""

        def key(item: tuple[Candidate, Score]) -> tuple[int, float]:
            c, s = item
            return (0 if c in self.confirmed else 1 if s.usable else 2, s.step_s if s.step_s is not None else 0.0)

        rest = [(c, s) for c, s in self.proxy.items() if c not in self.confirmed]
        return sorted([*self.confirmed.items(), *rest], key=key)

    @property
    def evaluations(self) -> int:
        return len(self.proxy) + len(self.confirmed)


def candidates(
    space: SearchSpace, facts: ModelFacts, devices: int, hw: Hardware, result: SearchResult
) -> list[Candidate]:
    """The pruned space ordered by the analytic estimate (prunings and estimates noted in ``result``)."""
    kept = []
    layouts = result.layouts
    for c in enumerate_space(space):
        result.declared += 1
        reason = prune_reason(facts, c, devices)
        if reason is None and (twin := layouts.setdefault(layout_key(facts, c), c)) != c:
            reason = Pruned(SAME, f"lays out every array of the step as {twin.name}")
        if reason is None:
            est = estimate(facts, c, hw)
            if hw.hbm_bytes is not None and est.weight_bytes > hw.hbm_bytes:
                reason = Pruned(
                    WEIGHTS,
                    f"{est.weight_bytes / 2**30:.1f} GiB of weights per device, the device "
                    f"has {hw.hbm_bytes / 2**30:.1f} GiB",
                )
            else:
                result.estimates[c] = est
                kept.append(c)
                continue
        result.pruned.setdefault(reason.kind, []).append((c, reason))
    order = {c: i for i, c in enumerate(kept)}
    return sorted(kept, key=lambda c: _rank_key(result.estimates[c], order[c]))


def _rank_key(est: Estimate, order: int) -> tuple[float, float, int]:
    """Analytic step, then less weight memory per device, then declaration order."""
    return (est.step_s, est.weight_bytes, order)


def _twin(result: SearchResult, facts: ModelFacts, c: Candidate) -> Candidate:
    """The kept candidate that lays the step out as ``c`` does (``c`` itself when none, or when pruned)."""
    try:
        return result.layouts.get(layout_key(facts, c), c)
    except ValueError:  # a strategy the rules cannot make: pruned, never compiled
        return c


def _best(scores: Mapping[Candidate, Score]) -> Candidate | None:
    usable = [(s.step_s, i, c) for i, (c, s) in enumerate(scores.items()) if s.usable]
    return min(usable)[2] if usable else None


def search(
    space: SearchSpace,
    facts: ModelFacts,
    devices: int,
    hw: Hardware,
    evaluate: Evaluate,
    budget: int,
    round_size: int = ROUND_SIZE,
    seeds: Sequence[Candidate] = (),
) -> SearchResult:
    """Run the search (module docstring) within ``budget`` evaluations; ``seeds`` (hand-written layouts
    the space expresses) are compiled first, with the best analytic candidate."""
    result = SearchResult(full_layers=facts.num_layers)
    ranked = candidates(space, facts, devices, hw, result)
    kept = set(ranked)
    seeds = [t for t in dict.fromkeys(_twin(result, facts, s) for s in seeds) if t in kept]
    ranked = [*seeds, *(c for c in ranked if c not in seeds)]
    proxied = space.proxy_layers is not None and space.proxy_layers < facts.num_layers
    confirm = min(space.confirm, budget // 2) if proxied else 0
    left = budget - confirm

    def run(batch: Sequence[Candidate]) -> None:
        nonlocal left
        batch = list(batch)[:left]
        left -= len(batch)
        if batch:
            result.proxy.update(evaluate(batch, not proxied))

    queue = iter(ranked)
    while left > 0 and _best(result.proxy) is None:  # a first candidate that compiles and fits
        first = len(seeds) + 1 if not result.proxy else round_size
        batch = [c for _, c in zip(range(first), queue, strict=False)]
        if not batch:
            break
        run(batch)
    current = _best(result.proxy)
    valid = set(ranked)
    while current is not None and left > 0:
        twins = (_twin(result, facts, n) for n in neighbours(current, space))
        todo = list(dict.fromkeys(c for c in twins if c in valid and c not in result.proxy))
        if not todo:
            break
        order = {c: i for i, c in enumerate(todo)}
        run(sorted(todo, key=lambda c: _rank_key(result.estimates[c], order[c]))[:round_size])
        current = _best(result.proxy)
    if confirm:
        finalists = sorted((s.step_s, i, c) for i, (c, s) in enumerate(result.proxy.items()) if s.usable)
        chosen = [c for _, _, c in finalists[:confirm]]
        if chosen:
            result.confirmed.update(evaluate(chosen, True))
    return result
