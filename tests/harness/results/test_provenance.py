"""Where a record comes from: host, library versions, git commit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.results import provenance


def test_provenance_fields() -> None:
    machine = provenance.machine_info()
    assert {"hostname", "cpu", "cpu_count", "os", "python", "backend", "device_kind", "device_count"} == set(machine)
    versions = provenance.library_versions()
    assert set(versions) == {"jax", "jaxlib", "flax", "torch", "numpy"} and versions["jax"]
    git = provenance.git_info(Path(__file__).parent)
    assert set(git) == {"commit", "dirty"}
    assert provenance.git_info("/")["commit"] is None


def test_dirty_means_a_tracked_change_a_run_can_read(tmp_path: Path) -> None:
    """Untracked files and edits confined to docs, tests, results or baselines leave a record clean
    (its code is its commit's); an edit to the code, staged or not, or a renamed module makes it dirty."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True, env={**os.environ, **env})

    files = ("ltx2/a.py", "harness/b.py", "docs/c.md", "tests/d.py", "reports/baselines/e.jsonl", "README.md")
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "c")

    def dirty() -> bool | None:
        return provenance.git_info(tmp_path)["dirty"]

    (tmp_path / "scratch.txt").write_text("untracked\n")
    (tmp_path / "ltx2" / "new.py").write_text("untracked\n")
    assert dirty() is False
    for name in files[2:]:
        (tmp_path / name).write_text("edited\n")
    assert dirty() is False
    (tmp_path / "harness" / "b.py").write_text("edited\n")
    assert dirty() is True
    git("add", "harness/b.py")  # staged only
    assert dirty() is True
    git("checkout", "HEAD", "--", "harness/b.py")
    assert dirty() is False
    git("mv", "ltx2/a.py", "docs/a.py")  # a module moved out of the code
    assert dirty() is True
