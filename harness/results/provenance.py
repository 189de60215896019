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


def git_info(repo: str | Path) -> dict[str, Any]:
    """Commit and dirty flag of the checkout the harness runs from (nulls outside git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "commit": commit.strip() if commit else None,
        "dirty": None if status is None else bool(status.strip()),
    }
