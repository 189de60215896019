"""Blocked (flash-style) attention for CPU: online softmax over query and key tiles.

The algorithm of FlashAttention (Dao et al., 2022, "FlashAttention: Fast and Memory-Efficient
Exact Attention with IO-Awareness"), written with ``lax.map`` / ``lax.scan`` so XLA:CPU runs one
small tile per loop step: a group of heads x ``block_q`` queries against ``block_kv`` keys. The
tile's logits stay in cache; the plain einsum path streams ``[B, N, L, S]`` float32 logits
through memory three times (matmul, exp, matmul), which made attention slower than PyTorch's CPU
flash SDPA (benchmarks/results/docstring-findings-2026-11-29.md). Same math as the XLA path: float32 logits, softmax
statistics and accumulators; probabilities cast to the value dtype for the value matmul.

Shapes: B batch, L queries, S keys, N heads, K head dim, G head groups of ``hb`` heads, ``nq``
query tiles of ``bq``, ``nk`` key tiles of ``bk``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

BLOCK_Q = 256
BLOCK_KV = 2048
# Logits per loop step (float32: 2 MiB), about an L2 slice; measured 2-core optimum on AMD EPYC.
TILE_ELEMENTS = 1 << 19
_NEG = float(jnp.finfo(jnp.float32).min)


def heads_per_step(heads: int, tile: int, budget: int = TILE_ELEMENTS) -> int:
    """Largest divisor ``hb`` of ``heads`` (B*N) with ``hb * tile <= budget`` (at least 1)."""
    return max([d for d in range(1, heads + 1) if heads % d == 0 and d * tile <= budget], default=1)


def even_tiles(size: int, block: int) -> tuple[int, int]:
    """(tile, count) covering ``size`` with the fewest tiles of at most ``block`` (rounded up to 8),
    split evenly: 576 queries -> 3 x 192 rather than 3 x 256 with 192 padded rows (the `small`
    preset's video self-attention; measured: benchmarks/results/docstring-findings-2026-11-29.md)."""
    count = math.ceil(size / min(block, size))
    tile = size if count == 1 else 8 * math.ceil(math.ceil(size / count) / 8)
    return tile, math.ceil(size / tile)


def pad_to(x: jax.Array, axis: int, size: int) -> jax.Array:
    """``x`` zero-padded at the end of ``axis`` to ``size``."""
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, pad) if size != x.shape[axis] else x


def _tiles(x_btnk: jax.Array, hb: int, block: int) -> jax.Array:
    """``[B, T, N, K]`` -> ``[G, T/block, hb, block, K]`` (T already padded to a multiple of block)."""
    B, T, N, K = x_btnk.shape
    x = jnp.swapaxes(x_btnk, 1, 2).reshape(B * N // hb, hb, T // block, block, K)
    return jnp.swapaxes(x, 1, 2)


def _bias_tiles(bias: jax.Array, B: int, N: int, L: int, S: int, hb: int, bq: int, bk: int) -> jax.Array:
    """Additive bias broadcastable to ``[B, N, L, S]`` -> ``[G, nq | 1, nk, hb, bq | 1, bk]`` in float32;
    a bias constant over queries (a key mask) keeps a query axis of 1 instead of being broadcast."""
    bias = bias.astype(jnp.float32).reshape((1,) * (4 - bias.ndim) + bias.shape)
    full_q = bias.shape[2] != 1
    lb = L if full_q else 1
    bias = jnp.broadcast_to(bias, (B, N, lb, S))
    nq, nk = (-(-L // bq), -(-S // bk))
    bias = pad_to(pad_to(bias, 2, nq * bq if full_q else 1), 3, nk * bk)
    qb = bq if full_q else 1
    bias = bias.reshape(B * N // hb, hb, bias.shape[2] // qb, qb, nk, bk)
    return bias.transpose(0, 2, 4, 1, 3, 5)


def _kv_step(q_hqk: jax.Array, scale: float):
    """One online-softmax update of (running max, running sum, unnormalised output) by a key tile."""

    def step(carry, tile):
        m_hq, l_hq, acc_hqk = carry
        k_hsk, v_hsk, bias_hqs, valid_s = tile
        logits = jnp.einsum("hqk,hsk->hqs", q_hqk, k_hsk, preferred_element_type=jnp.float32) * scale
        if bias_hqs is not None:
            logits = logits + bias_hqs
        if valid_s is not None:
            logits = jnp.where(valid_s, logits, _NEG)
        m_new = jnp.maximum(m_hq, logits.max(-1))
        p_hqs = jnp.exp(logits - m_new[..., None])
        corr = jnp.exp(m_hq - m_new)
        pv = jnp.einsum("hqs,hsk->hqk", p_hqs.astype(v_hsk.dtype), v_hsk, preferred_element_type=jnp.float32)
        return (m_new, l_hq * corr + p_hqs.sum(-1), acc_hqk * corr[..., None] + pv), None

    return step


def blocked_attention(
    q_blnk: jax.Array,
    k_bsnk: jax.Array,
    v_bsnk: jax.Array,
    bias: jax.Array | None = None,
    *,
    block_q: int = BLOCK_Q,
    block_kv: int = BLOCK_KV,
    tile_elements: int = TILE_ELEMENTS,
) -> jax.Array:
    """``softmax(q k^T / sqrt(K) + bias) v`` -> ``[B, L, N, K]`` by tiles; ``bias`` broadcasts to
    ``[B, N, L, S]``. Queries and keys are zero-padded to whole tiles; padded keys are masked out
    and padded query rows dropped. One key tile (``S <= block_kv``) is an exact single-pass softmax."""
    B, L, N, K = q_blnk.shape
    S = k_bsnk.shape[1]
    (bq, nq), (bk, nk) = even_tiles(L, block_q), even_tiles(S, block_kv)
    hb = heads_per_step(B * N, bq * bk, tile_elements)
    q_t = _tiles(pad_to(q_blnk, 1, nq * bq), hb, bq)  # [G, nq, hb, bq, K]
    k_t, v_t = (_tiles(pad_to(t, 1, nk * bk), hb, bk) for t in (k_bsnk, v_bsnk))  # [G, nk, hb, bk, K]
    bias_t = None if bias is None else _bias_tiles(bias, B, N, L, S, hb, bq, bk)
    valid = None if nk * bk == S else (jnp.arange(nk * bk) < S).reshape(nk, 1, 1, bk)
    G = q_t.shape[0]
    scale = 1.0 / math.sqrt(K)

    def one_tile(xs):
        q_hqk, g, j = xs
        tiles = (k_t[g], v_t[g], None if bias_t is None else bias_t[g, j if bias_t.shape[1] > 1 else 0], valid)
        init = (jnp.full(q_hqk.shape[:-1], _NEG), jnp.zeros(q_hqk.shape[:-1]), jnp.zeros(q_hqk.shape, jnp.float32))
        step = _kv_step(q_hqk, scale)
        if nk == 1:  # one key tile: a plain (exact) softmax, no loop
            carry, _ = step(init, jax.tree.map(lambda t: None if t is None else t[0], tiles))
        else:
            carry, _ = jax.lax.scan(step, init, tiles)
        _, l_hq, acc_hqk = carry
        return acc_hqk / l_hq[..., None]

    g_idx, j_idx = (a.reshape(-1) for a in jnp.meshgrid(jnp.arange(G), jnp.arange(nq), indexing="ij"))
    out = jax.lax.map(one_tile, (q_t.reshape(G * nq, hb, bq, K), g_idx, j_idx))  # [G*nq, hb, bq, K]
    out = jnp.swapaxes(out.reshape(G, nq, hb, bq, K), 1, 2).reshape(B, N, nq * bq, K)[:, :, :L]
    return jnp.swapaxes(out, 1, 2).astype(q_blnk.dtype)
