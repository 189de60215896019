"""Headless Chromium for the page tests (the report, the trend page, the docs site): one set of flags.

The flags are the ones this machine class needs (no sandbox as root, no GPU, and no background
networking: the closed network refuses those connections); each call gets its own profile folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium(*args: str, user_dir: Path, window: str = "1400,2000") -> subprocess.CompletedProcess:
    """Run Chromium headless on ``args`` (``--dump-dom URL``, ``--screenshot=PATH URL``, ...)."""
    flags = [*FLAGS, f"--user-data-dir={user_dir}", f"--window-size={window}"]
    return subprocess.run([str(CHROMIUM), *flags, *args], capture_output=True, text=True, timeout=120)
