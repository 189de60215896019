"""The suite's numerical tolerances: one name per kind of computation, each derived from its dtype.

Units: float32 ``EPS32 = 2**-23`` (1.19e-7), the spacing of floats in [1, 2): one correctly rounded
operation is off by <= EPS32 / 2 relatively, and ulp(x) <= EPS32 |x|. bfloat16 keeps 8 significant
bits: ``EPS_BF16 = 2**-7``, one rounding <= 2**-8 = 3.9e-3 relatively.

A parity test compares two implementations of the same math (ours in XLA against PyTorch, or ours
under two layouts), so the bound is on how differently they round: other summation orders
(tiling, sharded partial sums, batch composition), fused multiply-adds or not, transcendental
kernels a few ulp apart. None of that depends on the CPU vendor, and a tolerance must not either:
each constant below is >= 5x the largest difference its tests measured on an AMD EPYC, both with
numpy, torch, oneDNN/MKL and XLA at AVX-512 and with all of them held to AVX2. Computations whose
error grows with an input's magnitude compute their bound from the inputs instead (RoPE angles
reach ~1.6e4 rad: ``test_rope.py``); a bfloat16 kernel is held to float32 on its own rounded inputs.

Most parity tests use the scaled error ``max|ours - ref| / max(1, max|ref|)``: absolute for
outputs of order <= 1, relative to the largest value above that. ``pytest.approx`` (harness
tests, default rel=1e-6) compares float64 arithmetic on a few exact inputs: ~4e9 float64 ulps
of room, no numerical analysis needed.
"""

from __future__ import annotations

EPS32 = 2.0**-23
EPS_BF16 = 2.0**-7

# A few elementwise float32 operations on values of order <= 4 (latent (de)normalisation, noise
# mixing, sigma / timestep formulas, guidance with identity scales): <= ~8 roundings of EPS32 / 2
# in the scaled metric, FMA-contracted or not. Measured <= 2.4e-7.
FP32_ELEMENTWISE = 1e-6  # 8.4 EPS32

# One kernel, or the same float32 math with its sums in another order (sharded contractions,
# online-softmax tiles, time-tap convolutions, batch composition): a K-term sum taken in two orders
# differs like a random walk of ~sqrt(K) roundings, sqrt(4096) * EPS32 = 7.6e-6 at the longest
# contractions the tests reach (K <= 4096), plus a few ulp of the kernel's own transcendentals.
# Measured <= 1.5e-6 (splash attention against XLA's).
FP32_KERNEL = 1e-5  # 84 EPS32

# A whole module against PyTorch or under another sharding layout (transformer, connectors, Gemma,
# VAEs, vocoder, upsampler, the pipeline): tens of kernels in sequence, each within FP32_KERNEL and
# carried through the next layer's gain; ~10 kernel errors on the output's scale. Measured <= 7.1e-6
# (the tiny pipeline end to end).
FP32_MODULE = 1e-4  # 840 EPS32

# One attention kernel in bfloat16 against the float32 attention of the same (bf16-rounded)
# inputs: its own roundings of logits, probabilities and output, ~5 roundings of 2**-8 = 2.0e-2.
# Measured <= 4.0e-3.
BF16_KERNEL = 2e-2

# A whole bfloat16 module against its float32 run: a smoke bound (13 roundings of 2**-8), not an
# error analysis. A wrong cast or a dropped term moves outputs by O(1). Measured 9.5e-3.
BF16_MODULE = 5e-2
