"""Revisions: the one helper that checks out a commit of this repository and runs the harness at it.

:class:`Worktrees` gives a temporary, detached git worktree per commit (all removed afterwards),
:func:`checkout` one of them, :func:`sweep_at` a manifest's variant run with a tree's own harness and
model; :func:`history` the commits between GOOD and BAD, :func:`resolve` a revision's hash. Used by
``harness bisect`` (a tree per commit measured), ``harness gate --against REV`` and ``harness diff
--against REV`` (the base re-measured from REV's tree), ``harness ab`` and ``benchmarks/reprediction.py
--old REV`` (the older prediction code). A leaf: git and the harness through ``subprocess``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType


class GitError(ValueError):
    """A revision git does not know, or GOOD not an ancestor of BAD."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout.strip()


def resolve(repo: Path, rev: str) -> str:
    """The full commit hash of ``rev``."""
    return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")


def history(repo: Path, good: str, bad: str) -> list[str]:
    """GOOD, then every commit after it on BAD's first-parent line up to BAD, oldest first."""
    g, b = resolve(repo, good), resolve(repo, bad)
    if g == b:
        raise GitError(f"GOOD and BAD are the same commit ({g[:12]})")
    if subprocess.run(["git", "merge-base", "--is-ancestor", g, b], cwd=repo).returncode != 0:
        raise GitError(f"GOOD {good} ({g[:12]}) is not an ancestor of BAD {bad} ({b[:12]})")
    between = git(repo, "rev-list", "--first-parent", "--reverse", "--ancestry-path", f"{g}..{b}").split()
    return [g, *between]


def subject(repo: Path, commit: str, width: int = 90) -> str:
    """``<short hash> <subject>``, cut to ``width`` characters."""
    line = git(repo, "log", "-1", "--format=%h %s", commit)
    return line if len(line) <= width else line[: width - 3] + "..."


class Worktrees:
    """Detached worktrees of ``repo``, one per commit asked for, under one temporary folder; all
    removed (and pruned from the repository) on exit."""

    def __init__(self, repo: Path):
        self.repo = repo
        self.trees: dict[str, Path] = {}
        self.root: Path | None = None

    def __enter__(self) -> Worktrees:
        self.root = Path(tempfile.mkdtemp(prefix="harness-bisect-"))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for tree in self.trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=self.repo, capture_output=True)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=self.repo, capture_output=True)
        self.trees.clear()

    def get(self, commit: str) -> Path:
        """The checked-out tree of ``commit`` (made on first use)."""
        if commit not in self.trees:
            if self.root is None:
                raise RuntimeError("Worktrees used outside its with-block")
            tree = self.root / commit[:12]
            git(self.repo, "worktree", "add", "--detach", str(tree), commit)
            self.trees[commit] = tree
        return self.trees[commit]


@contextlib.contextmanager
def checkout(repo: Path, rev: str) -> Iterator[Path]:
    """A temporary, detached worktree of ``rev`` (removed afterwards); :class:`GitError` if git
    cannot check it out."""
    with Worktrees(repo) as trees:
        yield trees.get(resolve(repo, rev))


def sweep_at(
    tree: Path, manifest: Path, reports: Path, sweep_id: str, variant: str, *flags: str, capture: bool = False
) -> subprocess.CompletedProcess[str]:
    """``python -m harness sweep`` of one ``variant`` (re-run where it has a record) with the harness and
    model code of ``tree`` (cwd, first on ``PYTHONPATH``); ``flags``: more of the sweep's flags."""
    path = os.pathsep.join(p for p in (str(tree), os.environ.get("PYTHONPATH")) if p)
    command = [sys.executable, "-m", "harness", "sweep", str(manifest), "--reports", str(reports)]
    command += ["--sweep-id", sweep_id, "--rerun", "--variant", variant, *flags]
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(command, cwd=tree, env=env, capture_output=capture, text=True, check=False)
