"""One sweep at a time per sweep folder: an exclusive ``flock`` on ``<sweep dir>/sweep.lock``.

Two sweeps on one sweep id would both resume from the same results file and append duplicate
records. The lock is held for the whole sweep and released by the kernel when its holder exits,
however it exits (SIGKILL included), so a crashed sweep never leaves a stale lock. The file holds
who holds it (pid, host, start time, command) so the refused sweep can say; it stays in place
(removing it would race with the next holder). ``flock`` is per host: two machines sharing the
folder over NFS are not excluded.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

from harness.results.provenance import now

LOCK_FILE = "sweep.lock"


class SweepLocked(RuntimeError):
    """Another sweep holds this sweep folder."""


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        info = {}
    if not info.get("pid"):
        return "another process (it has not recorded itself yet)"
    return (
        f"pid {info['pid']} on {info.get('host', '?')}, since {info.get('started_at', '?')} "
        f"({' '.join(info.get('command') or [])})"
    )


@contextlib.contextmanager
def sweep_lock(sweep_dir: str | Path) -> Iterator[Path]:
    """Hold ``<sweep_dir>/sweep.lock`` while the block runs; :class:`SweepLocked` naming the holder if
    another process holds it."""
    sweep_dir = Path(sweep_dir)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    path = sweep_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepLocked(
                f"sweep {sweep_dir.name!r} is already running: {_holder(fd)}; wait for it or stop "
                f"it, or run this one with another --sweep-id (lock: {path})"
            ) from None
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": now(), "command": sys.argv}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(me).encode(), 0)
        yield path
        os.ftruncate(fd, 0)  # finished: nobody holds it
    finally:
        os.close(fd)  # releases the lock
