"""Change points in a noisy series: E-divisive means with a permutation test.

The method is Matteson & James, "A Nonparametric Approach for Multiple Change Point Analysis of
Multivariate Data", JASA 109(505), 2014 (E-divisive, the energy statistic with exponent 1), as
MongoDB runs it over its nightly performance results (Daly et al., "Change Point Detection in
Software Performance Testing", ICPE 2020; the `signal-processing-algorithms` package) and as
Apache Otava (formerly DataStax's Hunter; Fleming et al., ICPE 2023) does:

* a segment ``X[0:n]`` split at ``t`` into ``A = X[:t]`` and ``B = X[t:]`` scores
  ``Q(t) = t (n - t) / n * (2 E|a - b| - E|a - a'| - E|b - b'|)``: the energy distance between the
  two sides, weighted so that a split near an end needs more evidence; no assumption on the noise's
  shape, and a few outliers move it little;
* the best split of every current segment is found, the largest taken, and its significance
  judged by a permutation test: the values are shuffled within each current segment
  ``permutations`` times (seeded) and the largest score recomputed each time; ``p = (1 + #{shuffled
  >= observed}) / (1 + permutations)``. Below ``alpha`` the split is kept and the search goes on
  in the pieces; otherwise it stops;
* splits leave at least ``min_size`` values on each side (the within-side terms need 2).

Values are run medians on a log scale (a change is a ratio), one per run: runs are the unit, so
the calls' dependence within a run does not count as evidence. What it finds on measured A/A
histories with injected shifts: ``benchmarks/results/changepoints-2026-11-29.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.05
PERMUTATIONS = 199  # p in steps of 1/200
MIN_SIZE = 3  # values on each side of a change point


@dataclass(frozen=True)
class ChangePoint:
    """The series changes between ``index - 1`` and ``index``; its permutation p-value and score."""

    index: int
    p_value: float
    score: float


def _scores(x: np.ndarray, min_size: int) -> np.ndarray:
    """``Q(t)`` for every split ``t`` of ``x`` (``-inf`` where a side would be under ``min_size``)."""
    n = x.size
    out = np.full(n + 1, -np.inf)
    if n < 2 * min_size:
        return out
    d = np.abs(x[:, None] - x[None, :])
    upper = np.triu(d, 1)
    within_a = np.concatenate([[0.0], np.cumsum(upper.sum(axis=0))])  # sum over i < k < t of d[i, k]
    rows = np.concatenate([[0.0], np.cumsum(d.sum(axis=1))])  # sum over i < t, all j of d[i, j]
    total = upper.sum()
    t = np.arange(min_size, n - min_size + 1)
    a, b = t, n - t
    cross = rows[t] - 2.0 * within_a[t]
    within_b = total - within_a[t] - cross
    e = 2.0 * cross / (a * b) - within_a[t] / (a * (a - 1) / 2) - within_b / (b * (b - 1) / 2)
    out[t] = a * b / n * e
    return out


def _best(x: np.ndarray, bounds: Sequence[int], min_size: int) -> tuple[float, int]:
    """The largest score over the segments ``bounds[i]:bounds[i + 1]`` and its split (absolute index)."""
    best, where = -np.inf, -1
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        q = _scores(x[lo:hi], min_size)
        t = int(np.argmax(q))
        if q[t] > best:
            best, where = float(q[t]), lo + t
    return best, where


def e_divisive(
    values: Sequence[float],
    *,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
    min_size: int = MIN_SIZE,
    seed: int = 0,
) -> list[ChangePoint]:
    """The significant change points of ``values`` in the order found (see the module docstring)."""
    if not 0.0 < alpha < 1.0 or permutations < 1 or min_size < 2:
        raise ValueError(
            f"e_divisive: alpha in (0, 1), permutations >= 1, min_size >= 2; got {alpha}, {permutations}, {min_size}"
        )
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or not np.all(np.isfinite(x)):
        raise ValueError("e_divisive: values must be a finite 1-D series")
    rng = np.random.default_rng(seed)
    bounds = [0, x.size]
    found: list[ChangePoint] = []
    while True:
        observed, where = _best(x, bounds, min_size)
        if where < 0:
            return found
        exceed = 0
        for _ in range(permutations):
            shuffled = x.copy()
            for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
                shuffled[lo:hi] = rng.permutation(shuffled[lo:hi])
            exceed += _best(shuffled, bounds, min_size)[0] >= observed
        p = (1 + exceed) / (1 + permutations)
        if p >= alpha:
            return found
        found.append(ChangePoint(where, p, observed))
        bounds = sorted([*bounds, where])


def too_short(n: int, min_size: int = MIN_SIZE) -> bool:
    """Whether a series of ``n`` values is too short to hold any change point."""
    return n < 2 * min_size


__all__ = ["ALPHA", "MIN_SIZE", "PERMUTATIONS", "ChangePoint", "e_divisive", "too_short"]
