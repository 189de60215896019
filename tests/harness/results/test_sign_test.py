"""harness.results.sign_test: the exact binomial tail, the critical count, and the verdict."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from harness.results.sign_test import binomial_tail, critical_count, min_pairs, sign_test


def test_binomial_tail_is_exact() -> None:
    assert binomial_tail(10, 10) == Fraction(1, 1024)
    assert binomial_tail(10, 9) == Fraction(11, 1024)
    assert binomial_tail(10, 0) == 1 and binomial_tail(10, 11) == 0
    assert binomial_tail(4, 2) == Fraction(11, 16)


def test_critical_count_is_the_smallest_count_rare_enough() -> None:
    c = critical_count(150, 0.001)
    assert c == 95  # P(>= 95 of 150) = 0.00068, P(>= 94) = 0.0012
    assert binomial_tail(150, c) <= Fraction(1, 1000) < binomial_tail(150, c - 1)
    assert critical_count(9, 0.001) is None and critical_count(10, 0.001) == 10
    assert min_pairs(0.001) == 10
    with pytest.raises(ValueError, match="alpha"):
        critical_count(10, 1.5)


def test_a_ratio_beyond_the_minimum_effect_in_most_pairs_regresses() -> None:
    rng = random.Random(1)
    noisy = [math.exp(rng.gauss(0, 0.08)) for _ in range(150)]  # the pair spread of a loaded 2-core run
    same = sign_test(noisy, min_effect=0.03, alpha=0.001)
    slower = sign_test([r * 1.25 for r in noisy], min_effect=0.03, alpha=0.001)
    assert not same.regressed and same.n == 150 and same.critical == 95
    assert slower.regressed and slower.slower >= 95 and slower.median_ratio == pytest.approx(1.25 * same.median_ratio)
    assert same.false_alarm == pytest.approx(float(binomial_tail(150, 95))) and same.false_alarm < 0.001
    # exactly 1 + min_effect is not slower; the counts are of strict exceedances
    edge = sign_test([1.03] * 20, min_effect=0.03, alpha=0.001)
    assert edge.slower == 0 and edge.faster == 0 and not edge.regressed


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="positive finite"):
        sign_test([1.0, float("nan")], 0.03, 0.001)
    with pytest.raises(ValueError, match="min_effect"):
        sign_test([1.0], -0.1, 0.001)
