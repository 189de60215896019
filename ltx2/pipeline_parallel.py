"""The transformer blocks as an interleaved pipeline (``TransformerConfig.pipeline_stages`` = S > 1).

Why: with the weights split over a tensor axis, every block all-reduces its projections' outputs;
where that axis is a chip-to-chip link (v6e-8: the 19B weights, 37.8 GB in bf16, need two chips),
those all-reduces bound the step. Here the "layers" rule's mesh axes hold S stages instead: stage s
keeps layers s, s + S, s + 2S, ... whole (the stacked weights are stored stage-major,
:func:`stored_order`), the batch rows split into S microbatches, and at step t stage s runs layer
t - m of microbatch m = (t - s) mod S; then every stage hands its activations to the next (one
collective-permute). L + S - 1 steps for L layers: each stage idles S - 1 of them.

Every stage runs the same block function on its own layer's weights and microbatch, under
``jax.vmap`` with ``spmd_axis_name`` the stage axes, so the block's sharding rules (tokens over
context, ...) apply within each stage. The batch rows are the microbatches, so the strategy must
not split ``activation_batch`` over the stage axes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2.block import RESIDUAL, Block, BlockInputs, TextKV, constrain_streams, take_rows
from ltx2.config import TransformerConfig
from ltx2.sharding import audio_names, constrain, mesh_axes_in_context, shards

# A block over one layer: (layer state, x, a, block inputs, STG flag, text K/V) -> (x, a)
BlockFn = Callable[[Any, jax.Array, jax.Array, Any, Any, Any], tuple[jax.Array, jax.Array]]


def _per_stage(num_layers: int, stages: int) -> int:
    """L / S: each stage's layer count; ValueError when the stages do not divide the layers."""
    if stages < 1 or num_layers % stages:
        raise ValueError(f"{stages} pipeline stages do not divide {num_layers} layers")
    return num_layers // stages


def _by_stage(tree: Any, stages: int) -> Any:
    """A stage-major stack's ``[L, ...]`` leaves as ``[S, L/S, ...]``: stage s's layers at index s."""
    per = _per_stage(jax.tree.leaves(tree)[0].shape[0], stages)
    return jax.tree.map(lambda v: v.reshape(stages, per, *v.shape[1:]), tree)


def stored_order(num_layers: int, stages: int) -> np.ndarray:
    """The model layer at each stored index of a stage-major stack: stage s's slice (stored
    ``[s * L/S, (s + 1) * L/S)``) holds layers s, s + S, ...; the identity for one stage."""
    per = _per_stage(num_layers, stages)
    return np.array([j * stages + s for s in range(stages) for j in range(per)])


def store_stage_major(blocks: nnx.Module, stages: int) -> None:
    """Reorder a stacked block module (model order, ``[L, ...]`` leaves) in place into the
    stage-major order :func:`stored_order` gives (the weight converter's last step)."""
    state = nnx.state(blocks)
    order = stored_order(jax.tree.leaves(state)[0].shape[0], stages)
    nnx.update(blocks, jax.tree.map(lambda v: v[order], state))


def stage_axes(strategy: str, stages: int) -> tuple[str, ...]:
    """The mesh axes the "layers" rule puts the stages on (empty without a mesh); ValueError when
    their size is not ``stages``, naming the rule."""
    if jax.sharding.get_abstract_mesh().empty:
        return ()
    axes, size = mesh_axes_in_context(strategy, "layers"), shards(strategy, "layers")
    if size != stages:
        raise ValueError(
            f"pipeline_stages={stages}: the strategy's 'layers' rule {axes} spans {size} devices; it must "
            f"span the stages (e.g. sharding.rules.layers = ['data'] on a data axis of {stages})"
        )
    if set(axes) & set(mesh_axes_in_context(strategy, "activation_batch")):
        raise ValueError(f"pipeline_stages={stages}: activation_batch cannot be split over the stage axes {axes}")
    return axes


def map_layers(fn: Callable[[Any], Any], state: Any, stages: int, strategy: str) -> Any:
    """``fn`` over each layer of the stage-major stacked ``state`` (``[L, ...]`` leaves), results
    stacked ``[L, ...]`` in the same stored order. Each stage maps over its own ``L/S`` layers on its
    own chips (``jax.vmap`` over the stages with ``spmd_axis_name`` their mesh axes): a plain
    ``lax.map`` over the whole stack indexes a stack split over the stage axes, which the partitioner
    answers by all-gathering every stacked weight at each layer
    (benchmarks/results/docstring-findings-2026-11-29.md)."""
    by_stage = _by_stage(state, stages)
    axes = stage_axes(strategy, stages)
    out = jax.vmap(lambda st: jax.lax.map(fn, st), spmd_axis_name=axes or None)(by_stage)
    return jax.tree.map(lambda v: v.reshape(-1, *v.shape[2:]), out)


def run(
    block: BlockFn,
    state: Any,
    x: jax.Array,
    a: jax.Array,
    inputs: Any,
    flags: jax.Array | None,
    kv: Any,
    *,
    stages: int,
    strategy: str,
    residual: tuple[str, ...],
) -> tuple[jax.Array, jax.Array]:
    """The blocks of the stage-major stacked ``state`` (``[L, ...]`` leaves) over ``x [B, ...]`` and
    ``a [B, ...]`` as the pipeline (module docstring). ``inputs``: the blocks' inputs, leaves
    ``[B, ...]`` split with the rows or ``[1, ...]`` shared; ``flags [L]`` and ``kv`` (``[L, B, ...]``
    leaves: one row per batch row) in stored order, or None. ``residual``: the logical names of a
    stream's layout (the audio stream's by :func:`ltx2.sharding.audio_names`); each stage hands both
    on to the next (stage s -> s + 1) after every step."""
    B, L = x.shape[0], jax.tree.leaves(state)[0].shape[0]
    if B % stages:
        raise ValueError(f"pipeline_stages={stages} must divide the batch ({B} rows): the rows are the microbatches")
    per, mb, S = _per_stage(L, stages), B // stages, stages
    axes = stage_axes(strategy, S)
    spmd = axes or None  # the stages' mesh axes (none without a mesh)

    def by_row(v: jax.Array) -> jax.Array:  # [B, ...] -> [S, B/S, ...]
        return v.reshape(S, mb, *v.shape[1:])

    leaves, tree = jax.tree.flatten(inputs)
    rowwise = [v.ndim > 0 and v.shape[0] == B for v in leaves]  # else shared by every row ([1, ...])
    leaves = [by_row(v) if r else v for v, r in zip(leaves, rowwise, strict=True)]
    state_r = _by_stage(state, S)
    flags_r = None if flags is None else _by_stage(flags, S)
    kv_r = None if kv is None else jax.tree.map(lambda v: v.reshape(S, per, S, mb, *v.shape[2:]), kv)
    names = ("layers", *residual), ("layers", *audio_names(residual, strategy))
    start = [by_row(x)[(-s) % S] for s in range(S)], [by_row(a)[(-s) % S] for s in range(S)]
    buf: tuple[jax.Array, ...] = tuple(
        constrain(jnp.stack(rows), n, strategy) for rows, n in zip(start, names, strict=True)
    )
    stage = jnp.arange(S)

    def pick(tree: Any, *index: jax.Array) -> Any:
        return jax.tree.map(lambda v: v[index], tree)

    def one(st: Any, xs: jax.Array, as_: jax.Array, m: jax.Array, flag: Any, kvs: Any) -> tuple[jax.Array, jax.Array]:
        inp = jax.tree.unflatten(tree, [v[m] if r else v for v, r in zip(leaves, rowwise, strict=True)])
        return block(st, xs, as_, inp, flag, kvs)

    def step(carry: tuple[jax.Array, ...], t: jax.Array) -> tuple[tuple[jax.Array, ...], None]:
        m = (t - stage) % S  # the microbatch at each stage
        depth = t - m  # the layer it runs: depth = j * S + s
        valid = (depth >= 0) & (depth < L)
        j = jnp.clip(depth // S, 0, per - 1)
        st = jax.vmap(pick, spmd_axis_name=spmd)(state_r, j)
        flag = None if flags_r is None else flags_r[stage, j]
        kvs = None if kv_r is None else jax.vmap(pick, spmd_axis_name=spmd)(kv_r, j, m)
        axes_in = (0, 0, 0, 0, None if flag is None else 0, None if kvs is None else 0)
        out = jax.vmap(one, in_axes=axes_in, spmd_axis_name=spmd)(st, carry[0], carry[1], m, flag, kvs)
        kept = tuple(jnp.where(valid.reshape(S, *[1] * (o.ndim - 1)), o, c) for o, c in zip(out, carry, strict=True))
        moved = tuple(constrain(jnp.roll(k, 1, axis=0), n, strategy) for k, n in zip(kept, names, strict=True))
        return moved, None

    buf, _ = jax.lax.scan(step, buf, jnp.arange(L + S - 1))
    # microbatch m ran its last layer at step L - 1 + m, then moved on S - m more times
    x_out, a_out = (jnp.concatenate([b[(L + S - 1 - m) % S] for m in range(S)]) for b in buf)
    return x_out, a_out


def _rows(text: jax.Array | None, rows: tuple[int, ...]) -> jax.Array | None:
    return None if text is None else take_rows(text, rows)


def run_blocks(
    cfg: TransformerConfig,
    graphdef: nnx.GraphDef,
    state: nnx.State,
    x: jax.Array,
    a: jax.Array,
    inputs: BlockInputs,
    flags: jax.Array | None,
    isolate: bool,
    layers: tuple[int, int],
    kv: TextKV | None,
    text_rows: tuple[int, ...] | None,
    cross_from: int,
) -> tuple[jax.Array, jax.Array]:
    """:meth:`ltx2.transformer.LTX2Transformer.run_blocks` as the pipeline: every layer at once (a
    sub-range, or rows that skip a2v/v2a, refused), the STG flags (model order) put in stored order,
    the text K/V (or the text each block projects) gathered to one row per batch row: the prompt rows
    are not split like the microbatches, so the blocks do not gather them (``text_rows``) themselves."""
    if layers != (0, cfg.num_layers) or cross_from:
        raise ValueError(
            f"pipeline_stages={cfg.pipeline_stages} runs every layer on every row: got layers {layers}, "
            f"cross_from {cross_from} (a guidance plan that forks rows mid-stack needs pipeline_stages=1)"
        )
    flags = None if flags is None else flags[stored_order(cfg.num_layers, cfg.pipeline_stages)]
    if kv is not None and text_rows is not None:
        kv = jax.tree.map(lambda v: v[:, np.asarray(text_rows)], kv)
    elif text_rows is not None:  # each block projects the text: one row of it per batch row, split with the rows
        inputs = inputs._replace(
            video=inputs.video._replace(text=_rows(inputs.video.text, text_rows)),
            audio=inputs.audio._replace(text=_rows(inputs.audio.text, text_rows)),
        )

    def block(st: Any, x: jax.Array, a: jax.Array, inp: Any, stg: Any, kv_l: Any) -> tuple[jax.Array, jax.Array]:
        blk = cast(Block, nnx.merge(graphdef, st))
        return constrain_streams(*blk(x, a, inp, stg, isolate=isolate, kv=kv_l), cfg.sharding)

    return run(
        block, state, x, a, inputs, flags, kv, stages=cfg.pipeline_stages, strategy=cfg.sharding, residual=RESIDUAL
    )
