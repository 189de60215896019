"""Launchers: how a worker process is started, watched and ended. :class:`LocalLauncher` today.

A launcher takes a :class:`~harness.run.spec.WorkerSpec` and returns an :class:`Outcome`: the
worker's own result (``out.json``) and, when it did not finish by itself, how it died. The local
launcher runs ``python -m harness.run.worker`` in its own process group, with the environment the
variant needs set before JAX starts (simulated device count, ``JAX_PLATFORMS``, a measured variant's
compiler options as backend flags); a worker that raises, exits non-zero, dies from a signal (the
OOM killer) or runs past ``run.timeout_s`` (its group is killed) becomes a failed outcome carrying
the error text. A cluster launcher implements the same :class:`Launcher` protocol.

Nothing outlives the launcher: interrupted while a worker runs, it kills the worker's group before
the exception goes on and removes the worker's temporary folder; killed outright, the worker cleans
up itself (:mod:`harness.run.lifeline`). The worker's output goes to ``log_path``, between a line
saying how it was started and one saying how it ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
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
from harness.run.distributed import merge_results
from harness.run.lifeline import LAUNCHER_SIGNALS
from harness.run.progress import Progress
from harness.run.spec import WorkerSpec
from harness.vocabulary import Status

REPO_ROOT = Path(__file__).resolve().parents[2]
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
ERROR_TAIL_LINES = 40
_JAX_PLATFORM = {"cpu": "cpu", "tpu": "tpu", "gpu": "cuda"}
LOG_MARK = "[launcher]"  # the launcher's own lines in a worker log (left out of error tails)


class Launcher(Protocol):
    """How variants run: :class:`LocalLauncher` here, :class:`~harness.run.launcher_xpk.XpkLauncher` on a
    cluster. Another engine (Ray, Slurm) is one more class with these two methods."""

    def run(self, spec: WorkerSpec, *, log_path: Path, progress: Progress | None = None) -> Outcome | None:
        """Run one variant to completion, timeout or death (its output goes to ``log_path``), or hand it to
        a cluster: None, the record comes later (``harness collect``)."""
        ...

    def submitted(self, variant_id: str) -> bool:
        """Whether the variant was handed to a cluster already (not to hand it over twice)."""
        ...


def worker_env(spec: WorkerSpec, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the parent's, plus the device set-up this variant needs."""
    env = dict(os.environ if base is None else base)
    target = spec.target
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    if target.platform == "cpu":
        flags.append(f"{DEVICE_COUNT_FLAG}={(target.devices or 1) // target.processes}")  # each process its share
        env["JAX_PLATFORMS"] = "cpu"
    elif spec.compile_only:
        env.update(targets.compile_env(target.platform))  # ahead-of-time from the host; never grab an accelerator
    else:
        env["JAX_PLATFORMS"] = _JAX_PLATFORM[target.platform]
    env["XLA_FLAGS"] = " ".join(flags)
    if not spec.compile_only:  # the run's own compiles get the variant's options too (static's compile() has them)
        env.update(targets.run_flags_env(target.platform, dict(target.compiler_options), env))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    # One string hash for every worker: a program traced from code that iterates a set (transformers'
    # Gemma-3 computes its RoPE tables `for layer_type in set(config.layer_types)`) is otherwise traced
    # in another order in each process, so its compile-cache key differs and a warm sweep misses.
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def worker_command(spec: WorkerSpec, python: str, spec_path: Path, out_path: Path) -> list[str]:
    """The worker's command line; a TPU worker's goes through :mod:`harness.run.stack_limit` (its soft
    stack limit raised to the hard one before the interpreter starts: libtpu overflows 8 MiB
    compiling the 19B tpu7x step)."""
    command = [python, "-m", "harness.run.worker", str(spec_path), str(out_path)]
    if spec.target.platform == "tpu":
        return [python, "-m", "harness.run.stack_limit", *command]
    return command


def _kill_group(
    proc: subprocess.Popen[bytes], grace_s: float, members: list[subprocess.Popen[bytes]] | None = None
) -> None:
    """End the process groups of ``members`` (default just ``proc``; each worker leads its own): SIGTERM,
    then SIGKILL to the groups still there after ``grace_s``, and wait for the workers."""
    members = members or [proc]
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        for m in members:
            if m.returncode is None or sig == signal.SIGKILL:  # a group may outlive its exited leader
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(m.pid, sig)
        deadline = None if wait is None else time.monotonic() + wait
        try:
            for m in members:
                m.wait(timeout=None if deadline is None else max(deadline - time.monotonic(), 0.0))
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


# What a process's last lines say when an allocation failed: Python's MemoryError, the dynamic
# loader's refused mmap of a shared library (an import under an address-space limit), libc's ENOMEM
# text, a C++ allocation failure, and CPython's SystemError for a C function that failed without
# setting an exception: seen when an import's allocation failed under the RLIMIT_AS fault
# (tests/harness/faults: email.utils, about one worker in six).
OUT_OF_MEMORY = (
    "MemoryError",
    "failed to map segment",
    "Cannot allocate memory",
    "std::bad_alloc",
    "SystemError: error return without exception set",
)


def _exit_reason(rc: int, tail: str = "") -> str:
    if rc > 0 and any(marker in tail for marker in OUT_OF_MEMORY):
        return f"worker ran out of memory (exited with code {rc})"
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        hint = " (out of memory, or killed from outside)" if -rc == signal.SIGKILL else ""
        return f"worker killed by signal {name}{hint}"
    return f"worker exited with code {rc}"


def classify(
    rc: int, timed_out: bool, where: Mapping[str, Any] | None, result: Mapping[str, Any], timeout_s: float, tail: str
) -> tuple[str, str | None]:
    """(status, error): the worker's own verdict if it finished, else how it died."""
    if timed_out:
        at = f" in {where['stage']}:{where['phase']}" if where and where.get("stage") else ""
        return Status.TIMEOUT, f"timed out after {timeout_s:g} s{at}\n{tail}".rstrip()
    if result.get("status") in (Status.OK, Status.FAILED) and rc in (0, 1):
        return result["status"], result.get("error")
    return Status.CRASHED, f"{_exit_reason(rc, tail)}\n{tail}".rstrip()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a variant's jax.distributed coordinator)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_log(log_path: Path, process_id: int) -> Path:
    """Where process ``process_id`` of a variant logs: the variant's log for process 0, a sibling for the others."""
    return log_path if process_id == 0 else log_path.with_name(f"{log_path.stem}.process-{process_id}{log_path.suffix}")


@dataclass
class _Worker:
    """One process of a variant, as the launcher tracks it."""

    process_id: int
    spec_path: Path
    out_path: Path
    status_path: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    where: dict[str, Any] | None = None


def _specs(spec: WorkerSpec, tmp: Path, log_path: Path) -> list[tuple[WorkerSpec, _Worker]]:
    n = spec.processes
    coordinator = f"127.0.0.1:{free_port()}" if n > 1 else None
    out = []
    for i in range(n):
        names = (
            ("spec.json", "out.json", "status.json")
            if n == 1
            else (f"spec-{i}.json", f"out-{i}.json", f"status-{i}.json")
        )
        w = _Worker(i, tmp / names[0], tmp / names[1], tmp / names[2], process_log(log_path, i))
        out.append(
            (
                dataclasses.replace(
                    spec,
                    status_path=str(w.status_path),
                    parent_pid=os.getpid(),
                    scratch_dir=str(tmp),
                    process_id=i,
                    coordinator=coordinator,
                ),
                w,
            )
        )
    return out


@dataclass(frozen=True)
class LocalLauncher:
    """Workers as subprocesses of this process, one variant at a time; a variant of ``target.processes = N``
    is N workers, each leading its own process group, ended together."""

    python: str = sys.executable
    poll_s: float = 0.1
    kill_grace_s: float = 3.0
    env: Mapping[str, str] | None = field(default=None, compare=False)  # default: this process's

    def _watch(self, workers: list[_Worker], timeout_s: float, progress: Progress | None) -> tuple[bool, int | None]:
        """Poll the workers until all exit, one fails (the others are ended) or time runs out (all are
        ended); (timed out, the process that failed first or None)."""
        start = time.monotonic()
        procs = [w.proc for w in workers if w.proc is not None]
        while any(p.poll() is None for p in procs):
            elapsed = time.monotonic() - start
            for w in workers:
                w.where = _read_json(w.status_path) or w.where
            if progress is not None:
                where = workers[0].where or {}
                progress.update(where.get("stage", ""), where.get("phase", "starting"), elapsed)
            failed = next(
                (w.process_id for w in workers if w.proc is not None and w.proc.poll() not in (None, 0)), None
            )
            if failed is not None and len(workers) > 1:
                _kill_group(procs[0], self.kill_grace_s, procs)
                return False, failed
            if elapsed > timeout_s:
                _kill_group(procs[0], self.kill_grace_s, procs)
                return True, None
            time.sleep(self.poll_s)
        failed = next((w.process_id for w in workers if w.proc is not None and w.proc.returncode != 0), None)
        return False, failed

    def submitted(self, variant_id: str) -> bool:
        return False  # a local run finishes (or fails) before the next starts

    def _start(self, spec: WorkerSpec, w: _Worker, log: Any) -> subprocess.Popen[bytes]:
        command = worker_command(spec, self.python, w.spec_path, w.out_path)
        log.write(
            f"{LOG_MARK} {now()} {spec.variant_name} ({spec.variant_id})"
            f"{f' process {w.process_id} of {spec.processes}' if spec.processes > 1 else ''}: "
            f"{' '.join(command)}\n".encode()
        )
        log.flush()
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=worker_env(spec, self.env),
            start_new_session=True,
        )

    def run(self, spec: WorkerSpec, *, log_path: Path, progress: Progress | None = None) -> Outcome:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        timeout_s = spec.run.timeout_s
        if spec.processes > 1 and spec.target.platform != "cpu" and not spec.compile_only:
            return _refused(spec, log_path)
        if spec.processes > 1 and spec.compile_only:  # one host compiles for the whole topology
            spec = dataclasses.replace(spec, target=dataclasses.replace(spec.target, processes=1))
        with tempfile.TemporaryDirectory(prefix=f"harness-{spec.variant_id}-") as tmp, contextlib.ExitStack() as logs:
            pairs = _specs(spec, Path(tmp), log_path)
            workers = [w for _, w in pairs]
            for s, w in pairs:
                w.spec_path.write_text(s.to_json())
            files = [logs.enter_context(w.log_path.open("wb")) for w in workers]
            started_at, start = now(), time.monotonic()
            # Blocked while the workers start: a Ctrl-C inside Popen would lose a child's handle.
            # The workers inherit the mask and unblock them first thing.
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, LAUNCHER_SIGNALS)
            try:
                for (s, w), log in zip(pairs, files, strict=True):
                    w.proc = self._start(s, w, log)
            except BaseException:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
                started = [w.proc for w in workers if w.proc is not None]
                if started:
                    _kill_group(started[0], self.kill_grace_s, started)
                raise
            procs = [w.proc for w in workers if w.proc is not None]
            try:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a signal pending since Popen fires here
                timed_out, failed = self._watch(workers, timeout_s, progress)
            except BaseException:  # interrupted (or a bug here): no worker may outlive this call
                _kill_group(procs[0], self.kill_grace_s, procs)
                raise
            duration = time.monotonic() - start
            for w, log in zip(workers, files, strict=True):
                log.write(
                    f"{LOG_MARK} {now()} {_exit_reason(w.proc.returncode)} after {duration:.1f} s"  # type: ignore[union-attr]
                    f"{' (timed out)' if timed_out else ''}\n".encode()
                )
            results = [_read_json(w.out_path) or {} for w in workers]
        return _outcome(spec, workers, results, timed_out, failed, duration, started_at)


def _outcome(
    spec: WorkerSpec,
    workers: list[_Worker],
    results: list[dict[str, Any]],
    timed_out: bool,
    failed: int | None,
    duration: float,
    started_at: str,
) -> Outcome:
    """One outcome for the variant: a single worker's verdict, or the processes' merged
    (:func:`~harness.run.distributed.merge_results`) unless one failed first, whose reason it carries."""
    timeout_s = spec.run.timeout_s
    if len(workers) == 1:
        w = workers[0]
        status, error = classify(w.proc.returncode, timed_out, w.where, results[0], timeout_s, _tail(w.log_path))  # type: ignore[union-attr]
        return Outcome(status, error, results[0], duration, started_at, now())
    merged = merge_results([r if r.get("stages") is not None else {**r, "stages": {}} for r in results])
    if failed is None and not timed_out:
        return Outcome(merged.get("status", Status.CRASHED), merged.get("error"), merged, duration, started_at, now())
    w = workers[0 if failed is None else failed]
    status, error = classify(
        w.proc.returncode,  # type: ignore[union-attr]
        timed_out,
        w.where,
        results[w.process_id],
        timeout_s,
        _tail(w.log_path),
    )
    if status == Status.OK:  # exited 0 while another failed: cannot be the one that failed first
        status = Status.FAILED
    others = f"; the other {len(workers) - 1} process(es) were ended" if failed is not None else ""
    if timed_out:  # a hang: where each process was, the one behind the others is the likely culprit
        where = [
            f"process {v.process_id} in {(v.where or {}).get('stage') or '-'}:"
            f"{(v.where or {}).get('phase', 'starting')}"
            for v in workers
        ]
        others = f"; all {len(workers)} ended ({', '.join(where)})"
    return Outcome(
        status,
        f"process {w.process_id} of {len(workers)} (pid {w.proc.pid}): {error}{others}",  # type: ignore[union-attr]
        merged,
        duration,
        started_at,
        now(),
    )


def _refused(spec: WorkerSpec, log_path: Path) -> Outcome:
    error = (
        f"target.processes = {spec.processes} on {spec.target.platform}: the local launcher starts several "
        "processes only on cpu (one host); run it on a cluster (--launcher xpk), or compile only (mode = "
        "'compile')"
    )
    log_path.write_text(f"{LOG_MARK} {now()} {error}\n")
    return Outcome(Status.FAILED, error, {}, 0.0, now(), now())
