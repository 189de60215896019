"""Compile-only variants side by side (``sweep --jobs N``): how many at once, and how long a sweep takes.

A compile-only variant times nothing, so several can share the machine; a measured variant always
runs alone (:mod:`harness.run.runner` runs those one after another, after the compile-only ones).
How many at once by default (:func:`default_jobs`): as many as the cores allow at the cores one
compile-only worker kept busy before (its CPU time over its wall time, the records'
``machine.worker_cpu_s`` / ``duration_s``; :data:`UNKNOWN_CORES_PER_WORKER` when no record says),
and as the memory allows at the largest peak such a worker reached (``machine.worker_peak_rss_bytes``;
:data:`UNKNOWN_PEAK_BYTES` when no record says).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from harness.results.record import Record

GiB = 2**30
UNKNOWN_PEAK_BYTES = 6 * GiB  # a full-size compile-only worker's peak is 2-5 GiB; more than that is safe
HEADROOM = 1.25  # memory per worker: its recorded peak times this
# Cores one compile-only worker keeps busy, where no record says: measured here (AMD EPYC, 2 cores),
# v6e.toml's 24 variants one at a time used 1.51 cores on average (CPU time / wall; XLA compiles on
# several threads, the prediction on one). Two at once on those 2 cores took 2.5x as long each.
UNKNOWN_CORES_PER_WORKER = 1.5


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory available to new processes (Linux ``MemAvailable``), None where unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def peak_bytes(records: Iterable[Record]) -> int | None:
    """The largest memory a compile-only worker of these records reached, None where none says."""
    peaks = [
        int(r.machine["worker_peak_rss_bytes"])
        for r in records
        if r.target.mode_used == "compile" and isinstance(r.machine.get("worker_peak_rss_bytes"), int | float)
    ]
    return max(peaks) if peaks else None


def cores_per_worker(records: Iterable[Record]) -> float | None:
    """The most cores a compile-only worker of these records kept busy when it ran alone (its CPU
    time over the variant's wall time, at least 1; ``machine.compile_jobs`` 1: a worker sharing the
    cores shows its share, not what it wants), None where none says."""
    used = [
        float(r.machine["worker_cpu_s"]) / r.duration_s
        for r in records
        if r.target.mode_used == "compile"
        and r.machine.get("compile_jobs") == 1
        and isinstance(r.machine.get("worker_cpu_s"), int | float)
        and r.duration_s > 0
    ]
    return max(1.0, max(used)) if used else None


def default_jobs(
    n_variants: int, peak: int | None, cpus: int, memory: int | None, per_worker: float | None = None
) -> int:
    """Concurrent compile-only workers: one per ``per_worker`` cores (:data:`UNKNOWN_CORES_PER_WORKER`
    without a record), per ``peak * HEADROOM`` of ``memory`` (:data:`UNKNOWN_PEAK_BYTES` without a
    peak; no memory limit where the memory is unknown) and per variant; at least one."""
    by_cores = int(cpus // (per_worker or UNKNOWN_CORES_PER_WORKER))
    by_memory = by_cores if memory is None else int(memory // ((peak or UNKNOWN_PEAK_BYTES) * HEADROOM))
    return max(1, min(by_cores, by_memory, n_variants))


def expected_seconds(records: Iterable[Record], ids: Iterable[str]) -> dict[str, float]:
    """Variant id -> the wall time of its latest record (any status), for the ids that have one."""
    last = {r.variant.id: r.duration_s for r in records}
    return {i: float(last[i]) for i in ids if i in last}


def describe(jobs: int, peak: int | None, cpus: int, memory: int | None, per_worker: float | None = None) -> str:
    """Why ``jobs``: the numbers it came from, for the sweep's first line."""
    per = f"{peak / GiB:.2g} GiB peak per compile (recorded)" if peak else "no recorded compile peak"
    busy = (
        f"{per_worker:.2g} cores busy per compile (recorded)"
        if per_worker
        else f"{UNKNOWN_CORES_PER_WORKER:.2g} cores per compile assumed"
    )
    mem = f"{memory / GiB:.0f} GiB available" if memory else "memory unknown"
    return f"{jobs} compile-only variants at once ({cpus} cores, {busy}, {mem}, {per})"
