"""Fault injection for the fault suite: :func:`install` wraps the ``os`` / ``io`` calls the harness
writes files with, so the one call a rule names fails or dies. The test process installs it with
``monkeypatch.setattr``; every Python process started with this folder on ``PYTHONPATH`` (the sweep
and its workers) installs it at start-up from ``HARNESS_FAULT`` (:mod:`sitecustomize`).

A rule is a JSON object: ``op`` (``open`` for opening a file to write, ``write`` for
``os.write`` / ``os.pwrite`` / ``os.ftruncate``, ``fsync``, ``replace``, ``mkdir``), ``path`` (an
``fnmatch`` pattern on the absolute path), ``proc`` (``sweep``, ``worker`` or ``any``), ``nth``
(the n-th matching call in that process, from 1; default 1, ``0`` = every one) and ``action``:
an errno name (``ENOSPC``, ``EROFS``...) raised as that ``OSError``; ``kill`` (SIGKILL this process
before the call); ``tear`` (write half the bytes, then SIGKILL: a torn write);
``signal-parent:<SIGNAME>`` (signal the parent, then go on: the sweep is killed or interrupted
while its worker runs); ``hang`` (sleep an hour: a worker out of time); ``rmtree:<dir>`` (remove
``dir``, then go on: a folder vanishes).
"""

from __future__ import annotations

import builtins
import errno
import fnmatch
import io
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

_RULE: dict[str, Any] = {}
_SEEN = [0]
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _proc() -> str:
    argv0 = sys.argv[0] if sys.argv else ""
    return "worker" if argv0.endswith(os.path.join("run", "worker.py")) else "sweep"


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""


def _fire(op: str, path: object) -> str | None:
    """The action to take for this call, or None (not the rule's call)."""
    rule = _RULE
    if not rule or rule["op"] != op or rule.get("proc", "any") not in ("any", _proc()):
        return None
    if not fnmatch.fnmatch(os.path.abspath(os.fsdecode(path)), rule["path"]):  # type: ignore[arg-type]
        return None
    _SEEN[0] += 1
    nth = rule.get("nth", 1)
    return rule["action"] if nth == 0 or _SEEN[0] == nth else None


def _act(action: str | None, path: object) -> None:
    if action is None:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action.startswith("signal-parent:"):
        os.kill(os.getppid(), getattr(signal, action.removeprefix("signal-parent:")))
    elif action == "hang":
        time.sleep(3600)
    elif action.startswith("rmtree:"):
        shutil.rmtree(action.removeprefix("rmtree:"), ignore_errors=True)
    elif action != "tear":
        code = getattr(errno, action)
        raise OSError(code, os.strerror(code), os.fsdecode(path))  # type: ignore[arg-type]


def install(rule: dict[str, Any], setter: Callable[[object, str, object], None] = setattr) -> None:
    """Wrap the calls (``setter(module, name, wrapper)``: ``monkeypatch.setattr`` in a test) so ``rule`` fires."""
    _RULE.clear()
    _RULE.update(rule)
    _SEEN[0] = 0
    real_open, real_io_open, real_write, real_pwrite = os.open, io.open, os.write, os.pwrite
    real_ftruncate, real_fsync, real_replace, real_mkdir = os.ftruncate, os.fsync, os.replace, os.mkdir

    def os_open(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if flags & _WRITE_FLAGS:
            _act(_fire("open", path), path)
        return real_open(path, flags, *args, **kwargs)

    def any_open(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        if not isinstance(file, int) and any(c in mode for c in "wax+"):
            _act(_fire("open", file), file)
        return real_io_open(file, mode, *args, **kwargs)

    def write(fd, data):  # type: ignore[no-untyped-def]
        path = _fd_path(fd)
        action = _fire("write", path)
        if action == "tear":
            real_write(fd, bytes(data)[: max(len(data) // 2, 1)])
            os.kill(os.getpid(), signal.SIGKILL)
        _act(action, path)
        return real_write(fd, data)

    def pwrite(fd, data, offset):  # type: ignore[no-untyped-def]
        path = _fd_path(fd)
        _act(_fire("write", path), path)
        return real_pwrite(fd, data, offset)

    def ftruncate(fd, length):  # type: ignore[no-untyped-def]
        path = _fd_path(fd)
        _act(_fire("write", path), path)
        return real_ftruncate(fd, length)

    def fsync(fd):  # type: ignore[no-untyped-def]
        path = _fd_path(fd if isinstance(fd, int) else fd.fileno())
        _act(_fire("fsync", path), path)
        return real_fsync(fd)

    def replace(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
        _act(_fire("replace", dst), dst)
        return real_replace(src, dst, *args, **kwargs)

    def mkdir(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        _act(_fire("mkdir", path), path)
        return real_mkdir(path, *args, **kwargs)

    for module, name, wrapper in (
        (os, "open", os_open),
        (io, "open", any_open),
        (builtins, "open", any_open),
        (os, "write", write),
        (os, "pwrite", pwrite),
        (os, "ftruncate", ftruncate),
        (os, "fsync", fsync),
        (os, "replace", replace),
        (os, "mkdir", mkdir),
    ):
        setter(module, name, wrapper)


def install_from_env() -> None:
    """Install ``HARNESS_FAULT``'s rule, if set; cap this process's address space at
    ``HARNESS_FAULT_RLIMIT_AS`` bytes more than it has now, if set (a worker out of memory)."""
    if rule := os.environ.get("HARNESS_FAULT"):
        install(json.loads(rule))
    if extra := os.environ.get("HARNESS_FAULT_RLIMIT_AS"):
        import resource

        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[0])
        limit = pages * os.sysconf("SC_PAGE_SIZE") + int(extra)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
