"""A worker's tie to the process that launched it: if the launcher dies, even by SIGKILL, the worker
removes its scratch folder and ends its own process group, so no worker keeps the CPU, memory or an
accelerator, and no ``harness-*`` folder is left behind.

The launcher starts each worker in a session of its own (a Ctrl-C reaches the launcher, which stops
the worker itself), so the worker would outlive a launcher killed outright. Two mechanisms notice,
both ending in :func:`orphaned`: on Linux ``prctl(PR_SET_PDEATHSIG, SIGHUP)`` (checked right after
asking, the parent may already be gone); everywhere a daemon thread polling ``os.getppid()`` every
:data:`POLL_S` seconds, which also covers a main thread stuck in a long native call (an XLA compile)
where a Python signal handler would wait. A worker whose work ends while its launcher is being
killed removes the folder on its way out (:func:`leaving`). The launcher's own SIGTERM / SIGKILL to
the worker's group keep their default effect; the launcher then removes the folder itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

POLL_S = 0.5
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PF_EXITING = 0x4  # <linux/sched.h>: a task in do_exit (flags, field 9 of /proc/<pid>/stat)
PARENT_DEATH_SIGNAL = signal.SIGHUP
LAUNCHER_SIGNALS = {signal.SIGINT, signal.SIGTERM}  # blocked by the launcher while it starts a worker
_ENDING = threading.RLock()
ORPHANED_SUFFIX = ".orphaned"  # a scratch folder being removed: ".<name>.orphaned" (gone_name)


def _ask_kernel(sig: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)``; False where there is no such call (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0


def gone_name(scratch_dir: str | Path) -> Path:
    """Where :func:`orphaned` moves a scratch folder before removing it (hidden: not a ``harness-*`` name)."""
    path = Path(scratch_dir)
    return path.with_name(f".{path.name}{ORPHANED_SUFFIX}")


def remove_scratch(scratch_dir: str | Path) -> None:
    """Remove a scratch folder that this process's other threads, or another worker, may still write into.

    A plain ``rmtree`` loses that race: a file created between its listing and its final ``rmdir``
    leaves the folder behind (seen in CI: the worker's main thread wrote ``status.json`` while the
    lifeline thread removed the folder). The folder is first renamed to :func:`gone_name`, which no
    writer knows, so every later write by path fails instead of landing in it; then it is removed.
    Idempotent: a second caller (the other mechanism, or another worker) finds it renamed.
    """
    gone = gone_name(scratch_dir)
    with contextlib.suppress(FileNotFoundError):
        os.rename(scratch_dir, gone)
    shutil.rmtree(gone, ignore_errors=True)


def orphaned(scratch_dir: str | None) -> None:
    """The launcher is gone: remove the scratch folder, then end this worker and what it started.

    Both mechanisms may call this at once (the signal handler in the main thread, the polling thread):
    the lock makes the second wait for the first, which ends the process. Re-entrant, for a second
    signal arriving in the main thread while it is already here.
    """
    with _ENDING:
        if scratch_dir:
            remove_scratch(scratch_dir)
        print(f"worker {os.getpid()}: launcher gone, scratch folder removed, exiting", file=sys.stderr, flush=True)
        if os.getpgrp() == os.getpid():  # leader of its own group (as the launcher starts it): end the group
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def hold(parent_pid: int, scratch_dir: str | None) -> None:
    """Tie this process to ``parent_pid``: when it is no longer our parent, :func:`orphaned` runs."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if os.getppid() != parent_pid:
            orphaned(scratch_dir)

    signal.signal(PARENT_DEATH_SIGNAL, on_signal)
    _ask_kernel(PARENT_DEATH_SIGNAL)
    if os.getppid() != parent_pid:  # died before the kernel was asked to tell us
        orphaned(scratch_dir)

    def poll() -> None:
        while os.getppid() == parent_pid:
            time.sleep(POLL_S)
        orphaned(scratch_dir)

    threading.Thread(target=poll, name="harness-lifeline", daemon=True).start()


def dying(pid: int) -> bool:
    """Whether process ``pid`` has begun to die (Linux ``/proc``; False where it cannot tell): SIGKILL
    pending (``kill()`` marks it before it returns: 200 of 200 checks right after one, this host), or
    already exiting. Its death, and our reparenting, can come tens of ms later (the kernel frees its
    memory first)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    kill = 1 << (signal.SIGKILL - 1)
    if any(int(fields.get(k, "0"), 16) & kill for k in ("SigPnd", "ShdPnd")):
        return True
    after_name = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, tty, tpgid, flags, ...
    return after_name[0] in ("Z", "X") or bool(int(after_name[6]) & PF_EXITING)


def leaving(parent_pid: int, scratch_dir: str | None) -> None:
    """At a worker's normal end: a launcher that is gone or dying will not remove the scratch folder,
    so remove it here. A worker whose work ends right after its launcher is killed can exit before
    the kernel reparents it, so neither mechanism of :func:`hold` fires (seen in the fault tests:
    the folder left with the worker's finished out.json)."""
    if scratch_dir and (os.getppid() != parent_pid or dying(parent_pid)):
        remove_scratch(scratch_dir)
