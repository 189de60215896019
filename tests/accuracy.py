"""bfloat16 accuracy against the reference's own bfloat16: deviations from float32 and the sign test.

The question (issue 45): is our bfloat16 output as close to the float32 reference as diffusers' own
bfloat16 output is? Per seed (an independent draw of weights and inputs), both bfloat16 outputs are
measured against diffusers' float32 output of the same seed, and the per-seed ratio ours / theirs of
each metric is formed (:class:`Deviation`: max abs, relative L2). "bf16" means the same on both
sides: the float32 weights rounded to bfloat16 once (diffusers ``.to(torch.bfloat16)``; ours loaded
from those rounded values, ``dtype = param_dtype = "bfloat16"``), activations in bfloat16, timesteps
float32 as the pipeline passes them; where either side computes in float32 internally (norms,
softmax, RoPE, matmul accumulation) it does so as it does in production.

Statistic: the median ratio over seeds. H0 "ours is no worse" is a median ratio <= 1, i.e. each seed's
ratio exceeds 1 with probability p <= 1/2; seeds are independent, so the number of seeds where ours is
worse is at most Binomial(n, 1/2) in distribution. A comparison fails when that count reaches
:func:`sign_test_limit` ``(n, alpha)``, the smallest k with P(Bin(n, 1/2) >= k) <= alpha: an exact,
distribution-free bound on its false-failure rate. :func:`check` splits one test's budget
:data:`ALPHA` over its comparisons (a union bound), so each test fails a true ratio <= 1 with
probability < 1e-3, whatever the machine's load (the outputs are deterministic per seed; load moves
no number). Power: a variant worse on 90% of seeds fails a 24-seed, 4-comparison test with
probability 0.79, one worse on 95% with 0.97 (:func:`power`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from harness.results import sign_test

ALPHA = 1e-3  # each test's false-failure budget, split over its comparisons
METRICS = ("max_abs", "rel_l2")


@dataclass(frozen=True)
class Deviation:
    """How far one output is from the float32 reference: ``max|x - ref|`` and ``|x - ref|_2 / |ref|_2``."""

    max_abs: float
    rel_l2: float


def deviation(x: np.ndarray, ref: np.ndarray) -> Deviation:
    x64, ref64 = np.asarray(x, np.float64), np.asarray(ref, np.float64)
    if x64.shape != ref64.shape:
        raise ValueError(f"output shape {x64.shape} differs from the reference's {ref64.shape}")
    diff = x64 - ref64
    return Deviation(float(np.abs(diff).max()), float(np.linalg.norm(diff) / np.linalg.norm(ref64)))


def binomial_tail(n: int, k: int) -> float:
    """P(Bin(n, 1/2) >= k), exactly (:func:`harness.results.sign_test.binomial_tail`)."""
    return float(sign_test.binomial_tail(n, k))


def sign_test_limit(n: int, alpha: float) -> int:
    """The smallest count k of seeds where ours is worse with P(Bin(n, 1/2) >= k) <= alpha."""
    for k in range(n + 1):
        if binomial_tail(n, k) <= alpha:
            return k
    raise ValueError(f"{n} seeds cannot reach a false-failure rate of {alpha:.1e} (2**-{n} = {2.0**-n:.1e})")


def power(n: int, alpha: float, p_worse: float) -> float:
    """P(fail) of one comparison when each seed is worse with probability ``p_worse``."""
    k = sign_test_limit(n, alpha)
    return sum(math.comb(n, j) * p_worse**j * (1 - p_worse) ** (n - j) for j in range(k, n + 1))


@dataclass(frozen=True)
class Comparison:
    """One output of one component: per-seed deviations of ours and of diffusers' bfloat16."""

    label: str
    ours: tuple[Deviation, ...]
    theirs: tuple[Deviation, ...]

    def ratios(self, metric: str) -> np.ndarray:
        ours = np.asarray([getattr(d, metric) for d in self.ours])
        theirs = np.asarray([getattr(d, metric) for d in self.theirs])
        return ours / np.maximum(theirs, np.finfo(np.float64).tiny)

    def median(self, metric: str) -> float:
        return float(np.median(self.ratios(metric)))

    def worse(self, metric: str, bound: float = 1.0) -> int:
        return int(np.sum(self.ratios(metric) > bound))

    def line(self, metric: str) -> str:
        theirs = np.median([getattr(d, metric) for d in self.theirs])
        return (
            f"{self.label:28s} {metric:8s} median ours/theirs {self.median(metric):6.3f}  "
            f"worse on {self.worse(metric):2d}/{len(self.ours)} seeds  (theirs median {theirs:.2e})"
        )


def compare(label: str, ours: Sequence[Deviation], theirs: Sequence[Deviation]) -> Comparison:
    if len(ours) != len(theirs):
        raise ValueError(f"{label}: {len(ours)} seeds of ours against {len(theirs)} of theirs")
    return Comparison(label, tuple(ours), tuple(theirs))


def failures(comparisons: Sequence[Comparison], alpha: float = ALPHA, bound: float = 1.0) -> list[str]:
    """The comparisons (each metric of each) whose count of seeds with a ratio above ``bound``
    reaches the sign test's limit at ``alpha`` split evenly over them."""
    per = alpha / (len(comparisons) * len(METRICS))
    out = []
    for c in comparisons:
        limit = sign_test_limit(len(c.ours), per)
        out += [f"{c.line(m)} >= limit {limit} above {bound:.3f}" for m in METRICS if c.worse(m, bound) >= limit]
    return out


def check(comparisons: Sequence[Comparison], alpha: float = ALPHA, bound: float = 1.0) -> None:
    """Print every ratio; fail the test where ours / theirs exceeds ``bound`` (1: ours no worse)
    beyond chance."""
    for c in comparisons:
        for m in METRICS:
            print(c.line(m))
    bad = failures(comparisons, alpha, bound)
    assert not bad, "ours is further from float32 than diffusers' bfloat16:\n" + "\n".join(bad)
