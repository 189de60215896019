"""Change points in a noisy series: E-divisive means, each split tested as Hunter (Otava) tests it.

Candidates come from E-divisive means (Matteson & James, JASA 109(505), 2014; energy statistic with
exponent 1); each is judged as Apache Otava (formerly Hunter; Fleming et al., ICPE 2023, section 4)
judges it, by Student's t-test between its two segments instead of a seeded permutation test, plus a
minimum relative magnitude (the whole method and why: docs/gates.md, "History and change points"):

* a segment ``X[0:n]`` split at ``t`` into ``A = X[:t]`` and ``B = X[t:]`` scores
  ``Q(t) = t (n - t) / n * (2 E|a - b| - E|a - a'| - E|b - b'|)``; the best split of every current
  segment is found and the largest taken;
* **split**: kept while the t-test gives ``p <= 10 * alpha``, and the search goes on in the pieces;
* **merge**: bottom-up, each change point re-tested against its neighbours' segments; the weakest
  (largest ``p``) dropped while ``p >= alpha``, then the smallest magnitude while under
  ``min_magnitude``, its neighbours re-tested;
* the magnitude of a split is ``max(|r - 1|, |1/r - 1|)``, ``r`` the ratio of the segments' medians
  (Hunter uses means; a median is not moved by one slow run at a segment's edge);
* splits leave at least ``min_size`` values on each side.

``ALPHA`` is Otava's default ``max_pvalue``; ``MIN_MAGNITUDE`` was chosen on held-out A/A runs
(benchmarks/results/changepoints-2026-11-29.md). The values handed in are logs (a change is a ratio).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

ALPHA = 0.001  # Otava's max_pvalue
MIN_MAGNITUDE = 0.25  # the smallest relative move reported (see the module docstring)
MIN_SIZE = 3  # values on each side of a change point
SPLIT_FACTOR = 10.0  # the split phase keeps candidates up to SPLIT_FACTOR * alpha (as Hunter does)


@dataclass(frozen=True)
class ChangePoint:
    """The series changes between ``index - 1`` and ``index``: Student's t p-value between the
    segments on either side (bounded by the neighbouring change points), and the relative magnitude
    of the move between their medians."""

    index: int
    p_value: float
    magnitude: float


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


def t_test(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of Student's two-sample t-test (pooled variance); two constant sides: 0 when
    they differ, 1 when equal."""
    if a.size < 2 or b.size < 2:
        return 1.0
    if np.ptp(a) == 0.0 and np.ptp(b) == 0.0:
        return 0.0 if a[0] != b[0] else 1.0
    from scipy import stats as sps  # loaded only where a history is analysed

    return float(sps.ttest_ind(a, b).pvalue)


def magnitude(a: np.ndarray, b: np.ndarray) -> float:
    """``max(|r - 1|, |1/r - 1|)``, ``r`` the ratio of the medians of ``exp(a)`` and ``exp(b)``."""
    r = float(np.exp(np.median(b) - np.median(a)))
    return max(abs(r - 1.0), abs(1.0 / r - 1.0))


def _split(x: np.ndarray, alpha: float, min_size: int) -> list[int]:
    bounds = [0, x.size]
    while True:
        best, where, lo, hi = -np.inf, -1, 0, 0
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            q = _scores(x[a:b], min_size)
            t = int(np.argmax(q))
            if q[t] > best:
                best, where, lo, hi = float(q[t]), a + t, a, b
        if where < 0 or t_test(x[lo:where], x[where:hi]) > SPLIT_FACTOR * alpha:
            return sorted(bounds[1:-1])
        bounds = sorted([*bounds, where])


def _judge(x: np.ndarray, cuts: Sequence[int]) -> list[ChangePoint]:
    ends = [0, *cuts, x.size]
    return [
        ChangePoint(c, t_test(x[ends[i] : c], x[c : ends[i + 2]]), magnitude(x[ends[i] : c], x[c : ends[i + 2]]))
        for i, c in enumerate(cuts)
    ]


def e_divisive(
    values: Sequence[float],
    *,
    alpha: float = ALPHA,
    min_magnitude: float = MIN_MAGNITUDE,
    min_size: int = MIN_SIZE,
) -> list[ChangePoint]:
    """The change points of ``values`` (logs), in order (see the module docstring)."""
    if not 0.0 < alpha < 1.0 or min_magnitude < 0.0 or min_size < 2:
        raise ValueError(
            f"e_divisive: alpha in (0, 1), min_magnitude >= 0, min_size >= 2; got {alpha}, {min_magnitude}, {min_size}"
        )
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or not np.all(np.isfinite(x)):
        raise ValueError("e_divisive: values must be a finite 1-D series")
    cuts = _split(x, alpha, min_size)
    while cuts:
        points = _judge(x, cuts)
        weakest = max(points, key=lambda c: c.p_value)
        if weakest.p_value < alpha:
            weakest = min(points, key=lambda c: c.magnitude)
            if weakest.magnitude >= min_magnitude:
                return points
        cuts.remove(weakest.index)
    return []


def too_short(n: int, min_size: int = MIN_SIZE) -> bool:
    """Whether a series of ``n`` values is too short to hold any change point."""
    return n < 2 * min_size
