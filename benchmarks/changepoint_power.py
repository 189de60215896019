"""Change-point detection on measured A/A histories with shifts injected: detection rate, false alarms, delay.

    python benchmarks/changepoint_power.py HISTORY MANIFEST_NAME [--shifts 0.05 0.1 0.2 0.5] [--window 10]

HISTORY holds runs of the same code (``harness history --append`` of repeated sweeps), so every
timing series in it (one median per run) is A/A: the machine's own drift between runs, nothing else.
For each timing series, each shift and each injection run ``k`` (from ``2 * MIN_SIZE`` to the last
run that leaves ``--window`` runs after it, every ``--step``), the series' medians from run ``k`` on
are multiplied by ``1 + shift`` and analysed as the nightly would, one night at a time: after each
of the next ``--window`` runs, :func:`harness.results.history.analyse` on the runs so far. The
shift is *detected* the first night a change point lies within ``--tolerance`` runs of ``k``; the
*delay* is the number of shifted runs seen by then; a change point elsewhere is a *false alarm*.
The A/A line analyses every prefix of the unshifted series the same way (each prefix is one night).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from harness.results import changepoint, history


def nightly(s: history.Series, k: int, window: int, tolerance: int) -> tuple[int | None, int]:
    """(delay in shifted runs or None, false alarms) of one shift injected at run ``k``, analysing the
    runs one night at a time up to ``window`` runs after it."""
    false = 0
    for t in range(k + 1, min(len(s.points), k + window) + 1):
        at = [c.after for c in history.analyse(replace(s, points=s.points[:t])).changes]
        near = [x for x in at if abs(x - k) <= tolerance]
        false = max(false, len(at) - len(near))
        if near:
            return t - k, false
    return None, false


def shifted(s: history.Series, k: int, shift: float) -> history.Series:
    pts = tuple(replace(p, value=p.value * (1 + shift)) if i >= k else p for i, p in enumerate(s.points))
    return replace(s, points=pts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("history", type=Path)
    parser.add_argument("manifest")
    parser.add_argument("--shifts", type=float, nargs="+", default=[0.05, 0.10, 0.20, 0.50])
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--tolerance", type=int, default=2)
    args = parser.parse_args()
    runs = history.load(args.history, args.manifest)
    timings = [s for s in history.series(runs) if s.rule == "timing"]
    busy = [
        float(e.measured["load"]["others_busy_cores"])
        for r in runs
        for rec in r.records
        for e in rec.stages.values()
        if e.measured and (e.measured.get("load") or {}).get("others_busy_cores") is not None
    ]
    print(f"{len(runs)} runs, {len(timings)} timing series: " + ", ".join(s.key for s in timings))
    if busy:
        print(f"others' busy cores while timing (of 2): {min(busy):.2f}-{max(busy):.2f}, median {np.median(busy):.2f}")
    nights = [
        len(history.analyse(replace(s, points=s.points[:t])).changes)
        for s in timings
        for t in range(2 * changepoint.MIN_SIZE, len(s.points) + 1)
    ]
    full = [len(history.analyse(s).changes) for s in timings]
    print(
        f"A/A (no shift): change points over the whole history per series: {full}; nights (prefixes of a series, "
        f"as the nightly analyses them) reporting any: {sum(n > 0 for n in nights)} of {len(nights)}"
    )
    print("| shift | trials | detected | false alarms (trials with one) | delay in runs: median | max |")
    print("|---:|---:|---:|---:|---:|---:|")
    for shift in args.shifts:
        delays: list[int] = []
        missed = false = 0
        for s in timings:
            last = len(s.points) - args.window
            for k in range(2 * changepoint.MIN_SIZE, last + 1, args.step):
                delay, fa = nightly(shifted(s, k, shift), k, args.window, args.tolerance)
                false += fa > 0
                if delay is None:
                    missed += 1
                else:
                    delays.append(delay)
        trials = len(delays) + missed
        med = f"{np.median(delays):.0f}" if delays else "-"
        worst = f"{max(delays)}" if delays else "-"
        print(
            f"| {shift:.0%} | {trials} | {len(delays)} ({len(delays) / trials:.0%}) | {false} ({false / trials:.0%}) "
            f"| {med} | {worst} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
