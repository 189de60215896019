"""A bisection from end to end: the history, worktrees, the search that fits the metric, and the
scope attribution of the change the culprit made (:func:`harness.results.diff.diff_records`).

How one commit is measured is pluggable (``make_measure(trees, trace) -> Measure``): the command
runs the harness in each worktree (:class:`harness.bisect.evaluate.HarnessMeasure`); tests read a
file of each commit's tree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.bisect.evaluate import Metric
from harness.bisect.search import FOUND, Measure, Outcome, TimingPlan, bisect_static, bisect_timing, static_runs
from harness.results import stats
from harness.results.diff import StageDiff, diff_records
from harness.revision import Worktrees, history

MakeMeasure = Callable[[Worktrees, bool], Measure]


@dataclass(frozen=True)
class Request:
    repo: Path
    good: str
    bad: str
    metric: Metric
    tolerance: float = 0.0  # deterministic metrics: relative, against GOOD's value
    plan: TimingPlan = field(default_factory=TimingPlan)


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    commits: tuple[str, ...]
    diffs: tuple[StageDiff, ...] = ()
    explain_runs: int = 0  # traced runs of parent and culprit for the attribution (timings)
    note: str = ""


def planned_runs(request: Request, n: int) -> int:
    """The most runs the search may make over ``n`` commits."""
    return request.plan.budget if request.metric.timing else static_runs(n)


def _attribution(
    request: Request, outcome: Outcome, trees: Worktrees, make_measure: MakeMeasure
) -> tuple[tuple[StageDiff, ...], int, str]:
    before, after = outcome.before, outcome.after
    runs = 0
    if request.metric.timing and outcome.parent and outcome.culprit:
        # the search ran untraced; the scope attribution of time needs per-step trace samples
        explain = make_measure(trees, True)
        before, after, runs = explain(outcome.parent), explain(outcome.culprit), 2
    if before is None or after is None or before.record is None or after.record is None:
        return (), runs, "no harness records on both sides: no scope attribution"
    diffs = tuple(d for d in diff_records(before.record, after.record) if d.stage == request.metric.stage)
    return diffs, runs, ""


def bisect(request: Request, make_measure: MakeMeasure, log: Callable[[str], None] = lambda _: None) -> Result:
    """Find the first commit of GOOD..BAD where ``request.metric`` regressed."""
    commits = history(request.repo, request.good, request.bad)
    kind = "timing" if request.metric.timing else "deterministic"
    most = planned_runs(request, len(commits))
    log(f"{len(commits)} commits GOOD..BAD; {request.metric} ({kind}): at most {most} runs")
    with Worktrees(request.repo) as trees:
        measure = make_measure(trees, False)
        if request.metric.timing:
            outcome = bisect_timing(commits, measure, request.plan, log)
        else:

            def regressed(good: float, value: float) -> bool:
                return stats.compare_values(good, value, request.tolerance).verdict == stats.REGRESSED

            outcome = bisect_static(commits, measure, regressed, log)
        if outcome.status != FOUND:
            return Result(outcome, tuple(commits))
        diffs, runs, note = _attribution(request, outcome, trees, make_measure)
    return Result(outcome, tuple(commits), diffs, runs, note)
