"""Context-parallel self-attention that exchanges the attention's *input* instead of its keys and
values (``TransformerConfig.attention_impl = "splash_input"``).

Why: in a context-parallel layout a shard needs every other shard's keys and values. Gathered
(``"splash"``) or ringed (``"splash_ring"``), that moves ``2 * (N / head_shards) * K`` features per
token to every head shard; the layer's input has ``D`` features per token, shared by the head shards
of a token shard. Here each head shard sends ``D / head_shards`` of its tokens' input features (the
head shards of one token shard together send the input once), gathers the rest of each arriving
chunk from its head-shard peers (on v7x the tensor axis is the two cores of a chip: that gather stays
on-chip), and projects the chunk's keys and values itself. The bytes over the context links fall
from ``2 * (N / head_shards) * K`` to ``D / head_shards`` per token: 2x for LTX-2's 19B video
self-attention on v7x-8 (tensor 2, ``N * K = D``), 25 MB per chip per layer instead of 50 MB, for
one more key/value projection of the remote tokens per shard (+10% of the step's matmul FLOPs).

The all-gather starts before the local projections and runs beside them: the projections and the
all-gather carry one XLA scheduling group (:func:`overlapped`). Compiled for v7x without the group,
libtpu issued the transfer and waited for it at once (benchmarks/results/docstring-findings-2026-11-29.md).
Each remote chunk's keys are rotated by its rows of the RoPE tables, which the transformer hands
over rolled per chunk offset and split like the tokens (:func:`chunk_tables`, once per forward):
tables kept whole instead were all-gathered in every layer, or sliced per chunk in copies, as
compiled (benchmarks/results/docstring-findings-2026-11-29.md).

The arithmetic is the attention module's: ``to_k``/``to_v`` (:func:`ltx2.layers.linear`), ``norm_k``
across all heads (the head shards' sums of squares added with ``psum``), RoPE, the splash kernel per
chunk, and the partial outputs merged by their log-sum-exps. Where it does not apply (no
sequence-sharded layout, a mask, chunks that are not whole 128-token tiles, cross-attention) the
attention takes ``"splash"``.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.experimental.xla_metadata import set_xla_metadata
from jax.sharding import PartitionSpec as P

from ltx2 import scopes
from ltx2.blocked_attention import pad_to
from ltx2.layers import linear, rms_norm
from ltx2.rope import RopeTables, apply_rope
from ltx2.sharding import constrain
from ltx2.splash_attention import BLOCK, LANES, _kernel_call, _kernel_layout, _merge, _round_up, _tile


class KVProjection(NamedTuple):
    """The parameters that turn an attention's input ``[B, S, D]`` into keys and values ``[B, S, N*K]``."""

    k_kernel: jax.Array  # [D, N*K]
    k_bias: jax.Array | None  # [N*K]
    v_kernel: jax.Array
    v_bias: jax.Array | None
    norm_scale: jax.Array | None  # norm_k's scale [N*K]


def chunk_count(
    impl: str, strategy: str | None, *, batch: int, heads: int, tokens: int, min_tokens: int = 1, bias: object = None
) -> int:
    """How many token chunks :func:`input_exchange_attention` exchanges for a self-attention of
    ``tokens`` tokens under ``impl``; 0 where it does not run (the attention takes ``"splash"``): it
    needs ``"splash_input"``, at least ``min_tokens`` tokens, no mask, and a strategy under a mesh
    that splits the tokens in more than one chunk of whole 128-token tiles."""
    if impl != "splash_input" or tokens < min_tokens or bias is not None:
        return 0
    if strategy is None or jax.sharding.get_abstract_mesh().empty:
        return 0
    _, _, shards = _kernel_layout(strategy, batch, heads, tokens)
    return shards if shards > 1 and tokens % (shards * LANES) == 0 else 0


_GROUPS = itertools.count(1)


def scheduling_group() -> int:
    """A fresh XLA scheduling-group id: one per attention call (an unrolled layer stack has many)."""
    return next(_GROUPS)


def overlapped(group: int | None) -> contextlib.AbstractContextManager[Any]:
    """Ops traced inside carry XLA's ``_scheduling_group_id`` ``group``: the latency-hiding scheduler
    runs a group's async collective (the input's all-gather) beside the group's other ops (the local
    Q/K/V projections). Without it libtpu issued the transfer and waited for it at once (the module
    docstring). libtpu refuses a group whose ops are joined
    through ops outside it ("annotation groups with gaps"), so the kernel on the local chunk, which
    reads the projections through the norms, stays out. Nothing for ``None``."""
    if group is None:
        return contextlib.nullcontext()
    return set_xla_metadata(_scheduling_group_id=str(group))


def _axes(entry: str | tuple[str, ...] | None) -> tuple[str, ...]:
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


class ChunkTables(NamedTuple):
    """RoPE tables per chunk offset: ``cos[j]``/``sin[j]`` the table rolled by ``j`` token chunks, so
    that a shard's own rows of entry ``j`` are those of the chunk ``j`` after its own (entry 0: the
    table itself). Split over the tokens like the activations. Separate arrays, not one stacked
    array: indexing a stacked one in the layer scan copied the tables in every layer (compiled for
    v7x: +12 GB of traffic per step)."""

    cos: tuple[jax.Array, ...]
    sin: tuple[jax.Array, ...]

    def at(self, offset: int) -> RopeTables:
        return RopeTables(self.cos[offset], self.sin[offset])


def _table_names(rope_type: str, rope_form: str) -> tuple[str | None, ...]:
    """Logical names of a table's dims (its batch dim is 1 or B: left whole)."""
    if rope_type == "interleaved":
        return (None, "activation_length", "heads")
    if rope_form == "fused":
        return (None, "activation_attention_heads", "activation_length", None)
    return (None, "activation_length", "activation_attention_heads", None)


def chunk_tables(
    rope: RopeTables, *, chunks: int, tokens: int, rope_type: str, rope_form: str, strategy: str
) -> ChunkTables:
    """``rope`` (over all ``tokens``) as :class:`ChunkTables` for ``chunks`` token chunks
    (:func:`chunk_count`; the rolls move rows between shards: once per forward, outside the layer scan)."""
    names = _table_names(rope_type, rope_form)
    axis = names.index("activation_length")
    per = tokens // chunks
    rolled = [
        tuple(constrain(jnp.roll(t, -j * per, axis=axis), names, strategy) for j in range(chunks))
        for t in (rope.cos, rope.sin)
    ]
    return ChunkTables(*rolled)


def input_exchange_attention(
    q_blnk: jax.Array,
    k_bsnk: jax.Array,
    v_bsnk: jax.Array,
    x_bsd: jax.Array,
    params: KVProjection,
    rope: ChunkTables | None,
    *,
    eps: float,
    partials: str,
    rope_type: str,
    rope_form: str,
    strategy: str,
    interpret: bool | None = None,
    block: int = BLOCK,
    group: int | None = None,
) -> jax.Array:
    """Self-attention of ``q_blnk [B, L, N, K]`` (normed and rotated) over the keys of all tokens ->
    ``[B, L, N, K]``. ``k_bsnk``/``v_bsnk`` (normed, rotated) serve each shard's own tokens; the
    others' are projected from ``x_bsd [B, L, D]`` (the input ``to_k``/``to_v`` read) where it
    arrives, and rotated by ``rope`` (:func:`chunk_tables`). ``group``: the scheduling group of the
    local projections (:func:`overlapped`), which the all-gather joins. Call only where
    :func:`chunk_count` is not 0."""
    B, L, N, K = q_blnk.shape
    (b, n), seq_axes, shards = _kernel_layout(strategy, B, N, L)
    seq = seq_axes[0] if len(seq_axes) == 1 else seq_axes
    head_axes = _axes(n)
    tile, _ = _tile(L // shards, block)
    mesh = jax.sharding.get_abstract_mesh()
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    head_shards = math.prod(sizes[a] for a in head_axes)
    split = head_shards > 1 and x_bsd.shape[-1] % head_shards == 0
    Kp = _round_up(K, LANES)
    to_kernel = lambda t: pad_to(jnp.swapaxes(t, 1, 2), 3, Kp)  # noqa: E731
    names = _table_names(rope_type, rope_form)
    # the other chunks' tables: (cos, sin) of offset 1, then of offset 2, ...
    tables: tuple[jax.Array, ...] = (
        () if rope is None else tuple(t for j in range(1, shards) for t in (rope.cos[j], rope.sin[j]))
    )

    def project(chunk: jax.Array, kk: KVProjection, cos_sin: tuple[jax.Array, ...]) -> tuple[jax.Array, jax.Array]:
        with scopes.scope(scopes.QKV):
            k = linear(chunk, kk.k_kernel, kk.k_bias, partials)
            v = linear(chunk, kk.v_kernel, kk.v_bias, partials)
            k = rms_norm(k, eps, kk.norm_scale, shard_axes=head_axes)
        if cos_sin:
            k = apply_rope(k, RopeTables(*cos_sin), rope_type, rope_form)
        heads = lambda t: to_kernel(t.reshape(*t.shape[:2], -1, K))  # noqa: E731
        return heads(k), heads(v)

    def body(interp: bool, q, k, v, x, kk, *chunk_cos_sin):  # type: ignore[no-untyped-def]
        call = functools.partial(_kernel_call, bq=tile, bk=tile, interpret=interp)
        if split:  # each head shard sends its share of the features; its peers' shares come on-chip
            width = x.shape[-1] // head_shards
            x = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(head_axes) * width, width, axis=2)
        own = jax.lax.axis_index(seq_axes)  # all_gather numbers the shards as the tokens: row-major over seq_axes
        with scopes.scope(scopes.CORE):
            with overlapped(group):
                every = jax.lax.all_gather(x, seq_axes, axis=0)
            out, (lse,) = call(q, k, v, None, None, residuals=True)
        outs, lses = [out.astype(jnp.float32)], [lse]
        for j in range(1, shards):
            with scopes.scope(scopes.CORE):
                piece = jax.lax.dynamic_index_in_dim(every, (own + j) % shards, 0, keepdims=False)
                chunk = jax.lax.all_gather(piece, head_axes, axis=2, tiled=True) if split else piece
            k, v = project(chunk, kk, tuple(chunk_cos_sin[2 * j - 2 : 2 * j]))  # its rows: chunk own + j's
            with scopes.scope(scopes.CORE):
                out, (lse,) = call(q, k, v, None, None, residuals=True)
            outs.append(out.astype(jnp.float32))
            lses.append(lse)
        with scopes.scope(scopes.CORE):
            return _merge(outs, lses).astype(q.dtype)

    q_spec = P(b, n, seq, None)
    w_spec, v_spec = P(None, n), P(n)
    kk_spec = KVProjection._make(  # the parameters' specs, in the parameters' pytree
        None if value is None else spec
        for value, spec in zip(params, (w_spec, v_spec, w_spec, v_spec, v_spec), strict=True)
    )
    mesh_names = {"activation_length": seq, "activation_attention_heads": n, "heads": n}
    table_spec = P(None, *(mesh_names.get(name) if name else None for name in names[1:]))
    in_specs = (q_spec, q_spec, q_spec, P(b, seq, None), kk_spec, *(table_spec for _ in tables))

    def run(interp: bool, *args: jax.Array | KVProjection) -> jax.Array:
        fn = functools.partial(body, interp)
        return jax.shard_map(fn, in_specs=in_specs, out_specs=q_spec, check_vma=False)(*args)

    q = (q_blnk.astype(jnp.float32) / math.sqrt(K)).astype(q_blnk.dtype)  # the kernel does not scale
    args: tuple[jax.Array | KVProjection, ...] = (to_kernel(q), to_kernel(k_bsnk), to_kernel(v_bsnk), x_bsd, params)
    args += tables
    device = mesh.abstract_device
    if interpret is None and device is not None:  # the mesh says where it runs: no platform switch
        interpret = device.platform != "tpu"
    if interpret is None:
        out = jax.lax.platform_dependent(*args, tpu=functools.partial(run, False), default=functools.partial(run, True))
    else:
        out = run(interpret, *args)
    out_blnk = jnp.swapaxes(out[..., :K], 1, 2).astype(q_blnk.dtype)
    return constrain(out_blnk, ("activation_batch", "activation_length", "heads", None), strategy)
