"""Faults of the machine's storage as one error, :class:`StorageError`, naming the cause and the path.

A disk that fills up, a folder that is read-only, vanished or is a file where a folder should be:
the harness's writes turn the ``OSError`` into a :class:`StorageError` (``with guarded(path, doing):``)
whose text is one line, e.g. ``no space left on device (ENOSPC) appending a record to
reports/cpu/results.jsonl``. The CLI prints it as its ``error:`` line and exits
:data:`EXIT_STORAGE`. Files that are replaced whole (reports, baselines, cache entries) are written
by :func:`write_atomic`: a temporary sibling, fsynced, renamed over the file, so a fault leaves the old
file or the new one, never half of one, and no temporary file behind (one left by a writer killed
outright carries its pid and is removed by the next writer once that pid is gone).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

EXIT_STORAGE = 3
_AGAIN = "then run the same command again"
_HINTS = {
    errno.ENOSPC: f"free some space, {_AGAIN}",
    errno.EDQUOT: f"free some space, {_AGAIN}",
    errno.EROFS: f"make it writable or point --reports elsewhere, {_AGAIN}",
    errno.EACCES: f"make it writable or point --reports elsewhere, {_AGAIN}",
    errno.EPERM: f"make it writable or point --reports elsewhere, {_AGAIN}",
    errno.ENOENT: f"a folder on the way is missing (deleted or unmounted?), {_AGAIN}",
    errno.ENOTDIR: f"a file is where a folder should be, {_AGAIN}",
    errno.EEXIST: f"a file is where a folder should be, {_AGAIN}",
    errno.EISDIR: f"a folder is where a file should be, {_AGAIN}",
}


class StorageError(OSError):
    """A read or write the machine refused: one line with the cause (strerror, errno name), what was being
    done, the path and what to do about it."""

    def __init__(self, cause: OSError, path: str | Path, doing: str, hint: str | None = None):
        self.path, self.doing, self.cause = str(path), doing, cause
        super().__init__(cause.errno or 0, cause.strerror or str(cause))
        self.hint = hint if hint is not None else _HINTS.get(self.errno or 0, _AGAIN)

    def __str__(self) -> str:
        name = errno.errorcode.get(self.errno or 0, "")
        why = (self.cause.strerror or str(self.cause)).lower()
        return f"{why}{f' ({name})' if name else ''} {self.doing} {self.path}{f'; {self.hint}' if self.hint else ''}"


@contextlib.contextmanager
def guarded(path: str | Path, doing: str) -> Iterator[None]:
    """Within: an ``OSError`` becomes a :class:`StorageError` naming ``doing`` and the path (the one the
    error names, if it names one, else ``path``)."""
    try:
        yield
    except StorageError:
        raise
    except OSError as e:
        raise StorageError(e, e.filename or path, doing) from e


def write_atomic(path: str | Path, data: str | bytes) -> Path:
    """Replace ``path`` with ``data`` whole (temporary sibling, fsync, rename); :class:`StorageError` if the
    machine refuses, with the old file untouched and no temporary file left."""
    path = Path(path)
    blob = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_dead_temporaries(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:  # named by the file meant, not its temporary sibling
        raise StorageError(e, path, "writing") from e
    return path


def _remove_dead_temporaries(path: Path) -> None:
    """Temporary siblings of ``path`` left by a writer killed before its rename (their names carry its pid)."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name.removeprefix(f".{path.name}.").split(".", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
