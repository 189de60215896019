"""LTX-2 attention: projections, RMS q/k norm across heads, RoPE, scaled dot product, gates.

Follows diffusers ``LTX2Attention`` with ``LTX2AudioVideoAttnProcessor`` and
``LTX2PerturbedAttnProcessor`` (``diffusers/models/transformers/transformer_ltx2.py``).
The score/value computation is one function, :func:`dot_product_attention`, selected by
``TransformerConfig.attention_impl`` so that fused or blocked kernels can replace it.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from ltx2 import input_exchange, scopes
from ltx2.blocked_attention import blocked_attention
from ltx2.config import ATTENTION_IMPLS
from ltx2.layers import Linear, RMSNorm, join_chunks, token_chunks
from ltx2.rope import RopeTables, apply_rope
from ltx2.splash_attention import splash_attention

# "auto" picks the blocked path on CPU from this many logits (8 MiB of float32) on: measured on 2
# cores, blocked ran 0.45x the XLA path's time at 2x8x1536x1536 and 0.65x at 2x4x576x576 (the
# `small` self-attention), and about even below ~1M logits (text and audio cross-attention).
AUTO_BLOCKED_MIN_LOGITS = 1 << 21
_CUDNN_DTYPES = (jnp.bfloat16, jnp.float16)


def resolve_attention_impl(
    impl: str, q_blnk: jax.Array, k_bsnk: jax.Array, *, sharded: bool = False, min_tokens: int = 1
) -> str:
    """The concrete kernel for ``impl`` on the default backend: XLA's einsum path where the queries
    or the keys number fewer than ``min_tokens``; "auto" -> cuDNN on GPU for 16-bit inputs, blocked
    on CPU for large unsharded problems, else XLA's einsum path."""
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
    if min(q_blnk.shape[1], k_bsnk.shape[1]) < min_tokens:
        return "xla"
    if impl != "auto":
        return impl
    backend = jax.default_backend()
    if backend == "gpu" and q_blnk.dtype in _CUDNN_DTYPES and q_blnk.shape[-1] <= 128:
        return "cudnn"
    B, L, N, _ = q_blnk.shape
    if backend == "cpu" and not sharded and B * N * L * k_bsnk.shape[1] >= AUTO_BLOCKED_MIN_LOGITS:
        return "blocked"
    return "xla"


@scopes.scoped(scopes.CORE)
def dot_product_attention(
    q_blnk: jax.Array,
    k_bsnk: jax.Array,
    v_bsnk: jax.Array,
    bias: jax.Array | None = None,
    *,
    impl: str = "xla",
    strategy: str = "replicated",
    min_tokens: int = 1,
) -> jax.Array:
    """``softmax(q k^T / sqrt(K) + bias) v`` per head -> ``[B, L, N, K]``; scores, softmax and
    value sums accumulate in float32. ``bias`` broadcasts to ``[B, N, L, S]`` (additive mask).

    ``impl`` (``TransformerConfig.attention_impl``): "xla" (einsum + softmax), "blocked"
    (online softmax over query/key tiles, for CPU), "cudnn" (``jax.nn.dot_product_attention``'s
    fused GPU kernel, 16-bit inputs), "splash" (the Pallas TPU flash kernel, see
    :mod:`ltx2.splash_attention`; key-padding masks only; a sharding ``strategy`` other than
    "replicated" runs it per shard), "splash_ring" (splash with a sequence-sharded layout's keys and
    values passed around the context ring, each shard's chunk attended while the next one arrives,
    instead of gathered first), "splash_input" (for self-attention, run by :class:`Attention`: the
    layer's input exchanged and each chunk's keys and values projected where it arrives,
    :mod:`ltx2.input_exchange`; here, as "splash") or "auto" (see
    :func:`resolve_attention_impl`; a sharded ``strategy`` keeps the XLA path, whose einsums GSPMD
    partitions without gathers). Attentions with fewer than ``min_tokens`` queries or keys take the
    XLA path whatever ``impl`` says.
    """
    sharded = strategy != "replicated"
    impl = resolve_attention_impl(impl, q_blnk, k_bsnk, sharded=sharded, min_tokens=min_tokens)
    if impl in ("splash", "splash_ring", "splash_input"):  # the input exchange needs the module: Attention
        exchange = "ring" if impl == "splash_ring" else "gather"
        return splash_attention(q_blnk, k_bsnk, v_bsnk, bias, strategy=strategy if sharded else None, kv=exchange)
    if impl == "blocked":
        return blocked_attention(q_blnk, k_bsnk, v_bsnk, bias)
    if impl == "cudnn":
        if jax.default_backend() != "gpu":
            raise ValueError(f"attention_impl='cudnn' needs a GPU backend, this one is {jax.default_backend()!r}")
        return jax.nn.dot_product_attention(q_blnk, k_bsnk, v_bsnk, bias, implementation="cudnn")
    return _xla_attention(q_blnk, k_bsnk, v_bsnk, bias)


def _xla_attention(q_blnk: jax.Array, k_bsnk: jax.Array, v_bsnk: jax.Array, bias: jax.Array | None) -> jax.Array:
    """Normalised after the value matmul, as torch's CPU attention and the flash kernels do: the
    unnormalised weights ``exp(s - max)`` (the largest exactly 1) go to the value dtype for the
    matmul, their float32 row sum divides its float32 accumulator, one rounding at the end.
    Rounding the normalised probabilities instead made the bf16 DiT worse than diffusers' bf16
    (benchmarks/results/bf16-softmax-order-2026-11-29.md)."""
    scale = 1.0 / math.sqrt(q_blnk.shape[-1])
    # Heads-major operands: with batch dims leading, XLA:CPU emits a batched GEMM; the same
    # einsum on [B, L, N, K] operands ran ~3.5x slower (1024 tokens, 4 heads).
    q_bnlk, k_bnsk, v_bnsk = (jnp.swapaxes(t, 1, 2) for t in (q_blnk, k_bsnk, v_bsnk))
    logits_bnls = jnp.einsum("bnlk,bnsk->bnls", q_bnlk, k_bnsk, preferred_element_type=jnp.float32) * scale
    if bias is not None:
        logits_bnls = logits_bnls + bias.astype(jnp.float32)
    weights_bnls = jnp.exp(logits_bnls - jax.lax.stop_gradient(logits_bnls.max(-1, keepdims=True)))
    out_bnlk = jnp.einsum(
        "bnls,bnsk->bnlk", weights_bnls.astype(v_bnsk.dtype), v_bnsk, preferred_element_type=jnp.float32
    )
    out_bnlk = out_bnlk / weights_bnls.sum(-1, keepdims=True)
    return jnp.swapaxes(out_bnlk, 1, 2).astype(q_blnk.dtype)


class Attention(nnx.Module):
    """Multi-head attention of LTX-2 (self, text cross, or audio<->video cross attention).

    ``to_q/to_k/to_v/to_out`` (with bias), ``norm_q``/``norm_k`` affine RMSNorm over all heads
    (N*K), optional RoPE on q and k (separate tables allowed), optional per-head output gates
    ``2 * sigmoid(to_gate_logits(x))`` (LTX-2.3 ``apply_gated_attention``). ``impl`` and
    ``strategy`` (a sharding strategy name) choose the score/value kernel (:func:`dot_product_attention`),
    for sequences of at least ``min_tokens`` queries and keys (shorter ones: the XLA path).
    ``partials``: where the projections round their products (:data:`ltx2.layers.LINEAR_PARTIALS`).
    ``qk_float32``: the Q/K norms return float32, so RoPE and the score kernel take float32 queries and
    keys (``TransformerConfig.qk_dtype``); the output is rounded to the values' dtype before ``to_out``.
    """

    def __init__(
        self,
        query_dim: int,
        context_dim: int,
        heads: int,
        head_dim: int,
        *,
        bias: bool = True,
        out_bias: bool = True,
        gated: bool = False,
        eps: float = 1e-6,
        rope_type: str = "split",
        rope_form: str = "concat",
        impl: str = "xla",
        strategy: str = "replicated",
        min_tokens: int = 1,
        param_dtype: jnp.dtype = jnp.float32,
        partials: str = "float32",
        qk_float32: bool = False,
        rngs: nnx.Rngs,
    ):
        if heads <= 0 or head_dim <= 0:
            raise ValueError(f"Attention needs positive heads and head_dim, got {heads=}, {head_dim=}")
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"attention_impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
        if qk_float32 and impl == "splash_input":
            raise ValueError(
                "qk_dtype='float32' with attention_impl='splash_input': the exchange projects its keys"
                " in the activation dtype"
            )
        inner = heads * head_dim
        kw: dict[str, Any] = dict(dtype=param_dtype, partials=partials, rngs=rngs)
        self.to_q = Linear(query_dim, inner, axes=("qkv_in", "heads"), use_bias=bias, **kw)
        self.to_k = Linear(context_dim, inner, axes=("qkv_in", "heads"), use_bias=bias, **kw)
        self.to_v = Linear(context_dim, inner, axes=("qkv_in", "heads"), use_bias=bias, **kw)
        self.to_out = Linear(inner, query_dim, axes=("heads", "attn_out"), use_bias=out_bias, **kw)
        self.norm_q = RMSNorm(inner, eps=eps, axis_name="heads", out_float32=qk_float32)
        self.norm_k = RMSNorm(inner, eps=eps, axis_name="heads", out_float32=qk_float32)
        self.to_gate_logits = Linear(query_dim, heads, axes=("embed", None), **kw) if gated else None
        self.heads, self.head_dim, self.rope_type, self.impl, self.strategy = heads, head_dim, rope_type, impl, strategy
        self.rope_form = rope_form
        self.min_tokens = min_tokens
        scopes.label(self, scopes.ATTENTION_CHILDREN)

    @scopes.module_scope
    def __call__(
        self,
        x_bld: jax.Array,
        context_bsd: jax.Array | None = None,
        *,
        bias: jax.Array | None = None,
        q_rope: RopeTables | None = None,
        k_rope: RopeTables | None = None,
        keep: jax.Array | None = None,
        kv: tuple[jax.Array, jax.Array] | None = None,
        out_chunks: int = 1,
    ) -> jax.Array:
        """``x_bld [B, L, Dq]`` attends to ``context_bsd [B, S, Dc]`` (itself if None) -> ``[B, L, Dq]``.

        ``bias`` broadcasts to ``[B, N, L, S]``. ``keep`` (``[B, 1, 1]``, STG) mixes the attention
        output with the value projection per row: 1 keeps attention, 0 returns ``to_v(x)``
        (``torch.lerp(value, attention, keep)`` in ``LTX2PerturbedAttnProcessor``). ``kv``: keys and
        values ``[B, S, N*K]`` already projected by :meth:`project_kv` (then ``context_bsd`` is unused).
        ``out_chunks``: the output projection on that many strided token chunks (``token_chunks``).
        """
        chunks = self._input_exchange(x_bld, bias, context_bsd, kv, k_rope)
        group = input_exchange.scheduling_group() if chunks else None
        if chunks:  # the local projections run while the input travels (kv is None: a self-attention)
            with input_exchange.overlapped(group):
                q, k, v = self.to_q(x_bld), self.to_k(x_bld), self.to_v(x_bld)
            q, k = self.norm_q(q), self.norm_k(k)
        else:  # in this order: XLA:CPU fused the reordered program differently (a paired bench 8% slower)
            q = self.norm_q(self.to_q(x_bld))
            k, v = self.project_kv(x_bld if context_bsd is None else context_bsd) if kv is None else kv
        per_chunk = q_rope if isinstance(q_rope, input_exchange.ChunkTables) else None
        if per_chunk is not None:
            q_rope = per_chunk.at(0)  # the tables themselves
        if q_rope is not None:
            q = apply_rope(q, q_rope, self.rope_type, self.rope_form)
            k = apply_rope(k, q_rope if k_rope is None else k_rope, self.rope_type, self.rope_form)
        heads = lambda t: t.reshape(*t.shape[:-1], self.heads, self.head_dim)  # noqa: E731
        if chunks:
            if q_rope is not None and (per_chunk is None or len(per_chunk.cos) != chunks):
                per_chunk = input_exchange.chunk_tables(
                    q_rope,
                    chunks=chunks,
                    tokens=x_bld.shape[1],
                    rope_type=self.rope_type,
                    rope_form=self.rope_form,
                    strategy=self.strategy,
                )
            params = input_exchange.KVProjection(
                self.to_k.kernel[...],
                None if self.to_k.bias is None else self.to_k.bias[...],
                self.to_v.kernel[...],
                None if self.to_v.bias is None else self.to_v.bias[...],
                None if self.norm_k.scale is None else self.norm_k.scale[...],
            )
            out = input_exchange.input_exchange_attention(
                heads(q),
                heads(k),
                heads(v),
                x_bld,
                params,
                per_chunk if q_rope is not None else None,
                eps=self.norm_k.eps,
                partials=self.to_k.partials,
                rope_type=self.rope_type,
                rope_form=self.rope_form,
                strategy=self.strategy,
                group=group,
            )
        else:
            out = dot_product_attention(
                heads(q), heads(k), heads(v), bias, impl=self.impl, strategy=self.strategy, min_tokens=self.min_tokens
            )
        out = out.reshape(*out.shape[:-2], -1).astype(v.dtype)  # qk_float32: float32 out, rounded as the values
        if keep is not None:
            keep = keep.astype(out.dtype)
            out = jnp.where(keep == 1, out, v + keep * (out - v))
        if self.to_gate_logits is not None:
            gates_bln = 2.0 * jax.nn.sigmoid(self.to_gate_logits(x_bld))
            out = (heads(out) * gates_bln[..., None]).reshape(out.shape)
        if out_chunks > 1:
            return join_chunks([self.to_out(o) for o in token_chunks(out, out_chunks, out.shape[1])])
        return self.to_out(out)

    def _input_exchange(
        self, x_bld: jax.Array, bias: jax.Array | None, context: jax.Array | None, kv: object, k_rope: object
    ) -> int:
        """How many token chunks :func:`ltx2.input_exchange.input_exchange_attention` exchanges for
        this call (0: it does not run): the impl, a self-attention of at least ``min_tokens`` tokens
        projected here (no precomputed keys, no separate key RoPE), where the exchange applies."""
        if context is not None or kv is not None or k_rope is not None:
            return 0
        B, L = x_bld.shape[:2]
        return input_exchange.chunk_count(
            self.impl, self.strategy, batch=B, heads=self.heads, tokens=L, min_tokens=self.min_tokens, bias=bias
        )

    def project_kv(self, context_bsd: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Keys (``norm_k`` applied, no RoPE) and values ``[B, S, N*K]`` of ``context_bsd [B, S, Dc]``:
        what a cross-attention over a fixed context (the text) can compute once and reuse."""
        return self.norm_k(self.to_k(context_bsd)), self.to_v(context_bsd)
