"""Launchers: how a worker process is started, watched and ended. :class:`LocalLauncher` today.

A launcher takes a :class:`~harness.run.spec.WorkerSpec` and returns an :class:`Outcome`: the
worker's own result (``out.json``) and, when it did not finish by itself, how it died. The
local launcher runs ``python -m harness.run.worker`` in its own process group, with the
environment the variant needs set before JAX starts (``XLA_FLAGS`` simulated device count on
CPU, ``JAX_PLATFORMS``); a worker that raises, exits non-zero, dies from a signal (the OOM
killer) or runs past ``run.timeout_s`` (its whole process group is killed) becomes a failed
outcome carrying the error text. A launcher for a cluster (one job per variant, several
processes per job) implements the same :class:`Launcher` protocol.

Nothing outlives the launcher: if it is interrupted (SIGINT / SIGTERM become
:class:`~harness.run.interrupt.Interrupted`, or any other exception) while a worker runs, it kills
the worker's process group before the exception goes on, and the worker's temporary folder is
removed on the way out; if it is killed outright, the worker notices and cleans up itself
(:mod:`harness.run.lifeline`: the spec carries the launcher's pid and the folder). The worker's
stdout and stderr go to ``log_path``, between a line saying how it was started and one saying how
it ended.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness import targets
from harness.results.provenance import now
from harness.results.record import Outcome
from harness.run.lifeline import LAUNCHER_SIGNALS
from harness.run.progress import Progress
from harness.run.spec import WorkerSpec

REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
ERROR_TAIL_LINES = 40
_JAX_PLATFORM = {"cpu": "cpu", "tpu": "tpu", "gpu": "cuda"}
LOG_MARK = "[launcher]"  # the launcher's own lines in a worker log (left out of error tails)


class Launcher(Protocol):
    def run(self, spec: WorkerSpec, *, log_path: Path, progress: Progress | None = None) -> Outcome:
        """Run one worker to completion, timeout or death; its output goes to ``log_path``."""
        ...


def worker_env(spec: WorkerSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the parent's, plus the device set-up this variant needs."""
    env = dict(os.environ if base is None else base)
    target = spec.target
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    if target.platform == "cpu":
        flags.append(f"{DEVICE_COUNT_FLAG}={target.devices}")
        env["JAX_PLATFORMS"] = "cpu"
    elif spec.compile_only:
        env.update(targets.compile_env(target.platform))  # ahead-of-time from the host; never grab an accelerator
    else:
        env["JAX_PLATFORMS"] = _JAX_PLATFORM[target.platform]
    env["XLA_FLAGS"] = " ".join(flags)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int = ERROR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join([ln for ln in text.rstrip().splitlines() if not ln.startswith(LOG_MARK)][-lines:])


def _exit_reason(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        hint = " (out of memory, or killed from outside)" if -rc == signal.SIGKILL else ""
        return f"worker killed by signal {name}{hint}"
    return f"worker exited with code {rc}"


def classify(rc: int, timed_out: bool, where: Mapping[str, Any] | None, result: Mapping[str, Any],
             timeout_s: float, tail: str) -> tuple[str, str | None]:  # fmt: skip
    """(status, error): the worker's own verdict if it finished, else how it died."""
    if timed_out:
        at = f" in {where['stage']}:{where['phase']}" if where and where.get("stage") else ""
        return "timeout", f"timed out after {timeout_s:g} s{at}\n{tail}".rstrip()
    if result.get("status") in ("ok", "failed") and rc in (0, 1):
        return result["status"], result.get("error")
    return "crashed", f"{_exit_reason(rc)}\n{tail}".rstrip()


@dataclass(frozen=True)
class LocalLauncher:
    """Workers as subprocesses of this process, one at a time."""

    python: str = sys.executable
    poll_s: float = 0.1
    kill_grace_s: float = 3.0
    env: Mapping[str, str] | None = field(default=None, compare=False)  # default: this process's

    def _watch(self, proc: subprocess.Popen[bytes], timeout_s: float, status_path: Path,
               progress: Progress | None) -> tuple[bool, dict[str, Any] | None]:  # fmt: skip
        """Poll the worker until it exits or times out (then kill its group); (timed out, last status)."""
        start, where = time.monotonic(), None
        while proc.poll() is None:
            elapsed = time.monotonic() - start
            where = _read_json(status_path) or where
            if progress is not None:
                progress.update((where or {}).get("stage", ""), (where or {}).get("phase", "starting"), elapsed)
            if elapsed > timeout_s:
                _kill_group(proc, self.kill_grace_s)
                return True, where
            time.sleep(self.poll_s)
        return False, where

    def run(self, spec: WorkerSpec, *, log_path: Path, progress: Progress | None = None) -> Outcome:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        timeout_s = spec.run.timeout_s
        with tempfile.TemporaryDirectory(prefix=f"harness-{spec.variant_id}-") as tmp:
            spec_path, out_path, status_path = (Path(tmp) / n for n in ("spec.json", "out.json", "status.json"))
            spec = dataclasses.replace(spec, status_path=str(status_path), parent_pid=os.getpid(), scratch_dir=tmp)
            spec_path.write_text(spec.to_json())
            command = [self.python, "-m", "harness.run.worker", str(spec_path), str(out_path)]
            started_at, start = now(), time.monotonic()
            with log_path.open("wb") as log:
                log.write(f"{LOG_MARK} {started_at} {spec.variant_name} ({spec.variant_id}): {' '.join(command)}\n"
                          .encode())  # fmt: skip
                log.flush()
                # Blocked while the worker starts: a Ctrl-C inside Popen would lose the child's handle.
                # The worker inherits the mask and unblocks them first thing.
                blocked = signal.pthread_sigmask(signal.SIG_BLOCK, LAUNCHER_SIGNALS)
                try:
                    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=worker_env(spec, self.env), start_new_session=True)  # fmt: skip
                except BaseException:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                    raise
                try:
                    signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a signal pending since Popen fires here
                    timed_out, where = self._watch(proc, timeout_s, status_path, progress)
                except BaseException:  # interrupted (or a bug here): the worker must not outlive this call
                    _kill_group(proc, self.kill_grace_s)
                    raise
                duration = time.monotonic() - start
                log.write(f"{LOG_MARK} {now()} {_exit_reason(proc.returncode)} after {duration:.1f} s"
                          f"{' (timed out)' if timed_out else ''}\n".encode())  # fmt: skip
            result = _read_json(out_path) or {}
        status, error = classify(proc.returncode, timed_out, where, result, timeout_s, _tail(log_path))
        return Outcome(status, error, result, duration, started_at, now())
