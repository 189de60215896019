"""Where a record comes from: the time, the host, the library versions, the git commit."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import platform
import socket
import subprocess
from pathlib import Path
from typing import Any

LIBRARIES = ("jax", "jaxlib", "flax", "torch", "numpy")


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """The host; device fields are filled in by the worker that saw the devices."""
    return {
        "hostname": socket.gethostname(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "backend": None,
        "device_kind": None,
        "device_count": None,
    }


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """Installed version of each distribution (None where it is not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


# Tracked paths a run never reads: the documentation, the tests, dated results, the gate's committed
# baselines and the CI's own files. A change confined to them leaves the measured code the commit's.
NOT_RUN = ("docs/", "tests/", "benchmarks/results/", "reports/", ".github/", ".ci/")


def runs_from(path: str) -> bool:
    """Whether a tracked file at ``path`` (relative to the checkout) can change what a run does: anything
    but markdown and the folders of :data:`NOT_RUN`."""
    return not (path.endswith(".md") or path.startswith(NOT_RUN))


def changed_paths(porcelain_z: str) -> list[str]:
    """The paths of ``git status --porcelain=v1 -z`` output (both sides of a rename or copy)."""
    tokens, paths = porcelain_z.split("\0"), []
    while tokens:
        entry = tokens.pop(0)
        if len(entry) > 3:
            paths.append(entry[3:])
            if "R" in entry[:2] or "C" in entry[:2]:
                paths.append(tokens.pop(0))
    return paths


def git_info(repo: str | Path) -> dict[str, Any]:
    """Commit and dirty flag of the checkout the harness runs from (nulls outside git).

    Dirty means the code a run executes is not its commit's: a tracked file that :func:`runs_from`
    changed, staged or not. Untracked files never count (nothing committed imports them), nor do
    changes confined to documentation, tests, results or baselines: re-baselining beside an edited
    doc still records a clean commit, which ``harness ab`` and ``harness bisect baseline`` need."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain=v1", "-z", "--untracked-files=no")
    return {
        "commit": commit.strip() if commit else None,
        "dirty": None if status is None else any(runs_from(p) for p in changed_paths(status)),
    }
