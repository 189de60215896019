"""The LTX-2 denoising loop as pure, jittable functions (diffusers ``LTX2Pipeline.__call__`` step 7).

One step: the transformer runs the conditional pass (on the ``[negative; positive]`` batch when
CFG is on), then the perturbed (STG) and modality-isolated passes on the positive rows only;
:func:`ltx2.guidance.guided_velocity` combines them in x0 space, video and audio with their own
scales; an Euler step moves both latents. :func:`denoise_scan` runs every step in one
``lax.scan``; :func:`denoise_step` is one step, for a Python loop. Both are module-level
``jax.jit`` functions with the module graph and the :class:`~ltx2.latents.Plan` static, so
guidance scales and sigmas are traced: changing them never recompiles.

Shapes: B batch, L video tokens, A audio tokens, S text tokens; ``B' = 2B`` with CFG.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from ltx2.guidance import AVGuidanceScales, guided_velocity
from ltx2.latents import Plan
from ltx2.scheduler import step as euler_step
from ltx2.transformer import LTX2Transformer


class TextEmbeddings(NamedTuple):
    """Connector outputs for the DiT: ``[negative; positive]`` rows when CFG runs, else positive."""

    video: jax.Array  # [B', S, Dv]
    audio: jax.Array  # [B', S, Da]
    mask: jax.Array  # [B', S] int32


class Latents(NamedTuple):
    """Packed, normalised latents: video ``[B, L, C]``, audio ``[B, A, Ca]`` (float32)."""

    video: jax.Array
    audio: jax.Array


class Schedule(NamedTuple):
    """Device arrays of the sampler: ``sigmas [N+1]`` (ending in 0) and ``timesteps [N]``."""

    sigmas: jax.Array
    timesteps: jax.Array


def _forward(
    model: LTX2Transformer,
    plan: Plan,
    x: Latents,
    text: TextEmbeddings,
    t: jax.Array,
    *,
    isolate: bool = False,
    stg: tuple[int, ...] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """One transformer pass at timestep ``t`` (scalar), velocities cast to float32."""
    rows = x.video.shape[0]
    t_b = jnp.broadcast_to(t, (rows,))
    v, a = model(
        x.video, x.audio, text.video, text.audio, t_b,
        sigma=t_b,  # diffusers passes the timestep as sigma too (LTX-2.3 prompt AdaLN)
        encoder_attention_mask=text.mask, audio_encoder_attention_mask=text.mask,
        num_frames=plan.frames, height=plan.height, width=plan.width, fps=plan.fps,
        audio_num_frames=plan.audio_frames, isolate_modalities=isolate,
        spatio_temporal_guidance_blocks=stg, use_cross_timestep=plan.use_cross_timestep,
    )  # fmt: skip
    return v.astype(jnp.float32), a.astype(jnp.float32)


def _positive(text: TextEmbeddings, cfg: bool) -> TextEmbeddings:
    if not cfg:
        return text
    half = text.video.shape[0] // 2
    return TextEmbeddings(text.video[half:], text.audio[half:], text.mask[half:])


def guided_step(
    model: LTX2Transformer,
    plan: Plan,
    x: Latents,
    text: TextEmbeddings,
    sigma: jax.Array,
    sigma_next: jax.Array,
    t: jax.Array,
    scales: AVGuidanceScales,
) -> Latents:
    """One denoising step with every guidance pass the plan asks for."""
    passes = plan.passes
    uncond: tuple[jax.Array, jax.Array] | tuple[None, None] = (None, None)
    if passes.cfg:
        both = Latents(jnp.concatenate([x.video, x.video]), jnp.concatenate([x.audio, x.audio]))
        v2, a2 = _forward(model, plan, both, text, t)
        b = x.video.shape[0]
        uncond, cond = (v2[:b], a2[:b]), (v2[b:], a2[b:])
    else:
        cond = _forward(model, plan, x, text, t)
    pos = _positive(text, passes.cfg)
    perturbed = _forward(model, plan, x, pos, t, stg=plan.stg_blocks) if passes.stg else (None, None)
    isolated = _forward(model, plan, x, pos, t, isolate=True) if passes.modality else (None, None)
    out = []
    for i, (sample, s) in enumerate(((x.video, scales.video), (x.audio, scales.audio))):
        vel = guided_velocity(sample, sigma, cond[i], s, v_uncond=uncond[i], v_perturbed=perturbed[i],
                              v_isolated=isolated[i])  # fmt: skip
        out.append(euler_step(sample, vel, sigma, sigma_next))
    return Latents(*out)


@partial(jax.jit, static_argnames=("graphdef", "plan"))
def denoise_step(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    x: Latents,
    text: TextEmbeddings,
    sigma: jax.Array,
    sigma_next: jax.Array,
    t: jax.Array,
    scales: AVGuidanceScales,
    *,
    plan: Plan,
) -> Latents:
    """:func:`guided_step` compiled once per (model structure, plan)."""
    return guided_step(nnx.merge(graphdef, state), plan, x, text, sigma, sigma_next, t, scales)


@partial(jax.jit, static_argnames=("graphdef", "plan"))
def denoise_scan(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    x: Latents,
    text: TextEmbeddings,
    schedule: Schedule,
    scales: AVGuidanceScales,
    *,
    plan: Plan,
) -> Latents:
    """Every step of ``schedule`` in one ``lax.scan`` (one compiled program)."""
    model = nnx.merge(graphdef, state)

    def body(carry: Latents, xs: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[Latents, None]:
        sigma, sigma_next, t = xs
        return guided_step(model, plan, carry, text, sigma, sigma_next, t, scales), None

    xs = (schedule.sigmas[:-1], schedule.sigmas[1:], schedule.timesteps)
    out, _ = jax.lax.scan(body, x, xs)
    return out


@jax.jit
def step_inputs(schedule: Schedule) -> list[tuple[jax.Array, jax.Array, jax.Array]]:
    """Per-step ``(sigma, sigma_next, t)`` device scalars, sliced on device (static indices,
    so no index is sent from the host) before the Python loop starts."""
    n = schedule.timesteps.shape[0]
    return [(schedule.sigmas[i], schedule.sigmas[i + 1], schedule.timesteps[i]) for i in range(n)]


def denoise_python(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    x: Latents,
    text: TextEmbeddings,
    steps: list[tuple[jax.Array, jax.Array, jax.Array]],
    scales: AVGuidanceScales,
    *,
    plan: Plan,
    progress: Any = None,
) -> Latents:
    """A Python loop over :func:`denoise_step`; ``progress(i, n)`` after each step (it waits for
    the step to finish, so only pass one when you want to watch)."""
    for i, (sigma, sigma_next, t) in enumerate(steps):
        x = denoise_step(graphdef, state, x, text, sigma, sigma_next, t, scales, plan=plan)
        if progress is not None:
            jax.block_until_ready(x)
            progress(i + 1, len(steps))
    return x
