"""Find the commit that broke a metric: python -m harness bisect GOOD BAD --manifest M [--metric NAME].

Each commit of GOOD..BAD (BAD's first-parent line) is checked out in a temporary git worktree and
measured by its own harness, running only the variant and the stage the metric needs, with only the
metric's family (static or measured). GOOD may be ``baseline``: the commit the manifest's gate
baseline was recorded at, or the commit that committed the baseline file where that one is not on
BAD's line or its records came from a dirty tree (:func:`resolve_good`).

Deterministic metrics (collectives, memory, FLOPs, recompiles): binary search, at most
ceil(log2 N) + 1 runs for N commits; a commit is bad when its value regressed from GOOD's beyond
the manifest's [gate] tolerance for the metric. Timings (``time``): interleaved sampling as
Chromium's Pinpoint does, two-sided Mann-Whitney (pairs of calls) per look at alpha / rounds (Bonferroni) and a
median ratio of at least --min-ratio; "could not decide" when GOOD and BAD are not shown to differ
or a commit stays between them within --max-rounds, or the --budget of runs is spent.

The metric is --variant / --stage / --metric (gate metric names: time,
collectives.all-gather.count, memory.bound_bytes, cost.flops, recompiles, ...) or, for what is not
given, the first failure of a gate's gate.json (--from-gate). It ends with the culprit, the
metric's value on both sides and `harness diff`'s attribution of the change by scope.

Exit status: 0 culprit found, 1 could not decide or no change between GOOD and BAD, 2 bad input."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.bisect.evaluate import MeasureError, Metric
from harness.bisect.search import FOUND, Measure, TimingPlan
from harness.plan.manifest import Manifest
from harness.revision import GitError, Worktrees, git, subject

HELP = "find the first commit of GOOD..BAD where a metric regressed (worktree per commit)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("good", help="a commit where the metric was good, or 'baseline' (the gate baseline's)")
    parser.add_argument("bad", help="a commit where it is bad (e.g. HEAD)")
    parser.add_argument("--manifest", type=Path, required=True, help="experiments/<name>.toml (from this tree)")
    parser.add_argument("--metric", help="gate metric name, e.g. time or collectives.all-gather.count")
    parser.add_argument("--variant", help="variant name (default: the only one, or --from-gate's)")
    parser.add_argument("--stage", help="stage name (default: the only one, or --from-gate's)")
    parser.add_argument("--from-gate", type=Path, metavar="GATE_JSON", help="take what is not given from its failure")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="runs go to <reports>/bisect-<name>/")
    parser.add_argument("--budget", type=int, default=TimingPlan.budget, help="timings: most runs in all")
    parser.add_argument("--max-rounds", type=int, default=TimingPlan.max_rounds, help="timings: rounds per decision")
    parser.add_argument("--alpha", type=float, default=TimingPlan.alpha, help="timings: test level per decision")
    parser.add_argument("--min-ratio", type=float, default=TimingPlan.min_ratio, help="timings: smallest slowdown")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the outcome as JSON")


class BisectInputError(ValueError):
    pass


def _only(names: list[str], what: str) -> str:
    if len(names) != 1:
        raise BisectInputError(f"the manifest has {len(names)} {what}s ({', '.join(names)}): name one with --{what}")
    return names[0]


def pick_metric(
    args: argparse.Namespace, variants: list[str], stages: Sequence[str] | Mapping[str, Sequence[str]]
) -> Metric:
    """The metric to bisect: the arguments, then --from-gate's first failure, then the only choice.
    ``stages``: the stages every variant runs, or each variant's own (a variant may override
    ``workload.stages``)."""
    failure: dict[str, Any] = {}
    if args.from_gate is not None:
        failures = json.loads(args.from_gate.read_text()).get("failures") or []
        if not failures:
            raise BisectInputError(f"{args.from_gate}: the gate recorded no failure to bisect")
        failure = failures[0]
    variant = args.variant or failure.get("variant") or _only(variants, "variant")
    if variant not in variants:
        raise BisectInputError(f"no variant {variant!r} in the manifest (variants: {', '.join(variants)})")
    runs = list(stages.get(variant, ())) if isinstance(stages, Mapping) else list(stages)
    stage = args.stage or failure.get("stage") or _only(runs, "stage")
    metric = args.metric or failure.get("metric")
    if not metric:
        raise BisectInputError("which metric? pass --metric NAME (e.g. time) or --from-gate reports/<id>/gate.json")
    if stage not in runs:
        raise BisectInputError(
            f"variant {variant!r} does not run stage {stage!r} (its workload.stages: {', '.join(runs)})"
        )
    return Metric(variant, stage, metric)


def resolve_good(good: str, bad: str, manifest: Manifest, repo: Path) -> str:
    """GOOD as given; ``baseline``: the commit the manifest's gate baseline was recorded at, when its
    records name one commit, none from a dirty tree, and it is an ancestor of BAD in this clone. Else
    (a baseline recorded on a branch that was rebased before it landed, or from an edited tree) the
    commit that last committed the baseline file: its tree holds the code the baseline was accepted
    with, the reference ``.ci/run`` gives ``harness ab`` too."""
    if good != "baseline":
        return good
    from harness.results import baseline as bl

    path = bl.path_for(manifest)
    records = bl.load(path).records
    commits = sorted({r.commit or "" for r in records})
    recorded = commits[0] if len(commits) == 1 else ""
    if recorded and not any(r.dirty for r in records):
        known = subprocess.run(["git", "merge-base", "--is-ancestor", recorded, bad], cwd=repo, capture_output=True)
        if known.returncode == 0:
            return recorded
        why = f"recorded at {recorded[:12]}, which is not an ancestor of {bad} in this clone"
    elif recorded:
        why = f"recorded from a dirty tree at {recorded[:12]}"
    else:
        why = f"recorded at {len(commits)} commits" if len(commits) > 1 else "naming no commit"
    committed = git(repo, "log", "-1", "--format=%H", "--", str(path.resolve()))
    if not committed:
        raise BisectInputError(f"the baseline {path} ({why}) was never committed: give GOOD as a revision")
    _say(f"GOOD: {committed[:12]}, the commit that last committed {path} (its records were {why})")
    return committed


def _show(result: Any, metric: Metric, repo: Path) -> list[str]:
    from harness.report.console import format_diff

    o = result.outcome
    lines = [f"bisect {metric}: {o.status} after {o.runs} runs (at most {o.budget}); {o.reason}"]
    if o.statistic:
        lines.append(f"  statistic: {o.statistic}")
    if o.status != FOUND:
        if o.range:
            lines.append(
                f"  narrowest range known: good {subject(repo, o.range[0])} .. bad {subject(repo, o.range[1])}"
            )
        return lines
    lines += [
        f"culprit: {subject(repo, o.culprit)}",
        f"  {metric.metric}: {o.before.value:.6g} at {o.parent[:12]} (parent) -> {o.after.value:.6g} at "
        f"{o.culprit[:12]} (culprit)"
        + (f", n = {len(o.before.samples)}/{len(o.after.samples)}" if metric.timing else ""),
    ]
    if result.explain_runs:
        lines.append(f"  attribution from {result.explain_runs} more traced runs (parent and culprit)")
    lines += [format_diff(d) for d in result.diffs] or [f"  {result.note}"]
    return lines


def run(args: argparse.Namespace) -> int:
    from harness.bisect.driver import Request, bisect
    from harness.bisect.evaluate import HarnessMeasure
    from harness.expansion import load_sweep
    from harness.results.compare import tolerance_for

    try:
        sweep = load_sweep(args.manifest)
        manifest = sweep.manifest
        stages = {v.name: list(v.workload.stages) for v in sweep.variants}
        metric = pick_metric(args, [v.name for v in sweep.variants], stages)
        repo = Path(git(Path.cwd(), "rev-parse", "--show-toplevel"))
        plan = TimingPlan(args.alpha, args.min_ratio, args.max_rounds, args.budget)
        tolerance = tolerance_for(manifest.gate, metric.stage, metric.metric)
        request = Request(repo, resolve_good(args.good, args.bad, manifest, repo), args.bad, metric, tolerance, plan)
        reports = args.reports / f"bisect-{manifest.name}"

        def make_measure(trees: Worktrees, trace: bool) -> Measure:
            folder = reports / "explain" if trace else reports
            return HarnessMeasure(trees, manifest.source, manifest.name, metric, folder, trace=trace, log=_say)

        result = bisect(request, make_measure, _say)
    except (BisectInputError, GitError, MeasureError, OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("\n".join(_show(result, metric, repo)))
    if args.json is not None:
        o = result.outcome
        out = {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}  # before and after: their values
        out |= {"before": o.before.value if o.before else None, "after": o.after.value if o.after else None}
        out |= {"metric": vars(metric), "diffs": [d.to_dict() for d in result.diffs]}
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0 if result.outcome.status == FOUND else 1


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
