"""All the statistics that the worker, reports and gates use, in one place.

A worker summarises its timed samples with :func:`summarize` (stored in the record); every comparison
works from the raw samples: the *ratio* is ``median(head) / median(base)`` (> 1 is slower), its
uncertainty a moving-block bootstrap interval, its *significance* a two-sided Mann-Whitney U test on
the means of pairs of consecutive calls (:func:`batch_means`: calls on a shared machine are not
independent; docs/gates.md). A timing regresses only if the ratio is beyond the manifest's threshold
*and* the difference is significant at ``alpha``: significance alone fires on tiny real shifts, the
ratio alone on noise. With few samples the test cannot reach ``alpha`` at all, so every verdict says
whether it *could* have fired (:func:`min_p_value`). Deterministic values have no noise: they are
compared against a relative tolerance (:func:`compare_values`). All metrics here are lower-is-better.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.agreement import finite_array, median
from harness.vocabulary import Change

IMPROVED, REGRESSED, UNCHANGED, NOISE = Change.IMPROVED, Change.REGRESSED, Change.UNCHANGED, Change.NOISE

Samples = Sequence[float] | np.ndarray

DEFAULT_THRESHOLD = 1.10
DEFAULT_ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95


# --------------------------------------------------------------------------- summaries


@dataclass(frozen=True)
class Spread:
    """Location and spread of one sample set (quartiles by the inclusive method)."""

    n: int
    median: float
    q1: float
    q3: float
    min: float
    max: float

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1


def spread(samples: Samples) -> Spread:
    xs = finite_array(samples)
    q1, med, q3 = np.percentile(xs, [25, 50, 75])  # linear interpolation == "inclusive" quartiles
    return Spread(int(xs.size), float(med), float(q1), float(q3), float(xs.min()), float(xs.max()))


def summarize(samples: Samples) -> dict[str, Any]:
    """A record's summary of timed samples (seconds): n, median, min, max, mean, stdev (n - 1) and
    inter-quartile range (inclusive quartiles, as :func:`spread`); all None without samples."""
    if len(samples) == 0:
        return {"n": 0, "median": None, "min": None, "max": None, "mean": None, "stdev": None, "iqr": None}
    xs = finite_array(samples)
    s = spread(xs)
    return {
        "n": s.n,
        "median": s.median,
        "min": s.min,
        "max": s.max,
        "mean": float(np.mean(xs)),
        "stdev": float(np.std(xs, ddof=1)) if xs.size > 1 else 0.0,
        "iqr": s.iqr,
    }


def ratio(base: float, head: float) -> float:
    """``head / base`` with the zero cases spelled out: 0/0 is 1 (unchanged), x/0 is infinity."""
    if base == 0:
        return 1.0 if head == 0 else math.inf
    return head / base


# --------------------------------------------------------------------------- tests


def min_p_value(n_base: int, n_head: int) -> float:
    """The smallest two-sided p-value the exact Mann-Whitney test can give for these sizes.

    It is reached when the two sets do not overlap at all: ``2 / C(n + m, n)``. If it
    is above ``alpha``, no difference, however large, can be called significant.
    """
    if n_base < 1 or n_head < 1:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_base + n_head, n_base))


def min_samples(alpha: float = DEFAULT_ALPHA) -> int:
    """Fewest timed calls per side (equal sizes) for which the timing test (:func:`timing_p`, on
    batches of :data:`CALLS_PER_BATCH` calls) can reach ``alpha``."""
    n = 1
    while min_p_value(timing_units(n), timing_units(n)) >= alpha:
        n += 1
    return n


def mann_whitney_p(base: Samples, head: Samples) -> float:
    """Two-sided Mann-Whitney U p-value (exact for small tie-free sets, else normal approx.)."""
    b, h = finite_array(base), finite_array(head)
    if np.all(np.concatenate([b, h]) == b[0]):
        return 1.0  # every value identical: no evidence of any difference
    from scipy import stats as sps  # scipy loads only where samples are compared, not in every worker

    p = float(sps.mannwhitneyu(h, b, alternative="two-sided", method="auto").pvalue)
    return 1.0 if math.isnan(p) else p


def timing_p(base: Samples, head: Samples) -> float:
    """The timing test: :func:`mann_whitney_p` of the two sides' :func:`batch_means` of
    :data:`CALLS_PER_BATCH` consecutive calls each (batches, not calls, are the unit: see there)."""
    b, h = finite_array(base), finite_array(head)
    return mann_whitney_p(batch_means(b, timing_units(b.size)), batch_means(h, timing_units(h.size)))


def block_resample(
    xs: np.ndarray, rng: np.random.Generator, resamples: int, size: int | None = None, *, distinct: bool = False
) -> np.ndarray:
    """``resamples`` moving-block bootstrap resamples of ``xs`` (rows of ``size`` values, default
    ``xs.size``): blocks of :data:`CALLS_PER_BATCH` consecutive calls drawn and joined, so the
    resampled runs keep the dependence of neighbouring calls (Kunsch, "The jackknife and the
    bootstrap for general stationary observations", Ann. Statist. 17(3), 1989). ``distinct``: no
    block twice in a row (where the run has enough), as subsampling does, so that resampled batch
    means do not tie and an exact rank test stays exact."""
    size = xs.size if size is None else size
    block = min(CALLS_PER_BATCH, xs.size)
    n_starts, k = xs.size - block + 1, -(-size // block)
    if distinct and k <= n_starts:
        starts = np.argsort(rng.random((resamples, n_starts)), axis=1)[:, :k]
    else:
        starts = rng.integers(0, n_starts, (resamples, k))
    return xs[(starts[:, :, None] + np.arange(block)).reshape(resamples, -1)[:, :size]]


def bootstrap_ratio_ci(
    base: Samples,
    head: Samples,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile interval of ``median(head) / median(base)``, each side resampled by
    :func:`block_resample` (seeded, so a report is reproducible)."""
    b, h = finite_array(base), finite_array(head)
    rng = np.random.default_rng(seed)
    mb = np.median(block_resample(b, rng, resamples), axis=1)
    mh = np.median(block_resample(h, rng, resamples), axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(mb == 0, np.where(mh == 0, 1.0, np.inf), mh / np.where(mb == 0, 1.0, mb))
    tail = (1.0 - confidence) / 2 * 100
    lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def batch_means(samples: Samples, batches: int) -> np.ndarray:
    """The means of ``batches`` contiguous runs of consecutive calls (sizes differ by at most one).

    Consecutive calls on a shared machine are not independent: another job's burst slows several in
    a row and the machine drifts within a run, so a test that counts every call as one observation
    overstates its evidence. Means of contiguous batches are nearly independent and nearly normal
    when the batches are longer than the dependence: the method of (non-overlapping) batch means,
    Schmeiser, "Batch size effects in the analysis of simulation output", Oper. Res. 30(3), 1982;
    Carlstein, "The use of subseries values for estimating the variance of a general statistic
    from a stationary sequence", Ann. Statist. 14(3), 1986. A/A flag rates with and without batches,
    on traces of a loaded 2-core machine: benchmarks/results/aa-intervals-2026-11-29.md."""
    xs = finite_array(samples)
    k = max(1, min(int(batches), xs.size))
    return np.array([b.mean() for b in np.array_split(xs, k)])


DIFF_BATCHES = 4  # a diff's unit: a quarter of each side's traced calls (a sweep traces 8: pairs)
CALLS_PER_BATCH = 2  # a timing gate's unit: two consecutive calls (10 repeats: 5 batches)


def timing_units(n: int) -> int:
    """How many batches of :data:`CALLS_PER_BATCH` consecutive calls ``n`` timed calls make."""
    return max(1, n // CALLS_PER_BATCH)


def mean_diff_ci(
    base: Samples, head: Samples, *, confidence: float = CONFIDENCE, batches: int = DIFF_BATCHES
) -> tuple[float, float]:
    """Interval of ``mean(head) - mean(base)`` from each side's :func:`batch_means` (contiguous
    batches of consecutive calls, the unit), Welch's t with Satterthwaite's degrees of freedom:
    the uncertainty of a time delta from per-step samples (a step's time by scope adds up, so
    means, unlike medians, keep the scopes summing to the step). It holds the calls' dependence and
    drift within each side's run; the drift of the machine *between* the two runs is not in it."""
    from scipy import stats as sps

    b, h = batch_means(base, batches), batch_means(head, batches)
    diff = float(h.mean() - b.mean())
    vb = b.var(ddof=1) / b.size if b.size > 1 else 0.0
    vh = h.var(ddof=1) / h.size if h.size > 1 else 0.0
    if vb + vh == 0.0:
        return diff, diff  # no spread on either side: the difference is exact
    dof = (vb + vh) ** 2 / (
        (vb**2 / (b.size - 1) if b.size > 1 else 0.0) + (vh**2 / (h.size - 1) if h.size > 1 else 0.0)
    )
    half = float(sps.t.ppf(0.5 + confidence / 2, dof)) * math.sqrt(vb + vh)
    return diff - half, diff + half


# --------------------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """The outcome of comparing a baseline with a new measurement of one metric.

    For sample sets ``p_value``, ``ci`` and ``can_fire`` are set; for single
    deterministic values they are None and ``tolerance`` is set instead.
    """

    verdict: str
    ratio: float
    base: float  # median for sample sets
    head: float
    n_base: int = 1
    n_head: int = 1
    threshold: float | None = None
    alpha: float | None = None
    p_value: float | None = None
    ci: tuple[float, float] | None = None
    can_fire: bool | None = None
    tolerance: float | None = None
    round_ratios: tuple[float, ...] | None = None  # head/base median per interleaved round

    @property
    def delta(self) -> float:
        return self.head - self.base

    @property
    def significant(self) -> bool:
        return self.p_value is not None and self.alpha is not None and self.p_value < self.alpha

    def describe(self) -> str:
        """How the verdict was reached, in one phrase (for gate lines and report cells)."""
        if self.tolerance is not None:
            return "must match exactly" if self.tolerance == 0 else f"tolerance ±{self.tolerance:.2%}"
        assert self.p_value is not None and self.ci is not None and self.alpha is not None
        assert self.threshold is not None
        test = f"Mann-Whitney (pairs of calls) p={_p(self.p_value)} {'<' if self.significant else '>='} {self.alpha:g}"
        text = (
            f"{test}, {CONFIDENCE:.0%} CI of ratio [{self.ci[0]:.3f}, {self.ci[1]:.3f}], "
            f"n={self.n_base}/{self.n_head}, threshold {self.threshold:.2f}x"
        )
        if self.round_ratios:
            agree = all(r > self.threshold for r in self.round_ratios) or all(
                r < 1 / self.threshold for r in self.round_ratios
            )
            text += (
                f", per-round ratios {', '.join(f'{r:.2f}' for r in self.round_ratios)}"
                f"{'' if agree else ' (not consistent)'}"
            )
        if not self.can_fire:
            floor = min_p_value(timing_units(self.n_base), timing_units(self.n_head))
            text += f"; too few samples: p cannot go below {_p(floor)}, need >= {min_samples(self.alpha)} per side"
        return text


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-4 else f"{p:.1e}"


def regressed(r: float | np.ndarray, p: float | np.ndarray, threshold: float, alpha: float) -> Any:
    """The timing gate's rule: a median ratio above ``threshold`` and a Mann-Whitney p below ``alpha``
    (elementwise for arrays)."""
    return (r > threshold) & (p < alpha)


def compare_samples(
    base: Samples,
    head: Samples,
    threshold: float = DEFAULT_THRESHOLD,
    alpha: float = DEFAULT_ALPHA,
    *,
    rounds: Sequence[tuple[Samples, Samples]] = (),
    seed: int = 0,
) -> Verdict:
    """Verdict on two sets of timing samples (lower is better).

    * regressed: ratio > threshold and significant;  improved: ratio < 1/threshold and significant;
    * noise: ratio beyond the threshold either way but not significant (or the test cannot fire);
    * unchanged: ratio within [1/threshold, threshold], significant or not.

    ``rounds`` are the (base, head) sample sets of interleaved rounds, when ``base`` and
    ``head`` pool them. Samples of one round share that moment's machine state, so the
    pooled test overstates the evidence; a regression (improvement) then also has to
    show in every round's median ratio, else it is noise.
    """
    if threshold < 1.0:
        raise ValueError(f"threshold is a slowdown factor >= 1, got {threshold}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    b, h = finite_array(base), finite_array(head)
    mb, mh = float(np.median(b)), float(np.median(h))
    r = ratio(mb, mh)
    p = timing_p(b, h)
    ci = bootstrap_ratio_ci(b, h, seed=seed)
    can_fire = min_p_value(timing_units(b.size), timing_units(h.size)) < alpha
    significant = p < alpha
    if regressed(r, p, threshold, alpha):
        verdict = REGRESSED
    elif r > threshold:
        verdict = NOISE
    elif r < 1.0 / threshold:
        verdict = IMPROVED if significant else NOISE
    else:
        verdict = UNCHANGED
    round_ratios = tuple(ratio(median(rb), median(rh)) for rb, rh in rounds) or None
    if round_ratios and verdict == REGRESSED and not all(x > threshold for x in round_ratios):
        verdict = NOISE
    if round_ratios and verdict == IMPROVED and not all(x < 1.0 / threshold for x in round_ratios):
        verdict = NOISE
    return Verdict(
        verdict, r, mb, mh, int(b.size), int(h.size), threshold, alpha, p, ci, can_fire, round_ratios=round_ratios
    )


def compare_values(base: float, head: float, tolerance: float = 0.0, better: str = "lower") -> Verdict:
    """Verdict on one deterministic value within a relative tolerance.

    regressed: head > base * (1 + tolerance); improved: head < base * (1 - tolerance);
    unchanged otherwise (the reverse where ``better`` is "higher"; where it is "", neither direction
    is better, as for a FLOP count: a change beyond the tolerance either way regresses, the program
    does other work). ``tolerance`` 0 means exact equality.
    """
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    base, head = float(base), float(head)
    slack = abs(base) * tolerance
    if head > base + slack:
        verdict = REGRESSED
    elif head < base - slack:
        verdict = IMPROVED
    else:
        verdict = UNCHANGED
    if better == "higher":
        verdict = {REGRESSED: IMPROVED, IMPROVED: REGRESSED}.get(verdict, verdict)
    elif better == "":
        verdict = UNCHANGED if verdict == UNCHANGED else REGRESSED
    return Verdict(verdict, ratio(base, head), base, head, tolerance=tolerance)


# --------------------------------------------------------------------------- sequential comparisons

SLOWER, FASTER, UNDECIDED = "slower", "faster", "undecided"


def timing_shift(base: Samples, head: Samples, alpha: float, min_ratio: float) -> str:
    """Whether ``head`` is :data:`SLOWER` or :data:`FASTER` than ``base``: a two-sided Mann-Whitney
    p below ``alpha`` and a median ratio beyond ``min_ratio`` either way; else :data:`UNDECIDED`.
    A search that looks at growing sample sets several times passes ``alpha`` already divided by
    the number of looks (Bonferroni), so its chance of one false call stays at most the total."""
    if min_ratio < 1.0:
        raise ValueError(f"min_ratio is a slowdown factor >= 1, got {min_ratio}")
    r = ratio(median(base), median(head))
    if timing_p(base, head) >= alpha:
        return UNDECIDED
    return SLOWER if r >= min_ratio else FASTER if r <= 1.0 / min_ratio else UNDECIDED


# --------------------------------------------------------------------------- the gate's error rates


@dataclass(frozen=True)
class ErrorRates:
    """How often the timing rule (:func:`regressed`) fires on resampled runs: on two runs of the same
    code (``false_alarm``) and with the head run slowed by ``slowdown`` (``power``)."""

    repeats: int
    threshold: float
    alpha: float
    slowdown: float
    false_alarm: float
    power: float
    trials: int


def gate_error_rates(
    runs: Sequence[Samples],
    repeats: Sequence[int],
    thresholds: Sequence[float],
    alphas: Sequence[float],
    slowdown: float,
    *,
    trials: int = 400,
    seed: int = 0,
) -> list[ErrorRates]:
    """The timing rule's false-alarm rate and power per (repeats, threshold, alpha), by resampling.

    Each trial draws a baseline run and a head run (two different measured runs when there are
    several, so the noise between runs counts; the same one otherwise), ``n`` calls from each in
    blocks of consecutive calls (:func:`block_resample`), and applies the rule (the test on
    batches, as :func:`timing_p`) to (base, head) for the false alarm and to
    (base, head * (1 + slowdown)) for the power. The p-value and ratio of a trial do not depend on
    the threshold or alpha, so every cell of the grid reads the same trials."""
    pools = [finite_array(r) for r in runs]
    if not pools:
        raise ValueError("gate_error_rates needs at least one run of samples")
    rng = np.random.default_rng(seed)
    out = []
    for n in repeats:
        pairs = [rng.choice(len(pools), 2, replace=False) if len(pools) > 1 else (0, 0) for _ in range(trials)]
        b = np.concatenate([block_resample(pools[i], rng, 1, n, distinct=True) for i, _ in pairs])
        h = np.concatenate([block_resample(pools[j], rng, 1, n, distinct=True) for _, j in pairs])
        mb = np.median(b, axis=1)
        bb, bh = _batch_rows(b), _batch_rows(h)
        aa = np.median(h, axis=1) / mb, mann_whitney_p_rows(bb, bh)
        ab = np.median(h * (1.0 + slowdown), axis=1) / mb, mann_whitney_p_rows(bb, bh * (1.0 + slowdown))
        for threshold in thresholds:
            for alpha in alphas:
                fa = float(np.mean(regressed(aa[0], aa[1], threshold, alpha)))
                power = float(np.mean(regressed(ab[0], ab[1], threshold, alpha)))
                out.append(ErrorRates(int(n), float(threshold), float(alpha), slowdown, fa, power, trials))
    return out


def _batch_rows(a: np.ndarray) -> np.ndarray:
    """:func:`batch_means` of each row of a (trials, n) array."""
    return np.stack([c.mean(axis=1) for c in np.array_split(a, timing_units(a.shape[1]), axis=1)], axis=1)


def mann_whitney_p_rows(base: np.ndarray, head: np.ndarray) -> np.ndarray:
    """:func:`mann_whitney_p` of each row pair of two (trials, n) arrays at once (same method choice:
    exact for small tie-free rows, else the normal approximation; 1 where a row's values are all equal)."""
    from scipy import stats as sps

    b, h = np.asarray(base, dtype=float), np.asarray(head, dtype=float)
    xy = np.sort(np.concatenate([h, b], axis=1), axis=1)
    ties = np.any(xy[:, 1:] == xy[:, :-1], axis=1)
    p = np.ones(len(xy))
    for rows, method in ((ties, "asymptotic"), (~ties, "auto")):
        if rows.any():
            p[rows] = sps.mannwhitneyu(h[rows], b[rows], alternative="two-sided", method=method, axis=1).pvalue
    p[(xy[:, 0] == xy[:, -1]) | np.isnan(p)] = 1.0
    return p
