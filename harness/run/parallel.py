"""Compile-only variants side by side (``sweep --jobs N``): how many at once, and how long a sweep takes.

A compile-only variant times nothing, so several can share the machine; a measured variant always
runs alone (:mod:`harness.run.runner` runs those one after another, after the compile-only ones).
How many at once by default (:func:`default_jobs`): as many as the cores allow, and as the memory
allows at the largest peak a compile-only worker of this sweep reached before (the records'
``machine.worker_peak_rss_bytes``), or :data:`UNKNOWN_PEAK_BYTES` per worker when no record says.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from harness.results.record import Record

GiB = 2**30
UNKNOWN_PEAK_BYTES = 6 * GiB  # a full-size compile-only worker's peak is 2-5 GiB; more than that is safe
HEADROOM = 1.25  # memory per worker: its recorded peak times this


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def peak_bytes(records: Iterable[Record]) -> int | None:
    """The largest memory a compile-only worker of these records reached, None where none says."""
    peaks = [
        int(peak)
        for r in records
        if r.target.mode_used == "compile" and isinstance(peak := r.machine.worker_peak_rss_bytes, int | float)
    ]
    return max(peaks) if peaks else None


def default_jobs(n_variants: int, peak: int | None, cpus: int, memory: int | None) -> int:
    """Concurrent compile-only workers: at most one per core, per ``peak * HEADROOM`` of ``memory``
    (:data:`UNKNOWN_PEAK_BYTES` without a peak; no memory limit where the memory is unknown) and per
    variant; at least one."""
    by_memory = cpus if memory is None else int(memory // ((peak or UNKNOWN_PEAK_BYTES) * HEADROOM))
    return max(1, min(cpus, by_memory, n_variants))


def expected_seconds(records: Iterable[Record], ids: Iterable[str]) -> dict[str, float]:
    """Variant id -> the wall time of its latest record (any status), for the ids that have one."""
    last = {r.variant.id: r.duration_s for r in records}
    return {i: float(last[i]) for i in ids if i in last}


def describe(jobs: int, peak: int | None, cpus: int, memory: int | None) -> str:
    """Why ``jobs``: the numbers it came from, for the sweep's first line."""
    per = f"{peak / GiB:.2g} GiB peak per compile (recorded)" if peak else "no recorded compile peak"
    mem = f"{memory / GiB:.0f} GiB available" if memory else "memory unknown"
    return f"{jobs} compile-only variants at once ({cpus} cores, {mem}, {per})"
