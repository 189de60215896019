"""The LTX-2 denoising loop as pure, jittable functions (diffusers ``LTX2Pipeline.__call__`` step 7).

One step: the transformer predicts a velocity for every guidance pass the plan asks for
(:func:`ltx2.passes.predict`: conditional, text-unconditional, perturbed (STG) and
modality-isolated rows, batched or pass by pass); :func:`ltx2.guidance.guided_velocity` combines
them in x0 space, video and audio with their own scales; an Euler step moves both latents.
:func:`denoise_scan` runs every step in one ``lax.scan``; :func:`denoise_step` is one step, for a
Python loop (:func:`denoise_python`, which donates each step's input latents to its output).
Text keys/values that do not change during a video (``plan.text_kv_cache``) are computed once,
before the loop, and carried into every step. Both are module-level ``jax.jit`` functions with
the module graph and the :class:`~ltx2.latents.Plan` static, so guidance scales and sigmas are
traced: changing them never recompiles.

Shapes: B batch, L video tokens, A audio tokens, S text tokens; ``B' = 2B`` with CFG.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from ltx2.block import TextKV
from ltx2.guidance import AVGuidanceScales, guided_velocity
from ltx2.latents import Latents, Plan, TextEmbeddings
from ltx2.passes import needs_text_kv, precompute_text_kv, predict
from ltx2.scheduler import step as euler_step
from ltx2.transformer import LTX2Transformer


class Schedule(NamedTuple):
    """Device arrays of the sampler: ``sigmas [N+1]`` (ending in 0) and ``timesteps [N]``."""

    sigmas: jax.Array
    timesteps: jax.Array


def guided_step(
    model: LTX2Transformer,
    plan: Plan,
    x: Latents,
    text: TextEmbeddings,
    sigma: jax.Array,
    sigma_next: jax.Array,
    t: jax.Array,
    scales: AVGuidanceScales,
    text_kv: TextKV | None = None,
) -> Latents:
    """One denoising step with every guidance pass the plan asks for; ``text_kv``: the video's
    precomputed text keys/values (:func:`text_kv_once`), else computed in the step if needed."""
    pred = predict(model, plan, x, text, t, text_kv)
    out = []
    for i, (sample, s) in enumerate(((x.video, scales.video), (x.audio, scales.audio))):
        extra = {k: pred[g][i] if g in pred else None for k, g in _EXTRA.items()}
        vel = guided_velocity(sample, sigma, pred["cond"][i], s, **extra)
        out.append(euler_step(sample, vel, sigma, sigma_next))
    return Latents(*out)


_EXTRA = {"v_uncond": "uncond", "v_perturbed": "perturbed", "v_isolated": "isolated"}


def _step(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    x: Latents,
    text: TextEmbeddings,
    sigma: jax.Array,
    sigma_next: jax.Array,
    t: jax.Array,
    scales: AVGuidanceScales,
    text_kv: TextKV | None = None,
    *,
    plan: Plan,
) -> Latents:
    """:func:`guided_step` compiled once per (model structure, plan); ``text_kv`` from
    :func:`text_kv_once` (None: the step projects the text itself)."""
    return guided_step(nnx.merge(graphdef, state), plan, x, text, sigma, sigma_next, t, scales, text_kv)


denoise_step = jax.jit(_step, static_argnames=("graphdef", "plan"))
# The Python loop's step: the input latents' buffers are reused for the output.
_denoise_step_donating = jax.jit(_step, static_argnames=("graphdef", "plan"), donate_argnames=("x",))


@partial(jax.jit, static_argnames=("graphdef", "plan"))
def text_kv_once(graphdef: nnx.GraphDef, state: nnx.State, text: TextEmbeddings, *, plan: Plan) -> TextKV | None:
    """The text keys/values of every layer for the whole video when the plan caches them and they
    do not depend on the step (:func:`ltx2.passes.needs_text_kv`), else None."""
    model = nnx.merge(graphdef, state)
    return precompute_text_kv(model, text) if needs_text_kv(plan, model) else None


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
    kv = precompute_text_kv(model, text) if needs_text_kv(plan, model) else None  # a constant of the loop

    def body(carry: Latents, xs: tuple[jax.Array, jax.Array, jax.Array]) -> tuple[Latents, None]:
        sigma, sigma_next, t = xs
        return guided_step(model, plan, carry, text, sigma, sigma_next, t, scales, kv), None

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
    """A Python loop over :func:`denoise_step` (text keys/values computed once before it, latents
    donated from step to step: the caller's ``x`` stays valid); ``progress(i, n)`` after each
    step (it waits for the step to finish, so only pass one when you want to watch)."""
    kv = text_kv_once(graphdef, state, text, plan=plan)
    x = jax.tree.map(jnp.copy, x)
    for i, (sigma, sigma_next, t) in enumerate(steps):
        x = _denoise_step_donating(graphdef, state, x, text, sigma, sigma_next, t, scales, kv, plan=plan)
        if progress is not None:
            jax.block_until_ready(x)
            progress(i + 1, len(steps))
    return x
