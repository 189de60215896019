"""Context-parallel self-attention that exchanges the attention's *input* instead of its keys and
values (``TransformerConfig.attention_impl``: ``"splash_input"``, all at once; ``"splash_input_ring"``,
chunk by chunk around the ring).

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

The exchange starts before the local projections and runs beside them: the projections and the
input's all-gather carry one XLA scheduling group (:func:`overlapped`). Compiled for v7x without
the group, libtpu issued the transfer and waited for it at once (0.27 ms per layer, nothing beside
it). The ring form passes one chunk per step while the kernel attends the one a shard holds.

The arithmetic is the attention module's: ``to_k``/``to_v`` (:func:`ltx2.layers.linear`), ``norm_k``
across all heads (the head shards' sums of squares added with ``psum``), RoPE from the chunk's rows of
the full tables, the splash kernel per chunk, and the partial outputs merged by their log-sum-exps.
Where it does not apply (no sequence-sharded layout, a mask, chunks that are not whole 128-token
tiles, cross-attention) the attention takes ``"splash_ring"``.
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

EXCHANGES = ("gather", "ring")


class KVProjection(NamedTuple):
    """The parameters that turn an attention's input ``[B, S, D]`` into keys and values ``[B, S, N*K]``."""

    k_kernel: jax.Array  # [D, N*K]
    k_bias: jax.Array | None  # [N*K]
    v_kernel: jax.Array
    v_bias: jax.Array | None
    norm_scale: jax.Array | None  # norm_k's scale [N*K]


def applies(strategy: str | None, batch: int, heads: int, tokens: int, bias: jax.Array | None) -> bool:
    """Whether :func:`input_exchange_attention` runs for a self-attention of ``tokens`` tokens (else the
    caller takes ``"splash_ring"``): a strategy under a mesh that splits the tokens in more than one
    chunk of whole 128-token tiles, no mask."""
    if strategy is None or jax.sharding.get_abstract_mesh().empty or bias is not None:
        return False
    _, _, shards = _kernel_layout(strategy, batch, heads, tokens)
    return shards > 1 and tokens % (shards * LANES) == 0


_GROUPS = itertools.count(1)


def scheduling_group() -> int:
    """A fresh XLA scheduling-group id: one per attention call (an unrolled layer stack has many)."""
    return next(_GROUPS)


def overlapped(group: int | None) -> contextlib.AbstractContextManager[Any]:
    """Ops traced inside carry XLA's ``_scheduling_group_id`` ``group``: the latency-hiding scheduler
    runs a group's async collective (the input's first hop) beside the group's other ops (the local
    chunk's projections and kernel). Without it libtpu issued the hop and waited for it at once
    (compiled for v7x: 0.27 ms per layer with nothing beside it). Nothing for ``None``."""
    if group is None:
        return contextlib.nullcontext()
    return set_xla_metadata(_scheduling_group_id=str(group))


def _axes(entry: str | tuple[str, ...] | None) -> tuple[str, ...]:
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def _ring_position(seq_axes: tuple[str, ...], sizes: dict[str, int], mesh_axes: tuple[str, ...]) -> jax.Array:
    """This shard's index in ``ppermute``'s numbering of the shards over ``seq_axes``: row-major in the
    *mesh's* axis order (checked: over ("context", "fsdp") of a (fsdp, context, tensor) mesh, shard
    (fsdp 0, context 1) passes to (fsdp 1, context 0)), which is not the token order when the
    layout lists the axes in another order."""
    pos = jnp.int32(0)
    for a in (a for a in mesh_axes if a in seq_axes):
        pos = pos * sizes[a] + jax.lax.axis_index(a)
    return pos


def _token_shard(
    pos: jax.Array, seq_axes: tuple[str, ...], sizes: dict[str, int], mesh_axes: tuple[str, ...]
) -> jax.Array:
    """The token chunk (row-major over ``seq_axes`` in the layout's order, as ``P(seq_axes)`` splits
    the tokens) of the shard at ring position ``pos`` (:func:`_ring_position`)."""
    digits = {}
    for a in reversed([a for a in mesh_axes if a in seq_axes]):
        digits[a], pos = pos % sizes[a], pos // sizes[a]
    index = jnp.int32(0)
    for a in seq_axes:
        index = index * sizes[a] + digits[a]
    return index


def _table_spec(t: jax.Array, b: object, n: object, rope_type: str, rope_form: str) -> tuple[P, int]:
    """(spec, token axis) of a full RoPE table inside the ring: heads split like the kernel's heads,
    every token; a size-1 batch dimension stays whole."""
    bb = b if t.shape[0] > 1 else None
    if rope_type == "interleaved":
        return P(bb, None, n), 1
    if rope_form == "fused":
        return P(bb, n, None, None), 2
    return P(bb, None, n, None), 1


def input_exchange_attention(
    q_bld: jax.Array,
    k_bld: jax.Array,
    v_bld: jax.Array,
    x_bld: jax.Array,
    params: KVProjection,
    rope: RopeTables | None,
    *,
    head_dim: int,
    eps: float,
    partials: str,
    rope_type: str,
    rope_form: str,
    strategy: str,
    interpret: bool | None = None,
    block: int = BLOCK,
    group: int | None = None,
    exchange: str = "gather",
) -> jax.Array:
    """Self-attention of the queries ``q_bld [B, L, N*K]`` (normed, not rotated) over the keys of
    all tokens -> ``[B, L, N, K]``. ``k_bld``/``v_bld`` (keys normed, not rotated) serve each shard's
    own tokens; the others' are projected from ``x_bld [B, L, D]`` (the input ``to_k``/``to_v`` read)
    where it arrives. ``rope``: the tables over all ``L`` tokens (the transformer lays them out
    unsplit for these impls), applied inside to every chunk, the local one included, so that the
    layer scan holds them unsplit (rotating the local queries outside had GSPMD keep them split
    and all-gather them in every layer: 2 x 25 MB per device per layer compiled for v6e).
    ``group``: the scheduling group of the local projections (:func:`overlapped`), which the
    exchange's first transfer joins. ``exchange``: ``"gather"`` (one all-gather of every shard's
    input) or ``"ring"`` (one chunk passed on per step). Call only where :func:`applies`."""
    if exchange not in EXCHANGES:
        raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
    B, L, _ = q_bld.shape
    K = head_dim
    N = q_bld.shape[-1] // K
    (b, n), seq_axes, shards = _kernel_layout(strategy, B, N, L)
    seq = seq_axes[0] if len(seq_axes) == 1 else seq_axes
    head_axes = _axes(n)
    tile, _ = _tile(L // shards, block)
    mesh = jax.sharding.get_abstract_mesh()
    sizes = dict(zip(mesh.axis_names, mesh.axis_sizes, strict=True))
    head_shards = math.prod(sizes[a] for a in head_axes)
    split = head_shards > 1 and x_bld.shape[-1] % head_shards == 0
    Kp = _round_up(K, LANES)
    heads = lambda t: pad_to(jnp.swapaxes(t.reshape(*t.shape[:2], -1, K), 1, 2), 3, Kp)  # noqa: E731
    perm = [(i, (i + 1) % shards) for i in range(shards)]
    tables = () if rope is None else (rope.cos, rope.sin)
    table_specs = [_table_spec(t, b, n, rope_type, rope_form) for t in tables]

    def rotate(t: jax.Array, src: jax.Array, cos_sin: tuple[jax.Array, ...]) -> jax.Array:
        """``t [b, s, n*K]`` rotated by the table rows of token chunk ``src``."""
        if not cos_sin:
            return t
        s_loc = t.shape[1]
        part = [
            jax.lax.dynamic_slice_in_dim(table, src * s_loc, s_loc, axis=spec[1])
            for table, spec in zip(cos_sin, table_specs, strict=True)
        ]
        return apply_rope(t, RopeTables(*part), rope_type, rope_form)

    def project(chunk: jax.Array, src: jax.Array, kk: KVProjection, cos_sin: tuple[jax.Array, ...]) -> tuple:  # type: ignore[type-arg]
        with scopes.scope(scopes.QKV):
            k = linear(chunk, kk.k_kernel, kk.k_bias, partials)
            v = linear(chunk, kk.v_kernel, kk.v_bias, partials)
            k = rms_norm(k, eps, kk.norm_scale, shard_axes=head_axes)
        return heads(rotate(k, src, cos_sin)), heads(v)

    def body(interp: bool, q, k, v, x, kk, *cos_sin):  # type: ignore[no-untyped-def]
        call = functools.partial(_kernel_call, bq=tile, bk=tile, interpret=interp)
        own = jax.lax.axis_index(seq_axes)  # this shard's token chunk (row-major over seq_axes)
        q = rotate(q, own, cos_sin)
        q = heads((q.astype(jnp.float32) / math.sqrt(K)).astype(q.dtype))  # the kernel does not scale
        k, v = heads(rotate(k, own, cos_sin)), heads(v)
        if split:  # each head shard sends its share of the features; its peers' shares come on-chip
            width = x.shape[-1] // head_shards
            x = jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(head_axes) * width, width, axis=2)
        if exchange == "gather":
            return _gathered(call, q, k, v, x, own, lambda chunk, r: project(chunk, r, kk, cos_sin))
        pos = _ring_position(seq_axes, sizes, mesh.axis_names)
        outs, lses = [], []
        for step in range(shards):
            with scopes.scope(scopes.CORE):
                with overlapped(group if step == 0 else None):
                    nxt = jax.lax.ppermute(x, seq_axes, perm) if step + 1 < shards else None
                out, (lse,) = call(q, k, v, None, None, residuals=True)
            outs.append(out.astype(jnp.float32))
            lses.append(lse)
            if nxt is not None:
                x = nxt
                with scopes.scope(scopes.CORE):
                    chunk = jax.lax.all_gather(x, head_axes, axis=2, tiled=True) if split else x
                src = _token_shard((pos - step - 1) % shards, seq_axes, sizes, mesh.axis_names)
                k, v = project(chunk, src, kk, cos_sin)
        with scopes.scope(scopes.CORE):
            return _merge(outs, lses).astype(q.dtype)

    def _gathered(call, q, k, v, x, own, project_at):  # type: ignore[no-untyped-def]
        """Every shard's input at once (one all-gather, which libtpu runs asynchronously beside the
        local projections; it numbers the shards as the tokens), the local chunk attended, then each
        other chunk projected and attended."""
        with scopes.scope(scopes.CORE):
            with overlapped(group):
                every = jax.lax.all_gather(x, seq_axes, axis=0)
            out, (lse,) = call(q, k, v, None, None, residuals=True)
        outs, lses = [out.astype(jnp.float32)], [lse]
        for j in range(1, shards):
            r = (own + j) % shards
            with scopes.scope(scopes.CORE):
                piece = jax.lax.dynamic_index_in_dim(every, r, 0, keepdims=False)
                chunk = jax.lax.all_gather(piece, head_axes, axis=2, tiled=True) if split else piece
            k, v = project_at(chunk, r)
            with scopes.scope(scopes.CORE):
                out, (lse,) = call(q, k, v, None, None, residuals=True)
            outs.append(out.astype(jnp.float32))
            lses.append(lse)
        with scopes.scope(scopes.CORE):
            return _merge(outs, lses).astype(q.dtype)

    token_spec, out_spec = P(b, seq, n), P(b, n, seq, None)
    w_spec, v_spec = P(None, n), P(n)
    kk_spec = KVProjection._make(  # the parameters' specs, in the parameters' pytree
        None if value is None else spec
        for value, spec in zip(params, (w_spec, v_spec, w_spec, v_spec, v_spec), strict=True)
    )
    in_specs = (token_spec, token_spec, token_spec, P(b, seq, None), kk_spec, *(spec for spec, _ in table_specs))

    def run(interp: bool, *args: jax.Array | KVProjection) -> jax.Array:
        fn = functools.partial(body, interp)
        return jax.shard_map(fn, in_specs=in_specs, out_specs=out_spec, check_vma=False)(*args)

    args = (q_bld, k_bld, v_bld, x_bld, params, *tables)
    device = jax.sharding.get_abstract_mesh().abstract_device
    if interpret is None and device is not None:  # the mesh says where it runs: no platform switch
        interpret = device.platform != "tpu"
    if interpret is None:
        out = jax.lax.platform_dependent(*args, tpu=functools.partial(run, False), default=functools.partial(run, True))
    else:
        out = run(interpret, *args)
    out_blnk = jnp.swapaxes(out[..., :K], 1, 2).astype(q_bld.dtype)
    return constrain(out_blnk, ("activation_batch", "activation_length", "heads", None), strategy)


def unsplit_tables(rope: RopeTables, rope_type: str, rope_form: str, strategy: str) -> RopeTables:
    """``rope`` laid out with every token on every shard (heads split as the kernel's): the ring reads
    any chunk's rows. The tables are built from the grid once per forward, before the layer scan."""
    if rope_type == "interleaved":
        names: tuple[str | None, ...] = (None, None, "heads")
    elif rope_form == "fused":
        names = (None, "activation_attention_heads", None, None)
    else:
        names = (None, None, "activation_attention_heads", None)
    return RopeTables(*(constrain(t, names, strategy) for t in (rope.cos, rope.sin)))
