"""How far predictions agree with what they predict: rank correlation and the typical log ratio.

Pure functions of paired values, below everything that scores a prediction (the timeline's
agreement with the compiler's estimates, the CPU calibration check, the search's analytic order),
so that none of them imports the results' statistics to compare two lists. A leaf: numpy only
(scipy inside :func:`spearman`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Values = Sequence[float] | np.ndarray


def finite_array(values: Values) -> np.ndarray:
    """``values`` as a float array; ValueError unless it is 1-D, non-empty and finite."""
    xs = np.asarray(values, dtype=float)
    if xs.ndim != 1 or xs.size == 0:
        raise ValueError(f"expected a non-empty 1-D set of values, got shape {xs.shape}")
    if not np.all(np.isfinite(xs)):
        raise ValueError("values contain NaN or infinity")
    return xs


def median(values: Values) -> float:
    return float(np.median(finite_array(values)))


def spearman(xs: Values, ys: Values) -> float:
    """Spearman's rank correlation of paired values (ties share their mean rank); nan below 3 pairs
    or when either side is constant."""
    from scipy import stats as st

    x, y = finite_array(xs), finite_array(ys)
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} x values but {len(y)} y values")
    if len(x) < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return math.nan
    return float(st.spearmanr(x, y).statistic)


def median_abs_log_ratio(predicted: Values, measured: Values) -> float:
    """``median |ln(predicted / measured)|``: how far off a typical prediction is, either way
    (``ln 1.5`` = 0.405: within 1.5x of the measurement)."""
    p, m = finite_array(predicted), finite_array(measured)
    if len(p) != len(m) or not len(p):
        raise ValueError(f"median_abs_log_ratio: needs equally many values, got {len(p)} and {len(m)}")
    if np.any(p <= 0) or np.any(m <= 0):
        raise ValueError("median_abs_log_ratio: times must be positive")
    return float(np.median(np.abs(np.log(p / m))))
