"""harness bisect on a temporary git repository of 16 commits with one injected regression.

Each commit holds ``metric.json``: the stage's all-gather count (2, then 3 from the culprit on) and
its slowdown factor (1.0, then 1.2). The measure reads that file from the commit's worktree, so
the worktrees, the history and both searches run for real; timings are seeded lognormal samples
(3 % noise, 5 per run, as the manifest's repeats would give)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import tomllib
from pathlib import Path

import numpy as np
import pytest

from harness.bisect.driver import Request, bisect
from harness.bisect.evaluate import Metric, cut_manifest, measurement, to_toml
from harness.bisect.search import FOUND, NO_CHANGE, UNDECIDED, Measurement, TimingPlan, static_runs
from harness.commands import bisect as command
from harness.results import stats
from harness.revision import GitError, history

N = 16
REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "harness" / "fixtures"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}
STATIC = Metric("trillium", "denoise_step", "collectives.all-gather.count")
TIMING = Metric("trillium", "denoise_step", "time")
PLAN = TimingPlan(alpha=0.01, min_ratio=1.05, max_rounds=6, budget=60)


def make_repo(path: Path, culprit: int | None) -> list[str]:
    """N commits; from index ``culprit`` on, one more all-gather and a 20 % slower stage."""
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=ENV)
    commits = []
    for i in range(N):
        bad = culprit is not None and i >= culprit
        (path / "metric.json").write_text(json.dumps({"all_gather": 3 if bad else 2, "slowdown": 1.2 if bad else 1.0}))
        (path / "code.txt").write_text(f"revision {i}\n")
        subprocess.run(["git", "add", "."], cwd=path, check=True, env=ENV)
        subprocess.run(["git", "commit", "-q", "-m", f"change {i}"], cwd=path, check=True, env=ENV)
        commits.append(
            subprocess.run(["git", "rev-parse", "HEAD"], cwd=path, capture_output=True, text=True).stdout.strip()
        )
    return commits


def file_measure(metric: Metric, seed: int = 0):
    """``make_measure`` reading each commit's metric.json from its worktree."""
    calls = []

    def make(trees, trace):
        def measure(commit: str) -> Measurement:
            data = json.loads((trees.get(commit) / "metric.json").read_text())
            calls.append(commit)
            if not metric.timing:
                return Measurement(commit, float(data["all_gather"]))
            rng = np.random.default_rng([seed, len(calls)])
            xs = tuple(0.1 * data["slowdown"] * rng.lognormal(0.0, 0.03, 5))
            return Measurement(commit, stats.median(xs), xs)

        return measure

    return make, calls


def run_bisect(tmp_path: Path, culprit: int | None, metric: Metric, seed: int = 0):
    commits = make_repo(tmp_path / "repo", culprit)
    make, calls = file_measure(metric, seed)
    result = bisect(Request(tmp_path / "repo", commits[0], commits[-1], metric, 0.0, PLAN), make)
    return commits, result, calls


@pytest.mark.parametrize("culprit", [1, 8, 15])
def test_static_regression_found_in_at_most_five_runs(tmp_path, culprit):
    commits, result, calls = run_bisect(tmp_path, culprit, STATIC)
    o = result.outcome
    assert (o.status, o.culprit, o.parent) == (FOUND, commits[culprit], commits[culprit - 1])
    assert (o.before.value, o.after.value) == (2.0, 3.0)
    assert o.runs == len(calls) <= math.ceil(math.log2(N)) + 1 == static_runs(N) == 5
    listed = subprocess.run(["git", "worktree", "list"], cwd=tmp_path / "repo", capture_output=True, text=True)
    assert len(listed.stdout.splitlines()) == 1  # every temporary worktree removed


def test_static_without_change_says_so(tmp_path):
    _, result, calls = run_bisect(tmp_path, None, STATIC)
    assert result.outcome.status == NO_CHANGE and result.outcome.culprit is None
    assert "nothing to bisect" in result.outcome.reason and len(calls) == 5


@pytest.mark.parametrize(("culprit", "seed"), [(11, 0), (3, 1)])
def test_timing_slowdown_found_within_budget(tmp_path, culprit, seed):
    commits, result, calls = run_bisect(tmp_path, culprit, TIMING, seed)
    o = result.outcome
    assert (o.status, o.culprit, o.parent) == (FOUND, commits[culprit], commits[culprit - 1])
    assert len(calls) - result.explain_runs == o.runs <= PLAN.budget and result.explain_runs == 2
    assert o.after.value / o.before.value == pytest.approx(1.2, rel=0.05)
    assert "Mann-Whitney" in o.statistic and "Bonferroni" in o.statistic


def test_timing_aa_history_could_not_decide(tmp_path):
    commits, result, calls = run_bisect(tmp_path, None, TIMING)
    o = result.outcome
    assert o.status == UNDECIDED and o.culprit is None
    assert o.status == "could not decide" and "not distinguishable" in o.reason
    assert o.range == (commits[0], commits[-1]) and len(calls) == 2 * PLAN.max_rounds


def test_timing_budget_spent_is_undecided_with_the_range(tmp_path):
    commits = make_repo(tmp_path / "repo", 9)
    make, calls = file_measure(TIMING)
    plan = TimingPlan(budget=8)
    result = bisect(Request(tmp_path / "repo", commits[0], commits[-1], TIMING, 0.0, plan), make)
    o = result.outcome
    assert o.status == UNDECIDED and "budget of 8 runs spent" in o.reason and len(calls) == 8
    lo, hi = commits.index(o.range[0]), commits.index(o.range[1])
    assert lo < 9 <= hi


def test_history_is_checked(tmp_path):
    commits = make_repo(tmp_path / "repo", None)
    assert history(tmp_path / "repo", commits[3], commits[7]) == commits[3:8]
    with pytest.raises(GitError, match="not an ancestor"):
        history(tmp_path / "repo", commits[7], commits[3])
    with pytest.raises(GitError, match="rev-parse"):
        history(tmp_path / "repo", "no-such-rev", commits[3])


def test_timing_shift():
    base = [1.0, 1.01, 0.98, 0.99, 1.02, 1.03, 0.97, 0.99, 1.04, 1.05]  # 5 pairs (no tied means): p 0.0079
    slow = [1.2 * x for x in base]
    assert stats.timing_shift(base, slow, 0.01, 1.05) == stats.SLOWER
    assert stats.timing_shift(slow, base, 0.01, 1.05) == stats.FASTER
    assert stats.timing_shift(base, [1.02 * x for x in base], 0.01, 1.05) == stats.UNDECIDED  # below min_ratio
    assert stats.timing_shift(base[:8], slow[:8], 0.01, 1.05) == stats.UNDECIDED  # 4 pairs cannot reach 0.01


def test_cut_manifest_round_trips_through_toml():
    source = (REPO_ROOT / "experiments" / "nightly.toml").read_text()
    raw = tomllib.loads(source)
    assert tomllib.loads(to_toml(raw)) == raw
    cut = tomllib.loads(cut_manifest(source, STATIC))
    assert cut["workload"]["stages"] == ["denoise_step"] and cut["run"]["metrics"] == ["static"]
    timed = tomllib.loads(cut_manifest(source, TIMING, trace=True))
    assert timed["run"]["metrics"] == ["static", "measured"] and timed["run"]["trace"] is True
    assert {k: v for k, v in cut.items() if k not in ("workload", "run")} == {
        k: v for k, v in raw.items() if k not in ("workload", "run")
    }


def test_measurement_reads_the_gate_metric_from_records():
    path = FIXTURES / "sweep_cpu8.jsonl"
    m = measurement(path, Metric("trillium-loop", "denoise_step", "collectives.all-gather.count"), "abc")
    assert m.value > 0 and m.record.variant.name == "trillium-loop"
    t = measurement(path, Metric("replicated", "denoise_step", "time"), "abc")
    assert t.samples and t.value == stats.median(t.samples)
    zero = measurement(path, Metric("replicated", "denoise_step", "collectives.all-gather.count"), "abc")
    assert zero.value == 0.0  # a kind absent from a stage with static collectives counted zero times


def test_pick_metric_from_a_gate_json(tmp_path):
    gate_json = tmp_path / "gate.json"
    gate_json.write_text(json.dumps({"failures": [{"variant": "b", "stage": "s", "metric": "time"}]}))
    parser = __import__("argparse").ArgumentParser()
    command.add_arguments(parser)
    args = parser.parse_args(["G", "B", "--manifest", "m.toml", "--from-gate", str(gate_json)])
    assert command.pick_metric(args, ["a", "b"], ["s", "t"]) == Metric("b", "s", "time")
    args = parser.parse_args(["G", "B", "--manifest", "m.toml", "--metric", "cost.flops"])
    with pytest.raises(command.BisectInputError, match="name one with --variant"):
        command.pick_metric(args, ["a", "b"], ["s"])
    args = parser.parse_args(["G", "B", "--manifest", "m.toml", "--metric", "cost.flops", "--stage", "x"])
    with pytest.raises(command.BisectInputError, match="does not run stage 'x'"):
        command.pick_metric(args, ["a"], ["s"])
    # a variant that overrides workload.stages (nightly.toml's vae-decode-context): its own stages
    args = parser.parse_args(["G", "B", "--manifest", "m.toml", "--metric", "recompiles", "--variant", "vae"])
    per_variant = {"vae": ["video_decode"], "a": ["denoise_step"]}
    assert command.pick_metric(args, ["a", "vae"], per_variant) == Metric("vae", "video_decode", "recompiles")
    args = parser.parse_args(
        ["G", "B", "--manifest", "m.toml", "--metric", "x", "--variant", "a", "--stage", "video_decode"]
    )
    with pytest.raises(command.BisectInputError, match="its workload.stages: denoise_step"):
        command.pick_metric(args, ["a", "vae"], per_variant)


AA_MANIFEST = """\
schema_version = 1
[target]
devices = 1
[model]
preset = "test:ok"
[workload]
stages = ["denoise_step"]
[run]
repeats = 6
warmup = 0
timeout_s = 120
[[variants]]
name = "only"
overrides = { "test.run_s" = 0.02 }
"""


@pytest.mark.slow
def test_the_command_bisects_a_real_harness_history(tmp_path, capsys):
    """A copy of this harness as a 5-commit history whose 4th commit makes the test stage 3x slower:
    the command runs each commit's own harness in its worktree and names that commit."""
    import shutil

    repo = tmp_path / "repo"
    repo.mkdir()
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("harness", "ltx2"):
        shutil.copytree(REPO_ROOT / name, repo / name, ignore=ignore)
    (repo / "m.toml").write_text(AA_MANIFEST)
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=ENV)
    testing = repo / "harness" / "testing.py"
    source = testing.read_text()
    commits = []
    for i in range(5):
        if i == 3:
            testing.write_text(
                source.replace('overrides.get("test.run_s", 0.001)))', 'overrides.get("test.run_s", 0.001)) * 3)')
            )
        (repo / "n.txt").write_text(str(i))
        subprocess.run(["git", "add", "."], cwd=repo, check=True, env=ENV)
        subprocess.run(["git", "commit", "-q", "-m", f"c{i}"], cwd=repo, check=True, env=ENV)
        commits.append(
            subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
        )
    assert testing.read_text() != source
    out = tmp_path / "bisect.json"
    cwd = os.getcwd()
    os.chdir(repo)
    try:
        code = command.run(
            __import__("argparse").Namespace(
                good=commits[0],
                bad=commits[-1],
                manifest=repo / "m.toml",
                metric="time",
                variant=None,
                stage=None,
                from_gate=None,
                reports=tmp_path / "reports",
                budget=30,
                max_rounds=4,
                alpha=0.01,
                min_ratio=1.5,
                json=out,
            )
        )
    finally:
        os.chdir(cwd)
    got = json.loads(out.read_text())
    assert code == 0 and got["status"] == FOUND and got["culprit"] == commits[3]
    assert got["after"] / got["before"] == pytest.approx(3.0, rel=0.3)
    assert "culprit: " in capsys.readouterr().out


def test_good_baseline_is_its_commit_or_the_commit_that_committed_it(tmp_path, monkeypatch, capsys):
    """GOOD ``baseline``: the baseline records' commit when clean and on BAD's line; recorded from a
    dirty tree or at a commit this clone lacks (a branch rebased before it landed, as both committed
    baselines were), the commit that committed the baseline file, which CI's clone holds."""
    from harness.plan.manifest import load_manifest
    from tests.harness.fixtures import synthetic

    repo = tmp_path / "repo"
    monkeypatch.chdir(tmp_path)
    manifest_path = tmp_path / "m.toml"
    manifest_path.write_text(AA_MANIFEST.replace("[[variants]]", '[gate]\nbaseline = "repo/b.jsonl"\n[[variants]]'))
    manifest = load_manifest(manifest_path)
    commits = make_repo(repo, None)

    def commit_baseline(recorded: str, dirty: bool) -> str:
        raw = synthetic.minimal("only", git={"commit": recorded, "dirty": dirty})
        (repo / "b.jsonl").write_text(json.dumps(raw) + "\n")
        subprocess.run(["git", "add", "b.jsonl"], cwd=repo, check=True, env=ENV)
        subprocess.run(["git", "commit", "-q", "-m", "baseline"], cwd=repo, check=True, env=ENV)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    committed = commit_baseline(commits[5], dirty=False)
    assert command.resolve_good("baseline", "HEAD", manifest, repo) == commits[5]
    assert command.resolve_good(commits[2], "HEAD", manifest, repo) == commits[2]
    committed = commit_baseline(commits[5], dirty=True)
    assert command.resolve_good("baseline", "HEAD", manifest, repo) == committed
    assert f"recorded from a dirty tree at {commits[5][:12]}" in capsys.readouterr().err
    committed = commit_baseline("f" * 40, dirty=False)
    assert command.resolve_good("baseline", "HEAD", manifest, repo) == committed
    assert "not an ancestor of HEAD in this clone" in capsys.readouterr().err
    (repo / "never.jsonl").write_text(json.dumps(synthetic.minimal("only")) + "\n")  # names no commit
    manifest_path.write_text(manifest_path.read_text().replace("repo/b.jsonl", "repo/never.jsonl"))
    with pytest.raises(command.BisectInputError, match=r"\(naming no commit\) was never committed"):
        command.resolve_good("baseline", "HEAD", load_manifest(manifest_path), repo)
