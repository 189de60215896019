"""The search loop on the ``tiny`` transformer with a stand-in evaluator whose scores are known, so
the answer is known: it is found, the budget holds, a layout that does not fit never wins, the
finalists are confirmed at full depth, and a re-run takes the same path."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.plan.search_space import SearchSpace
from harness.search.space import Candidate
from harness.search.strategy import Score, search
from tests.harness.search.test_space import HW, MESH, tiny_facts

SPACE = SearchSpace(
    rules=(
        ("heads", (("tensor",), ())),
        ("mlp", (("tensor",), ())),
        ("activation_batch", (("data",), ())),
        ("activation_length", (("context",), ())),
    ),
    meshes=(MESH,),
    attention=("xla", "splash"),
    base="replicated",
    proxy_layers=1,
    confirm=2,
)
BEST = {"heads": ("tensor",), "mlp": (), "activation_batch": ("data",), "activation_length": ("context",)}


class Known:
    """Step = 10 ms + 1 ms per rule that differs from BEST, + 0.5 ms for splash; ``no_fit`` does not fit."""

    def __init__(self, no_fit: Candidate | None = None) -> None:
        self.calls: list[tuple[tuple[str, ...], bool]] = []
        self.no_fit = no_fit

    def step(self, c: Candidate) -> float:
        return 0.010 + 0.001 * sum(dict(c.rules)[k] != v for k, v in BEST.items()) + 0.0005 * (c.attention == "splash")

    def __call__(self, cands: Sequence[Candidate], full: bool) -> Mapping[Candidate, Score]:
        self.calls.append((tuple(c.name for c in cands), full))
        return {
            c: Score("does-not-fit", self.step(c), 2 if full else 1, fits=False)
            if c == self.no_fit
            else Score("ok", self.step(c), 2 if full else 1, fits=True)
            for c in cands
        }


def test_the_known_best_is_found_and_confirmed_within_the_budget() -> None:
    known = Known()
    result = search(SPACE, tiny_facts(), 8, HW, known, budget=12)
    best, score = result.ranked()[0]
    assert dict(best.rules) == BEST and best.attention == "xla" and score.step_s == 0.010
    assert best in result.confirmed and score.depth == 2
    assert result.evaluations <= 12 and sum(len(names) for names, _ in known.calls) == result.evaluations
    assert [full for _, full in known.calls][-1] is True and len(result.confirmed) == 2
    assert result.declared == 32


def test_the_budget_caps_every_evaluation_confirmations_included() -> None:
    for budget in (1, 2, 3, 5):
        known = Known()
        result = search(SPACE, tiny_facts(), 8, HW, known, budget=budget)
        assert result.evaluations <= budget and sum(len(n) for n, _ in known.calls) <= budget


def test_a_layout_that_does_not_fit_never_wins() -> None:
    best = Candidate(MESH, "xla", tuple(BEST.items()))
    result = search(SPACE, tiny_facts(), 8, HW, Known(no_fit=best), budget=12)
    assert best in result.proxy and not result.proxy[best].usable
    winner, score = result.ranked()[0]
    assert winner != best and score.usable and score.step_s == 0.0105  # the same rules with splash: next best


def test_a_rerun_takes_the_same_path() -> None:
    first, second = Known(), Known()
    a = search(SPACE, tiny_facts(), 8, HW, first, budget=9)
    b = search(SPACE, tiny_facts(), 8, HW, second, budget=9)
    assert first.calls == second.calls and [c.name for c, _ in a.ranked()] == [c.name for c, _ in b.ranked()]


def test_without_a_proxy_nothing_is_confirmed_and_every_compile_is_full_depth() -> None:
    space = SearchSpace(rules=SPACE.rules, meshes=SPACE.meshes, attention=("xla",), base="replicated")
    known = Known()
    result = search(space, tiny_facts(), 8, HW, known, budget=6)
    assert not result.confirmed and all(full for _, full in known.calls)


def test_a_move_onto_a_twin_layout_compiles_the_kept_candidate() -> None:
    """With xla attention ``activation_heads`` lays nothing out: from splash with it replicated, the move
    to xla is the kept xla candidate (activation_heads over tensor, declared first), compiled once."""
    space = SearchSpace(
        rules=(("activation_heads", (("tensor",), ())), ("heads", (("tensor",), ()))),
        meshes=(MESH,),
        attention=("splash", "xla"),
        base="replicated",
    )

    class SplashFirst(Known):
        def step(self, c: Candidate) -> float:
            return {"splash": 0.010, "xla": 0.020}[c.attention] + 0.001 * (dict(c.rules)["activation_heads"] != ())

    known = SplashFirst()
    result = search(space, tiny_facts(), 8, HW, known, budget=10)
    names = [n for batch, _ in known.calls for n in batch]
    assert len(names) == len(set(names))
    assert "data2xcontext2xtensor2/xla/activation_heads=tensor,heads=tensor" in names
    assert "data2xcontext2xtensor2/xla/activation_heads=-,heads=tensor" not in names  # its twin
    assert result.ranked()[0][0].name == "data2xcontext2xtensor2/splash/activation_heads=-,heads=tensor"


def test_the_search_starts_from_a_seed() -> None:
    """A seed (a hand-written layout) is compiled with the best analytic candidate, and the local search
    moves on from the better of the two."""
    seed = Candidate(
        MESH, "splash", (("heads", ()), ("mlp", ("tensor",)), ("activation_batch", ()), ("activation_length", ()))
    )
    known = Known()
    search(SPACE, tiny_facts(), 8, HW, known, budget=12, seeds=[seed])
    assert seed.name in known.calls[0][0] and len(known.calls[0][0]) == 2


def test_a_strategy_the_space_expresses_is_a_candidate() -> None:
    from harness.search.space import as_candidate
    from ltx2 import with_overrides

    facts = tiny_facts()
    strategy = with_overrides("replicated", {"heads": ["tensor"], "activation_batch": ["data"]})
    c = as_candidate(facts, SPACE, strategy, MESH, "xla")
    assert c is not None and dict(c.rules) == {
        "heads": ("tensor",),
        "mlp": (),
        "activation_batch": ("data",),
        "activation_length": (),
    }
    assert as_candidate(facts, SPACE, with_overrides("replicated", {"embed": ["tensor"]}), MESH, "xla") is None
    assert as_candidate(facts, SPACE, strategy, (("tensor", 8),), "xla") is None  # a mesh it does not search
    assert as_candidate(facts, SPACE, with_overrides("replicated", {"mlp": ["data"]}), MESH, "xla") is None
