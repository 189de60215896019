"""The transformer work of one guided denoising step: the prediction of every guidance pass.

diffusers ``LTX2Pipeline.__call__`` runs up to three forwards per step: the CFG pair
``[uncond; cond]`` (2B rows), the STG pass (``perturbed``: self-attention replaced by its value
projection in ``spatio_temporal_guidance_blocks``) and the modality-isolated pass (``isolated``:
no a2v/v2a attention), B rows each. Here rows come in *groups* of B (one row per video) and
:func:`predict` runs them as the plan says (:class:`~ltx2.pipeline_config.PipelineOptions`):

* ``guidance_batching``: ``batched`` = one forward over every group, the perturbation applied
  per row: STG by a row mask (``BlockInputs.keep``); isolation by skipping a2v/v2a for the leading
  isolated rows, or by a mask (``BlockInputs.cross``) where the mesh splits the rows (a row slice
  would reshard them). Each weight is read once per step. ``sequential`` = one forward per pass,
  as diffusers.
* ``stg_fork``: ``perturbed`` rows equal ``cond`` rows up to the first perturbed block k, so
  they are not computed there: blocks 0..k-1 run without them, then the ``cond`` rows' hidden
  states are copied into new ``perturbed`` rows for blocks k..L-1. Where no block is effectively
  perturbed (``perturbed_attn`` off, LTX-2.0) the STG prediction *is* the conditional one. A
  batched fork is skipped where the mesh splits the rows so that the pre-fork rows pad back to
  the full count per device (one video on a 2-way batch split: 3 rows -> 2 per device, as 4):
  there it saves no FLOPs and only adds traffic (22B on v6e trillium: +77 GB HBM per step).
* ``text_kv_cache``: text keys/values are projected once per prompt row and gathered to the rows
  that read them, instead of by every row of every pass in every block: before the loop
  (:class:`~ltx2.block.TextKV`) where they do not depend on the step, else in each block of the
  step (LTX-2.3's prompt AdaLN), where only rows of one forward can share them.

Timestep embeddings, RoPE tables and the input projection are the same for every row of a step:
computed once, broadcast. Shapes: B videos, L video tokens, A audio tokens, S text tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ltx2 import scopes
from ltx2.block import TextKV, take_rows
from ltx2.sharding import shards
from ltx2.transformer import Conditioning, LTX2Transformer

if TYPE_CHECKING:
    from ltx2.latents import Latents, Plan, TextEmbeddings

GROUPS = ("isolated", "uncond", "cond", "perturbed")  # isolated first: a2v/v2a run on a row suffix
Prediction = tuple[jax.Array, jax.Array]  # video [B, L, C], audio [B, A, Ca] velocities (float32)
Hidden = tuple[jax.Array, jax.Array]  # residual streams [R, L, D], [R, A, Da]


class _Step(NamedTuple):
    """What every forward of one step shares (built once per step)."""

    model: LTX2Transformer
    plan: Plan
    text: TextEmbeddings
    cond: Conditioning
    kv: TextKV | None  # precomputed keys/values (text_kv_cache), else None
    flags: jax.Array | None  # [num_layers] STG blocks (None: STG inert)
    videos: int


def wanted_groups(plan: Plan) -> tuple[str, ...]:
    """The row groups the plan's guidance passes need, in batch order."""
    p = plan.passes
    wanted = {"uncond": p.cfg, "cond": True, "isolated": p.modality, "perturbed": p.stg}
    return tuple(g for g in GROUPS if wanted[g])


def fork_block(plan: Plan, model: LTX2Transformer) -> int | None:
    """Where ``perturbed`` rows leave ``cond``: the first effectively perturbed block; ``num_layers``
    when none is (their prediction equals ``cond``'s); ``None`` = no fork (``stg_fork`` off or no STG)."""
    if not plan.passes.stg or not plan.stg_fork:
        return None
    if not model.cfg.perturbed_attn or not plan.stg_blocks:
        return model.cfg.num_layers
    return min(plan.stg_blocks)


def needs_text_kv(plan: Plan, model: LTX2Transformer) -> bool:
    """Whether :func:`precompute_text_kv` serves the whole video (else the step computes its own)."""
    return plan.text_kv_cache and not model.text_kv_per_step


@scopes.scoped(scopes.TRANSFORMER)
def precompute_text_kv(model: LTX2Transformer, text: TextEmbeddings) -> TextKV:
    """Every layer's text keys/values ``[layers, R, S, D]`` of the ``R`` prompt rows, once per video
    (only where they do not depend on the step: :func:`needs_text_kv`)."""
    if model.text_kv_per_step:
        raise ValueError("this model's text keys/values change every step (prompt AdaLN): no per-video cache")
    return model.text_kv(*model.project_text(text.video, text.audio))


@scopes.scoped(scopes.TRANSFORMER)
def predict(
    model: LTX2Transformer, plan: Plan, x: Latents, text: TextEmbeddings, t: jax.Array, kv: TextKV | None = None
) -> dict[str, Prediction]:
    """Velocity predictions per group (:func:`wanted_groups`) at timestep ``t`` (scalar) for latents
    ``x`` ``[B, L, C]`` / ``[B, A, Ca]``. ``kv``: the per-video text keys/values when
    :func:`needs_text_kv`; without them and with ``plan.text_kv_cache``, each block projects every
    prompt row once and gathers the keys/values to the rows that read them (LTX-2.3's prompt AdaLN:
    they change every step, and a per-step ``[layers, R, S, D]`` stack would cost HBM traffic)."""
    t1 = jnp.reshape(t, (1,))
    cond = model.conditioning(t1, None, t1, None, *_coords(model, plan), use_cross_timestep=plan.use_cross_timestep)
    stg = model.stg_flags(plan.stg_blocks) if plan.passes.stg else None
    step = _Step(model, plan, text, cond, kv if plan.text_kv_cache else None, stg, x.video.shape[0])
    h0 = model.project_in(x.video, x.audio)
    groups, fork, n = wanted_groups(plan), fork_block(plan, model), model.cfg.num_layers
    shared = tuple(g for g in groups if g != "perturbed" or fork is None)
    batched = plan.guidance_batching == "batched"
    if batched and fork is not None and fork < n and not _fork_pays(len(shared), step.videos, model.cfg.sharding):
        fork, shared = None, groups  # the pre-fork rows would be padded to the full count: no work saved
    out: dict[str, Prediction] = {}
    for pass_groups in [shared] if batched else _sequential(shared):
        late = ("perturbed",) if "cond" in pass_groups and fork is not None and fork < n else ()
        out.update(_run_pass(step, h0, pass_groups, late, fork or 0, join=batched))
    if "perturbed" in groups and "perturbed" not in out:
        out["perturbed"] = out["cond"]  # no block is perturbed: the STG pass would repeat cond's
    return out


def _fork_pays(groups_before: int, videos: int, strategy: str) -> bool:
    """Whether a batched fork leaves each device fewer rows before it: rows split over the batch's
    mesh axes are padded to a multiple of their shard count (one video's 3 pre-fork rows on a
    2-way batch split are 2 per device, as the 4 rows after it). No mesh: always."""
    shards = batch_shards(strategy)
    return -(-groups_before * videos // shards) < -(-(groups_before + 1) * videos // shards)


def batch_shards(strategy: str) -> int:
    """How many ways the context mesh splits ``activation_batch`` under ``strategy`` (1 without a mesh)."""
    return shards(strategy, "activation_batch")


def _sequential(groups: tuple[str, ...]) -> list[tuple[str, ...]]:
    """diffusers' passes: the CFG pair, then each extra pass alone."""
    first = tuple(g for g in groups if g in ("uncond", "cond"))
    return [first] + [(g,) for g in groups if g not in first]


def _run_pass(
    step: _Step, h0: Hidden, groups: tuple[str, ...], late: tuple[str, ...], fork: int, *, join: bool
) -> dict[str, Prediction]:
    """``groups`` through every block. ``late`` groups (perturbed) start at block ``fork`` from a copy
    of ``cond``'s rows there: in the same forward (``join``) or as a forward of their own."""
    n = step.model.cfg.num_layers
    h = _tile(h0, len(groups))
    if not late:
        return _outputs(step, _segment(step, h, groups, 0, n), groups)
    h = _segment(step, h, groups, 0, fork)
    forked = _group_rows(h, groups.index("cond"), step.videos)
    if join:
        both = groups + late
        h = (jnp.concatenate([h[0], forked[0]]), jnp.concatenate([h[1], forked[1]]))
        return _outputs(step, _segment(step, h, both, fork, n), both)
    out = _outputs(step, _segment(step, h, groups, fork, n), groups)
    return out | _outputs(step, _segment(step, forked, late, fork, n), late)


def _segment(step: _Step, h: Hidden, groups: tuple[str, ...], first: int, stop: int) -> Hidden:
    """Blocks ``first..stop-1`` over the rows of ``groups`` (B each), perturbation by row masks."""
    if first == stop:
        return h
    model, B, dt = step.model, step.videos, jnp.dtype(step.model.cfg.dtype)
    rows = tuple(r for g in groups for r in _text_rows(g, step.plan, B))
    mask = take_rows(step.text.mask, rows)
    text = audio_text = None
    shared = step.plan.text_kv_cache  # text K/V per prompt row, gathered to the rows (else per row)
    text_rows = rows if shared else None
    if step.kv is None:  # per step: each block projects the prompt rows this forward reads, or every row's text
        prompts = tuple(sorted(set(rows))) if shared else rows
        text, audio_text = model.project_text(take_rows(step.text.video, prompts), take_rows(step.text.audio, prompts))
        text_rows = tuple(prompts.index(r) for r in rows) if shared else None
    isolate, cross, cross_from = groups == ("isolated",), None, 0
    if "isolated" in groups and not isolate:
        assert groups[0] == "isolated"
        if batch_shards(model.cfg.sharding) == 1 and model.cfg.pipeline_stages == 1:
            cross_from = B  # a2v/v2a skip the leading isolated rows
        else:  # rows split over devices or microbatches: a row slice would reshard, a mask keeps the layout
            cross = _row_mask(groups, "isolated", B, dt)
    keep = _row_mask(groups, "perturbed", B, dt) if "perturbed" in groups and step.flags is not None else None
    inputs = model.block_inputs(step.cond, text, audio_text, mask, mask, keep, cross)
    flags = step.flags if keep is not None else None
    return model.run_blocks(
        *h, inputs, flags, isolate=isolate, layers=(first, stop), kv=step.kv, text_rows=text_rows, cross_from=cross_from
    )


def _outputs(step: _Step, h: Hidden, groups: tuple[str, ...]) -> dict[str, Prediction]:
    v, a = step.model.project_out(*h, step.cond)
    v, a = v.astype(jnp.float32), a.astype(jnp.float32)
    return {g: _group_rows((v, a), i, step.videos) for i, g in enumerate(groups)}


def _text_rows(group: str, plan: Plan, videos: int) -> range:
    """Rows of ``TextEmbeddings`` (``[negative; positive]`` with CFG) that ``group`` reads."""
    positive = videos if plan.passes.cfg else 0
    return range(0, videos) if group == "uncond" else range(positive, positive + videos)


def _row_mask(groups: tuple[str, ...], off: str, videos: int, dtype: jnp.dtype) -> jax.Array:
    """``[R, 1, 1]``: 0 on the rows of group ``off``, 1 elsewhere."""
    return jnp.asarray(np.repeat([g != off for g in groups], videos).reshape(-1, 1, 1), dtype)


def _tile(h: Hidden, groups: int) -> Hidden:
    return (jnp.tile(h[0], (groups, 1, 1)), jnp.tile(h[1], (groups, 1, 1))) if groups > 1 else h


def _group_rows(h: Hidden, index: int, videos: int) -> Hidden:
    return h[0][index * videos : (index + 1) * videos], h[1][index * videos : (index + 1) * videos]


def _coords(model: LTX2Transformer, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    return model.coords(plan.frames, plan.height, plan.width, plan.fps, plan.audio_frames)
