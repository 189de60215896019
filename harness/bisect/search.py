"""Finding the first bad commit of a history, given a way to measure one commit.

``commits`` run oldest to newest: ``commits[0]`` is GOOD (known good), ``commits[-1]`` BAD. A
measurement (:class:`Measurement`) is one run of the harness at one commit: the metric's value and,
for timings, its raw samples. Two searches:

* :func:`bisect_static` for deterministic metrics (collectives, memory, FLOPs, recompiles): GOOD is
  measured once, then a commit is bad when its value regressed against GOOD's beyond the metric's
  tolerance. A binary search over the N commits of GOOD..BAD, with "no commit is bad" as one more
  outcome, needs at most ``1 + ceil(log2 N)`` runs and measures BAD itself whenever BAD is the
  culprit, so a history where BAD did not change is reported, never guessed at.
* :func:`bisect_timing` for timings, as Chromium's Pinpoint does: samples of a commit are taken in
  rounds interleaved with runs of GOOD and BAD (so a busy spell of the machine lands on both sides),
  and a comparison is decided by :func:`harness.results.stats.timing_shift` (a two-sided
  Mann-Whitney test on pairs of consecutive calls at ``alpha / max_rounds`` per look, Bonferroni
  over the looks, and a median ratio of at least ``min_ratio``). GOOD and BAD must first be shown
  to differ; a commit then counts as bad when it is significantly slower than GOOD and its median
  is nearer BAD's (on a log scale), good when it is significantly faster than BAD and nearer
  GOOD's. A comparison that stays undecided after ``max_rounds`` rounds, or a search that spends
  its run budget, ends as "could not decide", with the narrowest range known.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.results import stats

FOUND, UNDECIDED, NO_CHANGE = "found", "could not decide", "no change"


@dataclass(frozen=True)
class Measurement:
    """One run at one commit: the metric's value (the median for timings) and its raw samples."""

    commit: str
    value: float
    samples: tuple[float, ...] = ()
    record: Any = field(default=None, compare=False)  # the harness record it came from, when there is one


Measure = Callable[[str], Measurement]


class Budget:
    """Counts runs and refuses one beyond ``limit``; every run is logged."""

    def __init__(self, measure: Measure, limit: int, log: Callable[[str], None] = lambda _: None):
        self.measure, self.limit, self.log, self.runs = measure, limit, log, 0

    @property
    def left(self) -> int:
        return self.limit - self.runs

    def __call__(self, commit: str) -> Measurement:
        if self.runs >= self.limit:
            raise BudgetSpent(f"run budget of {self.limit} runs spent")
        self.runs += 1
        m = self.measure(commit)
        self.log(f"run {self.runs}/{self.limit}: {commit[:12]} -> {m.value:.6g}")
        return m


class BudgetSpent(RuntimeError):
    pass


@dataclass(frozen=True)
class Outcome:
    """How a search ended: the culprit and its parent's and its own measurements when found."""

    status: str  # FOUND, UNDECIDED or NO_CHANGE
    reason: str
    runs: int
    budget: int
    culprit: str | None = None
    parent: str | None = None
    before: Measurement | None = None  # the parent's (GOOD side)
    after: Measurement | None = None  # the culprit's (BAD side)
    range: tuple[str, str] | None = None  # the narrowest (good, bad) pair known when undecided
    statistic: str = ""


# --------------------------------------------------------------------------- deterministic


def static_runs(n: int) -> int:
    """Most runs :func:`bisect_static` makes for ``n`` commits (GOOD and BAD included)."""
    return 1 + math.ceil(math.log2(max(n, 1)))


def bisect_static(
    commits: Sequence[str],
    measure: Measure,
    regressed: Callable[[float, float], bool],
    log: Callable[[str], None] = lambda _: None,
) -> Outcome:
    """First commit whose value ``regressed(good_value, value)`` against GOOD's (see the module doc)."""
    if len(commits) < 2:
        raise ValueError(f"need GOOD and BAD (2 commits or more), got {len(commits)}")
    run = Budget(measure, static_runs(len(commits)), log)
    seen = {0: run(commits[0])}
    good = seen[0].value
    lo, hi = 0, len(commits)  # commits[lo] good; commits[hi] bad, hi == len: "none of them"
    while hi - lo > 1:
        mid = (lo + hi) // 2
        seen[mid] = run(commits[mid])
        if regressed(good, seen[mid].value):
            hi = mid
        else:
            lo = mid
    statistic = "value against GOOD's within the metric's tolerance"
    if hi == len(commits):
        return Outcome(
            NO_CHANGE,
            f"BAD ({commits[-1][:12]}) measures {seen[lo].value:.6g}, no regression from GOOD's {good:.6g}: "
            "nothing to bisect",
            run.runs,
            run.limit,
            statistic=statistic,
        )
    return Outcome(
        FOUND,
        f"first commit whose value regressed from GOOD's {good:.6g}",
        run.runs,
        run.limit,
        culprit=commits[hi],
        parent=commits[lo],
        before=seen[lo],
        after=seen[hi],
        statistic=statistic,
    )


# --------------------------------------------------------------------------- timings


@dataclass(frozen=True)
class TimingPlan:
    """How hard a timing search looks before it says it could not decide."""

    alpha: float = 0.01  # per comparison, split over its looks (Bonferroni)
    min_ratio: float = 1.05  # the smallest slowdown that counts
    max_rounds: int = 6  # rounds per comparison
    budget: int = 60  # runs in all

    @property
    def alpha_per_look(self) -> float:
        return self.alpha / self.max_rounds

    def describe(self) -> str:
        return (
            f"two-sided Mann-Whitney on interleaved samples (pairs of calls), p < {self.alpha:g}/{self.max_rounds} "
            "per look "
            f"(Bonferroni over {self.max_rounds} rounds) and a median ratio >= {self.min_ratio:g}; "
            f"budget {self.budget} runs"
        )


class _Pool:
    """Every sample measured per commit in this search (GOOD's and BAD's are re-measured throughout)."""

    def __init__(self, run: Budget):
        self.run = run
        self.samples: dict[str, list[float]] = {}
        self.last: dict[str, Measurement] = {}

    def take(self, commit: str) -> None:
        m = self.run(commit)
        self.samples.setdefault(commit, []).extend(m.samples or (m.value,))
        self.last[commit] = m

    def shift(self, a: str, b: str, plan: TimingPlan) -> str:
        return stats.timing_shift(self.samples[a], self.samples[b], plan.alpha_per_look, plan.min_ratio)

    def measurement(self, commit: str) -> Measurement:
        xs = tuple(self.samples[commit])
        return Measurement(commit, stats.median(xs), xs, self.last[commit].record)


def _establish(pool: _Pool, good: str, bad: str, plan: TimingPlan) -> bool:
    """GOOD and BAD in alternating order until BAD is shown slower (True) or the rounds run out."""
    for i in range(plan.max_rounds):
        for c in (good, bad) if i % 2 == 0 else (bad, good):
            pool.take(c)
        if pool.shift(good, bad, plan) == stats.SLOWER:
            return True
    return False


def _classify(pool: _Pool, c: str, good: str, bad: str, plan: TimingPlan) -> bool | None:
    """True: ``c`` is bad, False: good, None: undecided after ``plan.max_rounds`` rounds."""
    for i in range(plan.max_rounds):
        ref = good if i % 2 == 0 else bad
        for x in (ref, c) if i % 4 < 2 else (c, ref):
            pool.take(x)
        g, b, m = (stats.median(pool.samples[x]) for x in (good, bad, c))
        nearer_bad = abs(math.log(m / b)) < abs(math.log(m / g))
        if nearer_bad and pool.shift(good, c, plan) == stats.SLOWER:
            return True
        if not nearer_bad and pool.shift(c, bad, plan) == stats.SLOWER:
            return False
    return None


def bisect_timing(
    commits: Sequence[str], measure: Measure, plan: TimingPlan, log: Callable[[str], None] = lambda _: None
) -> Outcome:
    """First commit whose timing moved from GOOD's to BAD's (see the module doc)."""
    if len(commits) < 2:
        raise ValueError(f"need GOOD and BAD (2 commits or more), got {len(commits)}")
    run = Budget(measure, plan.budget, log)
    pool = _Pool(run)
    good, bad = commits[0], commits[-1]
    lo, hi = 0, len(commits) - 1

    def undecided(reason: str, lo: int, hi: int) -> Outcome:
        return Outcome(
            UNDECIDED, reason, run.runs, run.limit, range=(commits[lo], commits[hi]), statistic=plan.describe()
        )

    try:
        if not _establish(pool, good, bad, plan):
            g, b = pool.measurement(good), pool.measurement(bad)
            return undecided(
                f"GOOD and BAD not distinguishable after {plan.max_rounds} rounds (medians {g.value:.6g} vs "
                f"{b.value:.6g} s, p = {stats.mann_whitney_p(g.samples, b.samples):.2g})",
                lo,
                hi,
            )
        while hi - lo > 1:
            mid = (lo + hi) // 2
            verdict = _classify(pool, commits[mid], good, bad, plan)
            log(f"{commits[mid][:12]}: {'bad' if verdict else 'good' if verdict is False else 'undecided'}")
            if verdict is None:
                return undecided(
                    f"{commits[mid][:12]} is neither like GOOD nor like BAD after {plan.max_rounds} rounds",
                    lo,
                    hi,
                )
            lo, hi = (lo, mid) if verdict else (mid, hi)
    except BudgetSpent as e:
        return undecided(f"{e} before a decision", lo, hi)
    return Outcome(
        FOUND,
        "first commit significantly slower than GOOD and nearer BAD",
        run.runs,
        run.limit,
        culprit=commits[hi],
        parent=commits[lo],
        before=pool.measurement(commits[lo]),
        after=pool.measurement(commits[hi]),
        statistic=plan.describe(),
    )
