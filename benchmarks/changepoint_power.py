"""Change-point detection on measured A/A histories with shifts injected: detection, false alarms, delay.

    python benchmarks/changepoint_power.py HISTORY MANIFEST_NAME [--min-magnitude M] [--folds]
        [--shifts 0.05 0.1 0.2 0.5] [--window 10] [--step 1] [--tolerance 2]

HISTORY holds runs of the same code (``harness history --append`` of repeated sweeps), so every
timing series in it is A/A: the machine's own drift between runs, nothing else. Each night the
nightly analyses the runs so far (:func:`harness.results.history.analyse`); so does this script:

* **A/A false alarm**: a night (a prefix of an unshifted series, ``2 * MIN_SIZE`` runs or more)
  that reports any change point. Counted per night and per series (a series with any such night).
* **Trial**: a shift ``s`` injected at run ``k`` (every run from ``2 * MIN_SIZE`` to the last that
  leaves ``--window`` runs after it, every ``--step``): every call of runs ``k`` on is ``1 + s``
  times slower; then the nights ``k + 1 .. k + window``. **Detected**: the first night a change point
  lies within ``--tolerance`` runs of ``k``; **delay**: the shifted runs seen by then.
  **Misplaced** (a shifted trial's false alarm): a change point more than ``--tolerance`` runs from
  ``k`` on any of those nights up to the detection; a bisect between the runs around it would
  search the wrong commits.

``--folds`` chooses ``min_magnitude`` without scoring it on the data it is reported on: for each
timing series, the smallest of ``--grid`` whose nights and trials on the *other* series meet the
rule (A/A nights with a change point at most ``--aa-limit``, and in every shift's row, trials with
a misplaced change point at most ``--misplaced-limit``), then the held-out series' rows at it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from harness.results import changepoint, history


@dataclass(frozen=True)
class Row:
    shift: float
    trials: int
    detected: int
    misplaced: int
    delays: tuple[int, ...]


@dataclass(frozen=True)
class Score:
    aa_nights: int  # nights reporting a change point in the unshifted series
    nights: int
    rows: tuple[Row, ...]


def _cuts(s: history.Series, t: int, m: float) -> list[int]:
    """Where the night that has seen runs ``0 .. t - 1`` reports change points (point indices)."""
    a = history.analyse(replace(s, points=s.points[:t]), min_magnitude=m)
    first = {p.run: i for i, p in enumerate(s.points)}
    return [first[c.after] for c in a.changes]


def shifted(s: history.Series, k: int, shift: float) -> history.Series:
    f = 1 + shift
    pts = tuple(replace(p, value=p.value * f, low=p.low * f) if i >= k else p for i, p in enumerate(s.points))
    return replace(s, points=pts)


def trial(s: history.Series, k: int, m: float, window: int, tolerance: int) -> tuple[int | None, bool]:
    """(delay in shifted runs or None, misplaced) of one shift injected at point ``k``."""
    misplaced = False
    for t in range(k + 1, min(len(s.points), k + window) + 1):
        at = _cuts(s, t, m)
        misplaced |= any(abs(x - k) > tolerance for x in at)
        if any(abs(x - k) <= tolerance for x in at):
            return t - k, misplaced
    return None, misplaced


def score(s: history.Series, m: float, args: argparse.Namespace) -> Score:
    first = 2 * changepoint.MIN_SIZE
    nights = [bool(_cuts(s, t, m)) for t in range(first, len(s.points) + 1)]
    rows = []
    for shift in args.shifts:
        outcomes = [
            trial(shifted(s, k, shift), k, m, args.window, args.tolerance)
            for k in range(first, len(s.points) - args.window + 1, args.step)
        ]
        delays = tuple(d for d, _ in outcomes if d is not None)
        rows.append(Row(shift, len(outcomes), len(delays), sum(mis for _, mis in outcomes), delays))
    return Score(sum(nights), len(nights), tuple(rows))


def pooled(scores: Sequence[Score]) -> Score:
    rows = tuple(
        Row(
            rs[0].shift,
            sum(r.trials for r in rs),
            sum(r.detected for r in rs),
            sum(r.misplaced for r in rs),
            tuple(d for r in rs for d in r.delays),
        )
        for rs in zip(*(s.rows for s in scores), strict=True)
    )
    return Score(sum(s.aa_nights for s in scores), sum(s.nights for s in scores), rows)


def meets(sc: Score, args: argparse.Namespace) -> bool:
    return sc.aa_nights <= args.aa_limit * sc.nights and all(
        r.misplaced <= args.misplaced_limit * r.trials for r in sc.rows
    )


def table(sc: Score, series_aa: str) -> str:
    pct = lambda a, b: f"{a} ({a / b:.0%})" if b else "-"  # noqa: E731
    lines = [
        f"A/A: nights reporting a change point {pct(sc.aa_nights, sc.nights)}; series with any: {series_aa}",
        "| shift | trials | detected within the window | misplaced (false alarm) | delay in runs: median | max |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sc.rows:
        med = f"{np.median(r.delays):.0f}" if r.delays else "-"
        worst = f"{max(r.delays)}" if r.delays else "-"
        found, wrong = pct(r.detected, r.trials), pct(r.misplaced, r.trials)
        lines.append(f"| {r.shift:.0%} | {r.trials} | {found} | {wrong} | {med} | {worst} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("history", type=Path)
    parser.add_argument("manifest")
    parser.add_argument("--shifts", type=float, nargs="+", default=[0.05, 0.10, 0.20, 0.50])
    parser.add_argument("--window", type=int, default=10)
    parser.add_argument("--step", type=int, default=1)
    parser.add_argument("--tolerance", type=int, default=2)
    parser.add_argument("--min-magnitude", type=float, default=changepoint.MIN_MAGNITUDE)
    parser.add_argument("--folds", action="store_true", help="choose min_magnitude on the other series (see above)")
    parser.add_argument("--grid", type=float, nargs="+", default=[0.05, 0.10, 0.15, 0.20, 0.25, 0.30])
    parser.add_argument("--aa-limit", type=float, default=0.025)
    parser.add_argument("--misplaced-limit", type=float, default=0.10)
    args = parser.parse_args()
    runs = history.load(args.history, args.manifest)
    timings = [s for s in history.series(runs) if s.rule == "timing"]
    print(f"{len(runs)} runs, {len(timings)} timing series: " + ", ".join(s.key for s in timings))
    print(
        f"alpha {changepoint.ALPHA}, min_size {changepoint.MIN_SIZE}, window {args.window}, tolerance {args.tolerance}"
    )
    if not args.folds:
        scores = [score(s, args.min_magnitude, args) for s in timings]
        for s, sc in zip(timings, scores, strict=True):
            print(f"\n{s.key} at min_magnitude {args.min_magnitude}:\n" + table(sc, str(int(sc.aa_nights > 0))))
        print(f"\nall {len(timings)} series:\n" + table(pooled(scores), str(sum(sc.aa_nights > 0 for sc in scores))))
        return
    grid = {m: [score(s, m, args) for s in timings] for m in sorted(args.grid)}
    held: list[Score] = []
    for i, s in enumerate(timings):
        others = [j for j in range(len(timings)) if j != i]
        chosen = next((m for m in grid if meets(pooled([grid[m][j] for j in others]), args)), None)
        print(f"\nheld out {s.key}: chosen on the other series: min_magnitude {chosen}")
        for m in grid:
            o = pooled([grid[m][j] for j in others])
            mis = ", ".join(f"{r.misplaced}/{r.trials}" for r in o.rows)
            print(f"  choosing: {m:.2f}: A/A nights {o.aa_nights}/{o.nights}; misplaced {mis}; meets {meets(o, args)}")
        if chosen is not None:
            held.append(grid[chosen][i])
            print(table(grid[chosen][i], str(int(grid[chosen][i].aa_nights > 0))))
    if held:
        print(
            f"\nheld-out folds pooled ({len(held)} series):\n"
            + table(pooled(held), str(sum(h.aa_nights > 0 for h in held)))
        )


if __name__ == "__main__":
    main()
