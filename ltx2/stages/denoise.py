"""The transformer stages: one bare step, one guided step, and the whole denoising loop.

* ``denoise_step``: one transformer forward over ``Workload.batch`` rows and an Euler update of
  both latents, no guidance combination: the DiT's cost per row, the layouts' reference program.
* ``guided_step``: one step of :func:`ltx2.denoise.denoise_step` with every guidance pass the
  config asks for (CFG, STG, modality isolation): what the Python loop calls once per step.
* ``denoise_loop``: every step, one ``lax.scan`` (:func:`ltx2.denoise.denoise_scan`) or a Python
  loop over the guided step's program (the loop of :func:`ltx2.denoise.denoise_python`), as
  ``pipeline.diffusion_loop`` says.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from ltx2.components import abstract_state, random_state
from ltx2.config import TransformerConfig
from ltx2.denoise import Latents, Schedule, TextEmbeddings, denoise_scan, step_inputs, text_kv_once
from ltx2.denoise import denoise_step as guided_denoise_step
from ltx2.pipeline_config import PipelineConfig
from ltx2.scheduler import sigma_schedule, timesteps
from ltx2.scheduler import step as euler_step
from ltx2.sharding import audio_names, input_sharding, place
from ltx2.stages.program import (
    Setup,
    StageProgram,
    Workload,
    concrete,
    put,
    replicated_like,
    sds,
    setup,
    token_facts,
    workload_plan,
)
from ltx2.transformer import LTX2Transformer

SEQ = ("activation_batch", "activation_length", None)
TEXT = ("activation_batch", "activation_text_length", None)
TEXT_KV = (None, *TEXT)  # [layers, R, S, D]


def _text_widths(t: TransformerConfig) -> tuple[int, int]:
    """Channels of the video / audio text embeddings the DiT takes: caption-wide (2.0) or model-wide (2.3)."""
    return (t.caption_channels, t.caption_channels) if t.use_prompt_embeddings else (t.inner_dim, t.audio_inner_dim)


def _step_inputs(t: TransformerConfig, B: int, L: int, A: int, S: int) -> list[tuple[tuple[int, ...], Any, tuple]]:
    """(shape, dtype, logical axes) of the bare step's inputs after the weights."""
    dt, f32 = jnp.dtype(t.dtype), jnp.float32
    text_c, audio_text_c = _text_widths(t)
    rows = ("activation_batch",)
    return [
        ((B, L, t.in_channels), dt, SEQ),
        ((B, A, t.audio_in_channels), dt, audio_names(SEQ, t.sharding)),  # latents
        ((B, S, text_c), dt, TEXT),
        ((B, S, audio_text_c), dt, TEXT),  # prompt embeddings
        ((B, S), f32, ("activation_batch", None)),  # text keep-mask
        ((B,), f32, rows),
        ((B,), f32, rows),
        ((), f32, ()),  # timestep, sigma, sigma step
    ]


def denoise_step(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> StageProgram:
    """One transformer forward and an Euler update of both latents (no guidance combination).

    Inputs follow ``LTX2Pipeline``'s call of the transformer: patchified video ``[B, L, C]`` and
    audio ``[B, A, Ca]`` latents, text embeddings ``[B, S, caption_channels]`` (LTX-2.3:
    ``[B, S, D]`` / ``[B, S, Da]``), keep-masks ``[B, S]``, timestep and sigma ``[B]``, and the
    step's sigma difference. ``B`` is ``wl.batch``: the transformer's rows (CFG doubles them in
    the pipeline)."""
    t = cfg.transformer
    plan = workload_plan(cfg, wl, wl.batch)
    B, L, A, S = wl.batch, plan.video_tokens, plan.audio_frames, wl.text_tokens
    inputs = _step_inputs(t, B, L, A, S)
    shardings = [input_sharding(names, t.sharding, mesh) for _, _, names in inputs]
    graphdef, state = abstract_state(lambda: LTX2Transformer(t, rngs=nnx.Rngs(0)), t.sharding, mesh)
    grid = dict(
        num_frames=plan.frames, height=plan.height, width=plan.width, fps=plan.fps, audio_num_frames=plan.audio_frames
    )

    def step(state, x, a, text, audio_text, mask, timestep, sigma, dsigma):  # type: ignore[no-untyped-def]
        v, va = nnx.merge(graphdef, state)(
            x,
            a,
            text,
            audio_text,
            timestep,
            sigma=sigma,
            encoder_attention_mask=mask,
            audio_encoder_attention_mask=mask,
            **grid,
        )
        # The scheduler's Euler step over the sigma difference dsigma (from 0 to dsigma), in float32.
        zero = jnp.zeros((), jnp.float32)
        return euler_step(x, v.astype(jnp.float32), zero, dsigma), euler_step(a, va.astype(jnp.float32), zero, dsigma)

    def make_args(seed: int) -> tuple[Any, ...]:
        rng = np.random.default_rng(seed + 1)
        host = [rng.standard_normal(shape, np.float32).astype(d) for shape, d, _ in inputs[:4]]
        host += [
            np.ones(inputs[4][0], np.float32),
            np.full(inputs[5][0], 900.0, np.float32),
            np.full(inputs[6][0], 0.9, np.float32),
            np.asarray(-0.1, np.float32),
        ]
        return (random_state(state, seed), *map(place, host, shardings))

    abstract_inputs = [
        jax.ShapeDtypeStruct(shape, d, sharding=s) for (shape, d, _), s in zip(inputs, shardings, strict=True)
    ]
    return StageProgram(
        "denoise_step",
        jax.jit(step),
        (state, *abstract_inputs),
        make_args,
        analytic_flops=float(t.forward_flops(L, A, S, B)),
        calls_per_video=wl.steps,
        extra={"tokens": token_facts(plan, S)},
        notes=("denoise_step = one transformer forward + Euler update; guidance passes are in the batch",),
        strategy=t.sharding,
    )


# --------------------------------------------------------------------------- guided steps


@dataclasses.dataclass(frozen=True)
class _Loop:
    """The guided step's graph, abstract inputs and concrete host values (schedule, scales)."""

    s: Setup
    graphdef: Any
    state: Any
    latents: Latents
    embeds: TextEmbeddings
    schedule: Schedule
    scales: Any
    schedule_abs: Any
    scales_abs: Any
    text_kv_abs: Any  # the video's text keys/values (None: the plan computes them in the step)

    def text_kv(self, state: Any, text: Any) -> Any:
        """:func:`ltx2.denoise.text_kv_once` of concrete inputs, placed as ``text_kv_abs``."""
        kv = text_kv_once(self.graphdef, state, text, plan=self.s.plan)
        return None if kv is None else jax.device_put(kv, jax.tree.map(lambda a: a.sharding, self.text_kv_abs))

    def make_inputs(self, seed: int) -> tuple[Any, ...]:
        """(state, latents, text embeddings, schedule, scales) on the devices."""
        return (
            random_state(self.state, seed),
            concrete(self.latents, seed + 1),
            concrete(self.embeds, seed + 2, _mask_fill),
            put(self.schedule, self.schedule_abs),
            put(self.scales, self.scales_abs),
        )

    @property
    def extra(self) -> dict[str, Any]:
        s = self.s
        return {
            "steps": s.cfg.pipeline.num_inference_steps,
            "videos": s.videos,
            "rows_per_step": s.rows,
            "guidance_passes": s.plan.passes._asdict(),
        }

    def flops(self, text_tokens: int) -> float:
        """Analytic FLOPs of one guided step (every pass's rows)."""
        plan = self.s.plan
        return float(
            self.s.cfg.transformer.forward_flops(plan.video_tokens, plan.audio_frames, text_tokens, self.s.rows)
        )


def _mask_fill(a: Any, rng: Any) -> Any:
    if np.issubdtype(a.dtype, np.integer):
        return np.ones(a.shape, a.dtype)
    return rng.standard_normal(a.shape, np.float32)


def _loop(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> _Loop:
    """Abstract weights, latents and text embeddings; the concrete schedule and guidance scales."""
    s = setup(cfg, wl)
    c, plan, t = s.cfg, s.plan, s.cfg.transformer
    strategy = t.sharding
    graphdef, state = abstract_state(lambda: LTX2Transformer(t, rngs=nnx.Rngs(0)), strategy, mesh)
    dt = jnp.dtype(t.dtype)
    # Latents are float32 whatever the model's dtype, as LTX2Pipeline.prepare_latents makes them (and
    # diffusers): the scheduler's update stays in float32 and the scan's carry keeps one dtype.
    f32 = jnp.float32
    latents = Latents(
        sds((s.videos, plan.video_tokens, t.in_channels), f32, SEQ, strategy, mesh),
        sds((s.videos, plan.audio_frames, t.audio_in_channels), f32, audio_names(SEQ, strategy), strategy, mesh),
    )
    rows, S = s.videos * (2 if plan.passes.cfg else 1), wl.text_tokens
    dv, da = _text_widths(t)
    embeds = TextEmbeddings(
        sds((rows, S, dv), dt, TEXT, strategy, mesh),
        sds((rows, S, da), dt, TEXT, strategy, mesh),
        sds((rows, S), jnp.int32, ("activation_batch", None), strategy, mesh),
    )
    sched = c.scheduler
    sigmas = sigma_schedule(sched, c.pipeline.num_inference_steps, mu=sched.mu(plan.video_tokens))
    # Host arrays in the Schedule container: placed on the mesh by the stage (replicated).
    host_sigmas: Any = np.asarray(sigmas, np.float32)
    host_timesteps: Any = np.asarray(timesteps(sched, sigmas), np.float32)
    schedule = Schedule(host_sigmas, host_timesteps)
    scales = c.guidance.host_scales()  # host values: a compile-only backend has no device to make them on
    kv = jax.eval_shape(lambda st, e: text_kv_once(graphdef, st, e, plan=plan), state, embeds)
    kv_abs = None if kv is None else jax.tree.map(lambda a: sds(a.shape, a.dtype, TEXT_KV, strategy, mesh), kv)
    return _Loop(
        s,
        graphdef,
        state,
        latents,
        embeds,
        schedule,
        scales,
        replicated_like(schedule, mesh),
        replicated_like(scales, mesh),
        kv_abs,
    )


def _passes(loop: _Loop) -> str:
    return ", ".join(k for k, v in loop.s.plan.passes._asdict().items() if v)


def _kv_note(loop: _Loop) -> tuple[str, ...]:
    if loop.text_kv_abs is None:
        return ()
    return (
        "the text keys/values are an input: made once per video before the loop (ltx2.denoise.text_kv_once), "
        "not part of this step's metrics",
    )


def guided_step(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> StageProgram:
    """One denoising step with every guidance pass (:func:`ltx2.denoise.denoise_step`), at the
    schedule's first sigma: the program a Python denoising loop calls once per step."""
    return _guided(_loop(cfg, wl, mesh), wl)


def _guided(loop: _Loop, wl: Workload) -> StageProgram:
    graphdef, plan = loop.graphdef, loop.s.plan
    scalar = jax.ShapeDtypeStruct((), loop.schedule.sigmas.dtype, sharding=loop.schedule_abs.sigmas.sharding)

    def one_step(st: Any, x: Any, text: Any, sigma: Any, sigma_next: Any, t: Any, sc: Any, kv: Any) -> Any:
        return guided_denoise_step(graphdef, st, x, text, sigma, sigma_next, t, sc, kv, plan=plan)

    def make_args(seed: int) -> tuple[Any, ...]:  # the video's text K/V: made once, outside the step
        st, x, text, sch, sc = loop.make_inputs(seed)
        return (st, x, text, *step_inputs(sch)[0], sc, loop.text_kv(st, text))

    steps = loop.s.cfg.pipeline.num_inference_steps
    return StageProgram(
        "guided_step",
        jax.jit(one_step),
        (loop.state, loop.latents, loop.embeds, scalar, scalar, scalar, loop.scales_abs, loop.text_kv_abs),
        make_args,
        analytic_flops=loop.flops(wl.text_tokens),
        calls_per_video=steps,
        extra=loop.extra,
        notes=(
            f"guided_step = one denoising step with every guidance pass ({_passes(loop)}); "
            f"a video runs it {steps} times",
        )
        + _kv_note(loop),
        strategy=loop.s.cfg.transformer.sharding,
    )


def denoise_loop(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> StageProgram:
    """Every denoising step with all guidance passes: one ``lax.scan`` or a Python loop over one
    compiled step (``pipeline.diffusion_loop``)."""
    loop = _loop(cfg, wl, mesh)
    graphdef, plan, c = loop.graphdef, loop.s.plan, loop.s.cfg
    steps = c.pipeline.num_inference_steps
    notes = (f"denoise_loop = {steps} guided steps ({_passes(loop)}), {c.pipeline.diffusion_loop} loop",)
    if c.pipeline.diffusion_loop == "scan":

        def whole(st: Any, x: Any, text: Any, sch: Any, sc: Any) -> Any:
            return denoise_scan(graphdef, st, x, text, sch, sc, plan=plan)

        return StageProgram(
            "denoise_loop",
            jax.jit(whole),
            (loop.state, loop.latents, loop.embeds, loop.schedule_abs, loop.scales_abs),
            loop.make_inputs,
            analytic_flops=loop.flops(wl.text_tokens) * steps,
            extra=loop.extra,
            notes=notes,
            strategy=c.transformer.sharding,
        )

    step = _guided(loop, wl)

    def make_args(seed: int) -> tuple[Any, ...]:
        st, x, text, sch, sc = loop.make_inputs(seed)
        return (st, x, text, step_inputs(sch), sc)

    def python_loop(st: Any, x: Any, text: Any, per_step: Any, sc: Any) -> Any:
        # The loop of ltx2.denoise.denoise_python over this stage's own compiled step, so that what
        # runs is the program the static metrics describe (and a trace finds its module by name).
        kv = loop.text_kv(st, text)  # once per video, before the loop, as denoise_python does
        for sigma, sigma_next, t in per_step:
            x = step.fn(st, x, text, sigma, sigma_next, t, sc, kv)
        return x

    return dataclasses.replace(
        step,
        name="denoise_loop",
        make_args=make_args,
        host_run=python_loop,
        notes=notes
        + ("static metrics are of one step (the program the loop calls); per video they repeat once per step",),
    )
