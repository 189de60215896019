"""One sweep at a time per sweep folder: an exclusive ``flock`` on ``<sweep dir>/sweep.lock``.

Two sweeps on one sweep id would both resume from the same results file and append duplicate
records. The lock is held for the whole sweep and released by the kernel when its holder exits,
however it exits (SIGKILL included), so a crashed sweep never leaves a stale lock. The file holds
who holds it (pid, host, start time, command) so the refused sweep can say; it stays in place
(removing it would race with the next holder) and is emptied when its holder lets go. A file that
is not empty when the lock is taken was left by a holder that died without letting go (SIGKILL,
power loss): the new holder takes it over and says so, naming the dead pid. ``flock`` is per
host: two machines sharing the folder over NFS are not excluded.

While held, :meth:`HeldLock.check` tells whether the sweep folder is still the one that was locked:
a folder deleted or unmounted under a running sweep is a
:class:`~harness.results.storage.StorageError`, not a silently recreated empty folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.results.provenance import now
from harness.results.storage import StorageError, guarded

LOCK_FILE = "sweep.lock"


class SweepLocked(RuntimeError):
    """Another sweep holds this sweep folder."""


@dataclass(frozen=True)
class HeldLock:
    """A held sweep lock: its file and the descriptor that holds it."""

    path: Path
    fd: int

    def check(self) -> None:
        """:class:`StorageError` if the lock file is no longer the one held (its folder vanished or was replaced)."""
        try:
            same = os.path.samestat(os.stat(self.path), os.fstat(self.fd))
        except OSError:
            same = False
        if not same:
            raise StorageError(
                OSError(errno.ENOENT, "Sweep folder vanished"),
                self.path.parent,
                "while the sweep ran:",
                "deleted or unmounted; the records written before went with it",
            )


def _info(fd: int) -> dict[str, object]:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _describe(info: dict[str, object]) -> str:
    command = info.get("command")
    return (
        f"pid {info['pid']} on {info.get('host', '?')}, since {info.get('started_at', '?')} "
        f"({' '.join(map(str, command)) if isinstance(command, list) else ''})"
    )


def _holder(fd: int) -> str:
    info = _info(fd)
    return _describe(info) if info.get("pid") else "another process (it has not recorded itself yet)"


@contextlib.contextmanager
def sweep_lock(sweep_dir: str | Path, say: Callable[[str], object] | None = None) -> Iterator[HeldLock]:
    """Hold ``<sweep_dir>/sweep.lock`` while the block runs; :class:`SweepLocked` naming the holder if
    another process holds it. A lock left by a dead holder is taken over and ``say`` is told its pid."""
    sweep_dir = Path(sweep_dir)
    path = sweep_dir / LOCK_FILE
    with guarded(path, "taking the sweep lock"):
        sweep_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepLocked(
                f"sweep {sweep_dir.name!r} is already running: {_holder(fd)}; wait for it or stop "
                f"it, or run this one with another --sweep-id (lock: {path})"
            ) from None
        stale = _info(fd)
        if stale.get("pid") and say is not None:
            say(f"taking over {path}: left by {_describe(stale)}, which ended without releasing it")
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started_at": now(), "command": sys.argv}
        with guarded(path, "taking the sweep lock"):
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(me).encode(), 0)
        try:
            yield HeldLock(path, fd)
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # let go, however the block ended: nobody holds it
    finally:
        os.close(fd)  # releases the lock
