"""harness.results.stats: summaries, the Mann-Whitney test, bootstrap CIs and the two verdict functions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.results import stats


def lognormal(rng: np.random.Generator, center: float, n: int, jitter: float = 0.05) -> list[float]:
    return list(center * rng.lognormal(0.0, jitter, n))


def test_spread_matches_numpy_quartiles():
    s = stats.spread([1.0, 2.0, 3.0, 4.0, 100.0])
    assert (s.n, s.median, s.q1, s.q3, s.min, s.max) == (5, 3.0, 2.0, 4.0, 1.0, 100.0)
    assert s.iqr == 2.0
    assert stats.median([3.0, 1.0, 2.0, 10.0]) == 2.5


@pytest.mark.parametrize("bad", [[], [1.0, math.nan], [[1.0, 2.0]]])
def test_bad_samples_are_rejected(bad):
    with pytest.raises(ValueError):
        stats.spread(bad)


def test_min_p_value_says_when_the_test_can_fire():
    assert stats.min_p_value(3, 3) == pytest.approx(0.1)  # 2 / C(6, 3)
    assert stats.min_p_value(4, 4) == pytest.approx(2 / 70)
    assert stats.min_samples(0.05) == 8  # calls: 4 pairs a side
    assert stats.min_samples(0.01) == 10


def test_batch_means_are_contiguous_and_the_timing_test_counts_pairs():
    assert list(stats.batch_means([1, 2, 3, 4, 5, 6, 7], 3)) == [2.0, 4.5, 6.5]
    assert list(stats.batch_means([1, 2], 4)) == [1.0, 2.0]
    # 5 vs 5 calls separated: per call p = 2 / C(10, 5); in pairs (2 vs 2) p = 2 / C(4, 2)
    assert stats.timing_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / math.comb(4, 2))
    assert stats.timing_p(range(10), range(10, 20)) == pytest.approx(2 / math.comb(10, 5))


def test_autocorrelated_calls_keep_the_timing_tests_false_alarms_near_alpha():
    """AR(1) calls (rho 0.25: recorded runs' lag-1 autocorrelation was 0.12-0.26), 400 A/A pairs of
    20 calls: counted as independent calls, Mann-Whitney fired on 12 % at alpha 0.05; in pairs on
    8 % (pairs absorb the neighbours' dependence, not all of it; seeded: the same draws every run)."""
    rng = np.random.default_rng(5)

    def run() -> np.ndarray:
        e = rng.standard_normal(40)
        x = np.zeros(40)
        for i in range(1, 40):
            x[i] = 0.25 * x[i - 1] + e[i]
        return 1.0 + 0.02 * x[20:]

    pairs = [(run(), run()) for _ in range(400)]
    calls = np.mean([stats.mann_whitney_p(a, b) < 0.05 for a, b in pairs])
    batched = np.mean([stats.timing_p(a, b) < 0.05 for a, b in pairs])
    assert batched < 0.10 < calls, (batched, calls)


def test_mann_whitney_separated_and_identical_sets():
    assert stats.mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / math.comb(10, 5))
    assert stats.mann_whitney_p([2.0] * 5, [2.0] * 5) == 1.0


def test_bootstrap_ci_covers_the_true_ratio_and_is_reproducible():
    rng = np.random.default_rng(1)
    base, head = lognormal(rng, 1.0, 20), lognormal(rng, 1.3, 20)
    lo, hi = stats.bootstrap_ratio_ci(base, head)
    assert lo < 1.3 < hi and hi - lo < 0.15
    assert stats.bootstrap_ratio_ci(base, head) == (lo, hi)


def test_mean_diff_ci_covers_the_true_delta_and_includes_zero_for_equal_sets():
    rng = np.random.default_rng(3)
    base, head = lognormal(rng, 1.0, 16), lognormal(rng, 1.2, 16)
    lo, hi = stats.mean_diff_ci(base, head)
    assert lo < 0.2 < hi and lo > 0.1  # 5% jitter on 16 samples: the mean's error is ~0.015 a side
    same_lo, same_hi = stats.mean_diff_ci(base, lognormal(rng, 1.0, 16))
    assert same_lo < 0.0 < same_hi
    assert stats.mean_diff_ci([2.0] * 4, [2.5] * 4) == (0.5, 0.5)
    # in 2 batches a side, (1, 3) vs (2, 4): Welch's se sqrt(2 / 2 + 2 / 2), 2 degrees of freedom
    lo, hi = stats.mean_diff_ci([1, 1, 3, 3], [2, 2, 4, 4], batches=2)
    half = 4.302652729911275 * math.sqrt(2.0)  # t(0.975, 2) * se
    assert (lo, hi) == pytest.approx((1.0 - half, 1.0 + half))


def test_compare_samples_verdicts():
    rng = np.random.default_rng(2)
    base = lognormal(rng, 1.0, 12)
    assert stats.compare_samples(base, lognormal(rng, 1.0, 12)).verdict == stats.UNCHANGED
    slow = stats.compare_samples(base, lognormal(rng, 1.25, 12))
    assert slow.verdict == stats.REGRESSED and slow.significant and slow.can_fire
    # Sampling error, not rounding: 12 seeded lognormal samples a side estimate the 1.25 ratio.
    assert slow.ratio == pytest.approx(1.25, rel=0.05) and slow.ci[0] > 1.1
    assert stats.compare_samples(base, lognormal(rng, 0.75, 12)).verdict == stats.IMPROVED
    # a big but unprovable change: three samples each can never reach p < 0.05
    few = stats.compare_samples(base[:3], [x * 1.5 for x in base[:3]])
    assert few.verdict == stats.NOISE and not few.can_fire
    assert "too few samples" in few.describe() and "need >= 8 per side" in few.describe()


def test_significant_but_small_shift_is_unchanged():
    rng = np.random.default_rng(3)
    base = lognormal(rng, 1.0, 40, jitter=0.01)
    v = stats.compare_samples(base, lognormal(rng, 1.05, 40, jitter=0.01), threshold=1.10)
    assert v.significant and v.verdict == stats.UNCHANGED


def test_compare_samples_rejects_bad_settings():
    with pytest.raises(ValueError, match="threshold"):
        stats.compare_samples([1.0], [1.0], threshold=0.9)
    with pytest.raises(ValueError, match="alpha"):
        stats.compare_samples([1.0], [1.0], alpha=0.0)


@pytest.mark.parametrize(
    ("base", "head", "tol", "verdict"),
    [
        (12, 12, 0.0, stats.UNCHANGED),
        (12, 13, 0.0, stats.REGRESSED),
        (12, 11, 0.0, stats.IMPROVED),
        (1000, 1015, 0.02, stats.UNCHANGED),
        (1000, 1025, 0.02, stats.REGRESSED),
        (0, 0, 0.0, stats.UNCHANGED),
        (0, 1, 0.5, stats.REGRESSED),
    ],
)
def test_compare_values(base, head, tol, verdict):
    v = stats.compare_values(base, head, tol)
    assert v.verdict == verdict
    assert v.delta == head - base
    assert v.ratio == (math.inf if base == 0 and head else (1.0 if base == 0 else head / base))
    assert v.describe() == ("must match exactly" if tol == 0 else f"tolerance ±{tol:.2%}")


@pytest.mark.parametrize(
    ("head", "lower", "higher", "neither"),
    [
        (1025, stats.REGRESSED, stats.IMPROVED, stats.REGRESSED),
        (975, stats.IMPROVED, stats.REGRESSED, stats.REGRESSED),  # fewer FLOPs: other work, not better
        (1015, stats.UNCHANGED, stats.UNCHANGED, stats.UNCHANGED),
    ],
)
def test_compare_values_honours_the_better_direction(head, lower, higher, neither):
    got = [stats.compare_values(1000, head, 0.02, better).verdict for better in ("lower", "higher", "")]
    assert got == [lower, higher, neither]


def test_a_flop_count_that_drops_fails_the_gate():
    """The catalogue's FLOP counts have no better direction (``better = ""``): the gate's comparison
    of a gated one fails on a drop beyond its tolerance as on a rise."""
    from harness import catalogue
    from harness.plan.manifest import Gate
    from harness.results.compare import MetricValue, compare_metric

    spec = catalogue.get("cost.matmul_flops")
    assert spec.better == "" and spec.gated
    for head in (0.9e9, 1.1e9):
        c = compare_metric("v", "s", "cost.matmul_flops", MetricValue(1e9), MetricValue(head), Gate())
        assert c.verdict == stats.REGRESSED and c.gated


def test_interleaved_rounds_must_agree_on_a_regression():
    rng = np.random.default_rng(4)
    base_rounds = [lognormal(rng, 1.0, 10), lognormal(rng, 1.0, 10)]
    busy = [lognormal(rng, 2.0, 10), lognormal(rng, 1.0, 10)]  # round 1 of head hit a busy machine
    pooled = (base_rounds[0] + base_rounds[1], busy[0] + busy[1])
    assert stats.compare_samples(*pooled).verdict == stats.REGRESSED  # the pooled test alone is fooled
    v = stats.compare_samples(*pooled, rounds=list(zip(base_rounds, busy, strict=True)))
    assert v.verdict == stats.NOISE and "(not consistent)" in v.describe()
    slow = [lognormal(rng, 1.3, 10), lognormal(rng, 1.3, 10)]
    v = stats.compare_samples(
        base_rounds[0] + base_rounds[1], slow[0] + slow[1], rounds=list(zip(base_rounds, slow, strict=True))
    )
    assert v.verdict == stats.REGRESSED and len(v.round_ratios) == 2 and "per-round ratios 1.2" in v.describe()


def test_summarize() -> None:
    s = stats.summarize([3.0, 1.0, 2.0, 4.0])
    assert s == {
        "n": 4,
        "median": 2.5,
        "min": 1.0,
        "max": 4.0,
        "mean": 2.5,
        "stdev": pytest.approx(1.2909944),
        "iqr": 1.5,
    }
    assert stats.summarize([2.0])["stdev"] == 0.0 and stats.summarize([2.0])["iqr"] == 0.0
    assert stats.summarize([])["median"] is None
