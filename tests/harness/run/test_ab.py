"""harness.run.ab: two workers built from two commits' trees, called in pairs, judged by the sign test.

The trees are commits of a throwaway repository whose ``ltx2`` stage sleeps (``time.sleep``): the
worker, its protocol, the coin and the verdict are the real ones; only the stage is a stand-in, so
a pair's two calls differ by the sleep and the machine's wake-up latency alone.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import revision
from harness.results.sign_test import sign_test
from harness.run import ab

MODEL = "def build_config(preset, overrides):\n    return dict(overrides)\n"
LTX2 = """import time
from dataclasses import dataclass

import numpy as np
from jax.sharding import Mesh

DELAY_S = {delay}


@dataclass
class Workload:
    height: int = 0


def build_mesh(shape, devices):
    return Mesh(np.array(devices).reshape(tuple(shape.values())), tuple(shape))


class Stage:
    def make_args(self, seed):
        return ()

    def run(self):
        time.sleep(DELAY_S)


def build_stage(name, cfg, workload, mesh):
    return Stage()
"""
SPEC = {"preset": "p", "config_overrides": {}, "workload": {"height": 1}, "mesh": {"data": 1}, "stage": "s", "seed": 0}


def _repo(root: Path) -> Path:
    """Commits: 'fast' (a 10 ms stage), 'slow' (40 ms), 'no-model' (no ltx2 package)."""
    repo = root / "repo"
    (repo / "harness").mkdir(parents=True)
    (repo / "ltx2").mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (repo / "harness" / "__init__.py").write_text("")
    (repo / "harness" / "model.py").write_text(MODEL)
    (repo / "ltx2" / "stages").mkdir()
    (repo / "ltx2" / "stages" / "__init__.py").write_text("")
    for name, delay in (("fast", 0.01), ("slow", 0.04)):
        (repo / "ltx2" / "__init__.py").write_text(LTX2.format(delay=delay))
        run("add", "-A")
        run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", name)
        run("tag", name)
    run("rm", "-q", "-r", "ltx2")
    run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "no-model")
    run("tag", "no-model")
    return repo


def _pairs(base: Path, head: Path, pairs: int, per_side: int) -> list[ab.Pair]:
    bases, heads, setup_s = ab.start_both(base, head, {**SPEC, "warmup": 1}, devices=1, per_side=per_side, seed=7)
    try:
        workers = [*bases, *heads]
        assert setup_s > 0 and all(w.setup_s is not None for w in workers) and len(workers) == 2 * per_side
        assert len({w.pad for w in workers}) == 2 * per_side  # each its own environment size
        return ab.measure_pairs(bases, heads, pairs, seed=7, calls=3)
    finally:
        for worker in workers:
            worker.close()


def test_a_slower_commit_is_caught_and_the_same_commit_is_not(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    with revision.Worktrees(repo) as trees:
        fast, slow = (trees.get(revision.resolve(repo, t)) for t in ("fast", "slow"))
        slower = _pairs(fast, slow, 20, per_side=2)
        same = _pairs(fast, fast, 20, per_side=1)
    assert len(slower) == 20 and all(len(p.base_calls) == 3 == len(p.head_calls) for p in slower)
    assert {p.head_first for p in slower} == {True, False}  # the coin chose both orders
    assert all(p.base_s == min(p.base_calls) and p.head_s >= 0.04 for p in slower)
    # 4x slower in every pair but for a wake-up latency of ~30 ms on all three of base's calls
    test = sign_test([p.ratio for p in slower], min_effect=0.03, alpha=0.001)
    assert test.regressed and test.critical == 18 and test.median_ratio > 2
    # A/A: the same tree on both sides, the order by coin: flagged with probability at most
    # P(Binomial(20, 1/2) >= 18) = 0.0002 (the sign test's exact false-alarm rate)
    aa = sign_test([p.ratio for p in same], min_effect=0.03, alpha=0.001)
    assert not aa.regressed and aa.false_alarm == pytest.approx(0.000201, rel=0.01)


def test_a_tree_without_the_stage_api_is_named(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    with revision.Worktrees(repo) as trees:
        old, fast = (trees.get(revision.resolve(repo, t)) for t in ("no-model", "fast"))
        with pytest.raises(
            ab.AbError,
            match=r"base .* could not build or run the stage: ImportError: this tree has no ltx2/__init__.py",
        ):
            ab.start_both(old, fast, {**SPEC, "warmup": 0}, devices=1)
