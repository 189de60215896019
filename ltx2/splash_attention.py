"""Splash attention on TPU: JAX's Pallas/Mosaic flash kernel (``jax.experimental.pallas.ops.tpu.
splash_attention``) behind ``TransformerConfig.attention_impl = "splash"``.

The kernel keeps each score tile in VMEM, so the ``[B, N, L, S]`` logits never reach HBM; XLA's
einsum path writes and re-reads them, which made every fitting layout of the 19B step on v6e
memory-bound (their compile-only static metrics: the logits' bytes dominate). Same math as the
other paths: float32 logits and softmax statistics, probabilities in the value dtype.

Adaptation to our shapes: queries are scaled by ``1/sqrt(K)`` up front (the kernel does not
scale); sequences are zero-padded to whole tiles (multiples of 128) and head dims to the 128
lanes (zero features change no logit and add zero output columns, sliced off); padded keys and
masked keys get segment id 0, queries 1, so only kept keys are attended. Masks: a key-padding
bias ``[B, 1, 1, S]`` of 0 / <= -1e4 (what the transformer builds from text masks) is read as a
keep-mask; other biases raise. A row whose keys are all masked is undefined (the kernel's
softmax has no key to normalise over; diffusers' -1e4 bias would average all keys).

Platforms: the Mosaic kernel is lowered for TPU, including compile-only TPU targets on a CPU host
(``jax.lax.platform_dependent`` picks by lowering platform, not by the default backend); on any
other platform the same kernel runs in Pallas' interpreter: exact, for tests, orders of magnitude
slower. Sharded layouts run the kernel per shard under ``shard_map``: batch and heads split as
the strategy's rules say (``activation_attention_heads``, by default as the projections' ``heads``;
over the sequence axes too, the kernel runs head-parallel), and the queries stay split over the
sequence axes where the strategy shards the tokens (context parallelism), each shard attending to
the whole, gathered keys and values: no shard computes another's queries. With ``kv="ring"``
(``attention_impl = "splash_ring"``) the keys and values stay split too and travel around the
sequence axes one chunk per step while the kernel attends the chunk a shard holds (ring
attention), the partial outputs merged by their log-sum-exps.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from ltx2.blocked_attention import pad_to
from ltx2.sharding import constrain, get_strategy

LANES = 128
BLOCK = 512  # largest query/key tile; sequences are padded to a multiple of 128
KEEP_THRESHOLD = -1.0  # bias entries above keep the key: the transformer's masks are 0 / -10000
KV_EXCHANGES = ("gather", "ring")


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _tile(size: int, block: int) -> tuple[int, int]:
    """(tile, padded size): ``size`` padded to the 128 lanes, and the largest multiple of 128 up to
    ``block`` that divides it (576 tokens -> 640 in 128-tiles, not 1024 in 512-tiles)."""
    padded = _round_up(size, LANES)
    tile = max(t for t in range(LANES, min(block, padded) + 1, LANES) if padded % t == 0)
    return tile, padded


def key_keep_mask(bias: jax.Array | None, batch: int, keys: int) -> jax.Array | None:
    """``[B, S]`` bool keep-mask from a key-padding bias broadcastable to ``[B, 1, 1, S]``."""
    if bias is None:
        return None
    full = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
    if full.shape[1] != 1 or full.shape[2] != 1 or full.shape[3] != keys:
        raise ValueError(
            f"attention_impl='splash' takes key-padding masks only (a bias broadcastable to [B, 1, 1, {keys}]), "
            f"got a bias of shape {bias.shape}; use attention_impl='xla' for general biases"
        )
    return jnp.broadcast_to(full[:, 0, 0, :] > KEEP_THRESHOLD, (batch, keys))


def _kernel_call(
    q_bnlk: jax.Array,
    k_bnsk: jax.Array,
    v_bnsk: jax.Array,
    q_ids: jax.Array | None,
    kv_ids: jax.Array | None,
    *,
    bq: int,
    bk: int,
    interpret: bool,
    residuals: bool = False,
) -> Any:
    """The splash kernel over a (local) batch: padded ``[B, N, Lp, Kp]`` in, same out; with
    ``residuals``, ``(out, (logsumexp [B, N, Lp] float32,))``."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    _, N, Lp, _ = q_bnlk.shape
    Sp = k_bnsk.shape[2]
    kernel = splash.make_splash_mha(
        mask=splash.MultiHeadMask([splash.FullMask((Lp, Sp))] * N),
        block_sizes=splash.BlockSizes(block_q=bq, block_kv=bk, block_kv_compute=bk),
        head_shards=1,
        q_seq_shards=1,
        save_residuals=residuals,
        interpret=interpret,
    )
    if q_ids is None or kv_ids is None:
        return jax.vmap(kernel)(q_bnlk, k_bnsk, v_bnsk)
    return jax.vmap(lambda q, k, v, qi, ki: kernel(q, k, v, segment_ids=splash.SegmentIds(qi, ki)))(
        q_bnlk, k_bnsk, v_bnsk, q_ids, kv_ids
    )


def splash_attention(
    q_blnk: jax.Array,
    k_bsnk: jax.Array,
    v_bsnk: jax.Array,
    bias: jax.Array | None = None,
    *,
    interpret: bool | None = None,
    block: int = BLOCK,
    strategy: str | None = None,
    kv: str = "gather",
) -> jax.Array:
    """``softmax(q k^T / sqrt(K) + mask) v`` -> ``[B, L, N, K]`` with the splash kernel.

    ``interpret``: None picks by lowering platform (Mosaic on TPU, the interpreter elsewhere);
    True/False force it. ``strategy`` (a sharding strategy name) runs the kernel under ``shard_map``
    over the context mesh, batch and heads split by its activation rules; None runs it on whole
    arrays. ``kv``: how a sequence-sharded layout's shards get the keys and values: ``gather``
    (all of them, then one kernel call) or ``ring`` (:func:`_ring`: each shard's chunk passed on
    around the sequence axes while the kernel attends the one it holds; where the keys split into
    whole 128-token chunks per shard and carry no mask, else gathered)."""
    if kv not in KV_EXCHANGES:
        raise ValueError(f"kv must be one of {KV_EXCHANGES}, got {kv!r}")
    B, L, N, K = q_blnk.shape
    S = k_bsnk.shape[1]
    keep_bs = key_keep_mask(bias, B, S)
    batch_heads, seq_axes, shards = _kernel_layout(strategy, B, N, L)
    ring = kv == "ring" and shards > 1 and keep_bs is None and S % (shards * LANES) == 0
    (bq, Lq), Kp = _tile(-(-L // shards), block), _round_up(K, LANES)
    bk, Sp = (_tile(S // shards, block)[0], S) if ring else _tile(S, block)
    Lp = Lq * shards  # each sequence shard a whole number of query tiles
    scale = 1.0 / math.sqrt(K)
    q = (q_blnk.astype(jnp.float32) * scale).astype(q_blnk.dtype)
    q_bnlk, k_bnsk, v_bnsk = (
        pad_to(pad_to(jnp.swapaxes(t, 1, 2), 3, Kp), 2, n) for t, n in ((q, Lp), (k_bsnk, Sp), (v_bsnk, Sp))
    )
    q_ids = kv_ids = None
    if keep_bs is not None or Sp != S:
        keep = jnp.ones((B, S), bool) if keep_bs is None else keep_bs
        kv_ids = pad_to(keep.astype(jnp.int32), 1, Sp)  # padded keys: id 0, never attended
        q_ids = jnp.ones((B, Lp), jnp.int32)

    def run(
        interp: bool, q: jax.Array, k: jax.Array, v: jax.Array, q_ids: jax.Array | None, kv_ids: jax.Array | None
    ) -> jax.Array:
        call = functools.partial(_kernel_call, bq=bq, bk=bk, interpret=interp)
        if strategy is None or jax.sharding.get_abstract_mesh().empty:
            return call(q, k, v, q_ids, kv_ids)
        if ring:
            return _sharded(_ring(call, seq_axes, shards), batch_heads, seq_axes, q, k, v, q_ids, kv_ids, ring=True)
        return _sharded(call, batch_heads, seq_axes, q, k, v, q_ids, kv_ids)

    args = (q_bnlk, k_bnsk, v_bnsk, q_ids, kv_ids)
    if interpret is None:
        out = jax.lax.platform_dependent(*args, tpu=functools.partial(run, False), default=functools.partial(run, True))
    else:
        out = run(interpret, *args)
    out_blnk = jnp.swapaxes(out[:, :, :L, :K], 1, 2).astype(q_blnk.dtype)
    if strategy is None:
        return out_blnk
    # Back to the layout the output projection contracts: tokens over the sequence axes, heads as the
    # projections' rule has them. Left to GSPMD, a head-parallel kernel's output (heads over context)
    # reached to_out as context-sharded partial sums: an f32 all-reduce of the whole sequence per
    # layer, then a slice (compiled for v7x, MaxDiffusion's layout: 142 ms of a 277 ms step).
    return constrain(out_blnk, ("activation_batch", "activation_length", "heads", None), strategy)


def _kernel_layout(strategy: str | None, batch: int, heads: int, length: int) -> tuple[P, tuple[str, ...], int]:
    """Where the kernel's ``shard_map`` splits ``[B, N, L]``: batch and heads as the strategy places them
    (``activation_batch``, ``activation_attention_heads``; mesh axes that do not divide a dimension
    dropped, as for parameters), then the queries' sequence over the axes the strategy shards the
    tokens on (``activation_length``) that batch and heads left free, no more shards than ``length``
    has 128-token tiles. Returns the batch/heads spec, those sequence axes and their total size;
    ``(P(), (), 1)`` without a strategy or a mesh."""
    mesh = jax.sharding.get_abstract_mesh()
    if strategy is None or mesh.empty:
        return P(), (), 1
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    strat = get_strategy(strategy)
    names = ("activation_batch", "activation_attention_heads")
    batch_heads = strat.spec(names, mesh.axis_names, shape=(batch, heads), mesh_shape=sizes)
    seq = strat.spec(("activation_length",), mesh.axis_names)[0]
    taken = {a for entry in batch_heads if entry for a in ((entry,) if isinstance(entry, str) else entry)}
    axes: tuple[str, ...] = ()
    for a in () if seq is None else (seq,) if isinstance(seq, str) else seq:
        if a not in taken and math.prod(sizes[x] for x in (*axes, a)) * LANES <= _round_up(length, LANES):
            axes += (a,)
    return batch_heads, axes, math.prod(sizes[a] for a in axes)


def _ring(call, seq_axes: tuple[str, ...], shards: int):  # type: ignore[no-untyped-def]
    """A shard's attention over keys and values split in ``shards`` chunks around ``seq_axes``: at
    each of ``shards`` steps it passes the chunk it holds on to the next shard and attends its
    queries to that chunk (the kernel with its log-sum-exp), so the transfer of one chunk runs
    beside the kernel on the other; the partial outputs are merged by their log-sum-exps (float32),
    which is the softmax over all keys."""
    perm = [(i, (i + 1) % shards) for i in range(shards)]

    def attend(q, k, v, q_ids, kv_ids):  # type: ignore[no-untyped-def]
        outs, lses = [], []
        for step in range(shards):
            nxt = jax.lax.ppermute((k, v), seq_axes, perm) if step + 1 < shards else None
            out, (lse,) = call(q, k, v, q_ids, kv_ids, residuals=True)
            outs.append(out.astype(jnp.float32))
            lses.append(lse)
            if nxt is not None:
                k, v = nxt
        return _merge(outs, lses).astype(q.dtype)

    return attend


def _merge(outs: list[jax.Array], lses: list[jax.Array]) -> jax.Array:
    """Partial attention outputs ``[..., L, K]`` (float32) over disjoint key chunks, merged by their
    log-sum-exps ``[..., L]``: the softmax over all the keys."""
    top = functools.reduce(jnp.maximum, lses)
    weights = [jnp.exp(lse - top)[..., None] for lse in lses]
    total = functools.reduce(jnp.add, [w * o for w, o in zip(weights, outs, strict=True)])
    return total / functools.reduce(jnp.add, weights)


def _sharded(call, batch_heads: P, seq_axes: tuple[str, ...], q, k, v, q_ids, kv_ids, ring: bool = False):  # type: ignore[no-untyped-def]
    """``call`` per shard of ``[B, N, L, K]``: batch and heads as ``batch_heads``, the queries' sequence
    over ``seq_axes``, head dim whole (:func:`_kernel_layout`); keys and values whole (gathered), or
    with ``ring`` split like the queries (``call`` passes them around: :func:`_ring`)."""
    b, n = batch_heads
    seq = None if not seq_axes else seq_axes[0] if len(seq_axes) == 1 else seq_axes
    q_spec, kv_spec = P(b, n, seq, None), P(b, n, seq if ring else None, None)
    in_specs = (
        q_spec,
        kv_spec,
        kv_spec,
        None if q_ids is None else P(b, seq),
        None if kv_ids is None else P(b, None),
    )
    return jax.shard_map(call, in_specs=in_specs, out_specs=q_spec, check_vma=False)(q, k, v, q_ids, kv_ids)
