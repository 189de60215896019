"""harness.revision: a revision checked out in a temporary worktree, removed afterwards."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness import revision


def test_checkout_gives_the_revision_s_tree_and_removes_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    for text in ("old", "new"):
        (repo / "f.txt").write_text(text)
        run("add", "f.txt")
        run("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", text)
    with revision.checkout(repo, "HEAD~1") as tree:
        assert (tree / "f.txt").read_text() == "old" and (repo / "f.txt").read_text() == "new"
    assert not tree.exists() and len(revision.git(repo, "worktree", "list").splitlines()) == 1
    with pytest.raises(revision.GitError), revision.checkout(repo, "no-such-rev"):
        pass
