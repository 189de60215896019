"""An exact sign test on paired timing ratios with a minimum effect (``harness ab``'s verdict).

Each pair is one call of the reference (base) and one of this tree (head), back to back in an order
drawn by a fair coin; its ratio is ``head / base``. Under "head is at most ``min_effect`` slower" a
pair exceeds ``1 + min_effect`` with probability at most 1/2 given the past (the coin puts a burst
of load or a drift on either side alike), so ``slower``, the count of such pairs, is at most
Binomial(n, 1/2) (Dixon & Mood, JASA 1946; Conover, *Practical Nonparametric Statistics*, 3rd ed.,
3.4). The test rejects when ``slower >= critical``, the smallest count whose tail is at most
``alpha``: its false-alarm rate is that tail, exact (:attr:`SignTest.false_alarm`), whatever the
noise. Why it holds on a loaded machine and what ``min_effect`` absorbs: docs/gates.md, "A same-run
A/B against the baseline's code".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction


def binomial_tail(n: int, k: int) -> Fraction:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if k <= 0:
        return Fraction(1)
    if k > n:
        return Fraction(0)
    return Fraction(sum(math.comb(n, i) for i in range(k, n + 1)), 2**n)


def critical_count(n: int, alpha: float) -> int | None:
    """The smallest ``c`` with P(Binomial(n, 1/2) >= c) <= ``alpha``; None if even ``n`` of ``n``
    is not that rare (too few pairs for ``alpha``)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    for c in range(n + 1):
        if binomial_tail(n, c) <= Fraction(alpha):
            return c
    return None


def min_pairs(alpha: float) -> int:
    """The fewest pairs with which the test can reject at ``alpha`` at all (every pair slower)."""
    return max(1, math.ceil(math.log2(1 / alpha)))


@dataclass(frozen=True)
class SignTest:
    """The test's counts and verdict; ``false_alarm`` is its exact false-alarm rate under the null."""

    n: int
    slower: int  # pairs with head / base > 1 + min_effect
    faster: int  # pairs with head / base < 1 / (1 + min_effect) (reported; not what is tested)
    critical: int | None  # slower >= critical rejects; None: n too small for alpha
    alpha: float
    min_effect: float
    p: float  # P(Binomial(n, 1/2) >= slower)
    false_alarm: float  # P(Binomial(n, 1/2) >= critical): the test's own false-alarm rate
    median_ratio: float

    @property
    def regressed(self) -> bool:
        return self.critical is not None and self.slower >= self.critical

    def line(self) -> str:
        crit = "n too small" if self.critical is None else f"needs >= {self.critical}"
        return (
            f"median head/base {self.median_ratio:.4f}; {self.slower} of {self.n} pairs slower than "
            f"{1 + self.min_effect:.3f}x ({crit}; p = {self.p:.2g}), {self.faster} faster than "
            f"1/{1 + self.min_effect:.3f}x; false-alarm rate {self.false_alarm:.2g} (alpha {self.alpha:g})"
        )


def sign_test(ratios: Sequence[float], min_effect: float, alpha: float) -> SignTest:
    """The one-sided sign test of the module docstring on ``ratios`` (head / base per pair)."""
    if min_effect < 0:
        raise ValueError(f"min_effect must be >= 0, got {min_effect}")
    values = [float(r) for r in ratios]
    if not values or any(not math.isfinite(r) or r <= 0 for r in values):
        raise ValueError("ratios must be a non-empty sequence of positive finite numbers")
    n = len(values)
    slower = sum(r > 1 + min_effect for r in values)
    faster = sum(r < 1 / (1 + min_effect) for r in values)
    critical = critical_count(n, alpha)
    ordered = sorted(values)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    return SignTest(
        n=n,
        slower=slower,
        faster=faster,
        critical=critical,
        alpha=alpha,
        min_effect=min_effect,
        p=float(binomial_tail(n, slower)),
        false_alarm=float(binomial_tail(n, critical)) if critical is not None else 0.0,
        median_ratio=median,
    )
