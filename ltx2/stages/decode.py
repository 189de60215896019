"""The decoder stages: video VAE decode, audio VAE + vocoder, and the latent upsampler.

Each component is laid out by its own config's ``sharding``; the VAEs, vocoder and upsampler
follow ``pipeline.vae_replication`` under the transformer's strategy
(:func:`ltx2.components.vae_configs`, applied by :func:`~ltx2.stages.program.setup`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from ltx2.components import abstract_state, random_state
from ltx2.pipeline import decode_packed_video, decode_video_inputs, upsample_latents, waveform
from ltx2.pipeline_config import PipelineConfig
from ltx2.stages.program import (
    StageProgram,
    StageUnavailable,
    Workload,
    concrete,
    put,
    replicated,
    replicated_like,
    sds,
    setup,
)
from ltx2.vae.audio import AutoencoderKLLTX2Audio
from ltx2.vae.upsampler import LTX2LatentUpsamplerModel
from ltx2.vae.video import VideoVAE
from ltx2.vae.vocoder import LTX2Vocoder, LTX2VocoderWithBWE, VocoderWithBWEConfig

BATCH3 = ("activation_batch", None, None)


def video_decode(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> StageProgram:
    """Packed latents -> frames in [0, 1], with the timestep-conditioned decoder's noise mix
    (``LTX2Pipeline.decode_video`` on abstract weights)."""
    s = setup(cfg, wl)
    c, plan = s.cfg, s.plan
    v, strategy = c.video_vae, c.video_vae.sharding
    graphdef, state = abstract_state(lambda: VideoVAE(v, rngs=nnx.Rngs(0)), strategy, mesh)
    packed = sds((s.videos, plan.video_tokens, c.transformer.in_channels), jnp.float32, BATCH3, strategy, mesh)

    def decode(st: Any, x: Any, key: Any) -> Any:
        inputs = decode_video_inputs(key, plan, v, c.pipeline, x.dtype)
        return decode_packed_video(graphdef, st, x, *inputs, plan=plan)

    key_abs = jax.eval_shape(lambda: jax.random.key(0))
    key_abs = jax.ShapeDtypeStruct(key_abs.shape, key_abs.dtype, sharding=replicated(mesh))

    def make_args(seed: int) -> tuple[Any, ...]:
        key = jax.device_put(jax.random.key(seed), key_abs.sharding)
        return (random_state(state, seed), concrete(packed, seed + 1), key)

    notes = (f"video_decode = video VAE decode of {s.videos} video(s) (layout {strategy})",)
    return StageProgram(
        "video_decode",
        jax.jit(decode),
        (state, packed, key_abs),
        make_args,
        notes=notes,
        extra={"videos": s.videos, "latent_grid": [plan.frames, plan.height, plan.width]},
        strategy=strategy,
    )


def audio_decode(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> StageProgram:
    """Packed audio latents -> mel spectrogram (audio VAE) -> waveform (vocoder), each module laid
    out by its own config's strategy (``LTX2Pipeline.decode_audio``, one graph per module)."""
    s = setup(cfg, wl)
    c, plan = s.cfg, s.plan
    voc_cls: Any = LTX2VocoderWithBWE if isinstance(c.vocoder, VocoderWithBWEConfig) else LTX2Vocoder
    vae_graph, vae_state = abstract_state(
        lambda: AutoencoderKLLTX2Audio(c.audio_vae, rngs=nnx.Rngs(0)), c.audio_vae.sharding, mesh
    )
    voc_graph, voc_state = abstract_state(lambda: voc_cls(c.vocoder, rngs=nnx.Rngs(0)), c.vocoder.sharding, mesh)
    packed = sds(
        (s.videos, plan.audio_frames, c.transformer.audio_in_channels), jnp.float32, BATCH3, c.audio_vae.sharding, mesh
    )

    def decode(sv: Any, so: Any, x: Any) -> Any:
        return waveform(nnx.merge(vae_graph, sv), nnx.merge(voc_graph, so), x, plan)

    def make_args(seed: int) -> tuple[Any, ...]:
        return (random_state(vae_state, seed), random_state(voc_state, seed + 1), concrete(packed, seed + 2))

    return StageProgram(
        "audio_decode",
        jax.jit(decode),
        (vae_state, voc_state, packed),
        make_args,
        extra={"videos": s.videos, "audio_latent_frames": plan.audio_frames},
        notes=("audio_decode = audio VAE decode + vocoder",),
        strategy=c.audio_vae.sharding,
    )


def upsample(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> StageProgram:
    """Denormalised video latents -> 2x spatially upsampled latents, with AdaIN at factor 1 and no
    tone mapping (``LTX2LatentUpsamplePipeline``)."""
    s = setup(cfg, wl)
    c, plan = s.cfg, s.plan
    up_cfg = c.upsampler
    if up_cfg is None:
        raise StageUnavailable("this config has no latent upsampler (upsampler = None)")
    strategy = up_cfg.sharding
    graphdef, state = abstract_state(lambda: LTX2LatentUpsamplerModel(up_cfg, rngs=nnx.Rngs(0)), strategy, mesh)
    latents = sds(
        (s.videos, c.video_vae.latent_channels, plan.frames, plan.height, plan.width),
        jnp.float32,
        ("activation_batch", None, None, None, None),
        strategy,
        mesh,
    )
    factors_host = (np.float32(1.0), np.float32(0.0))  # AdaIN factor, tone-map compression
    factors = replicated_like(factors_host, mesh)

    def up(st: Any, x: Any, adain: Any, tone: Any) -> Any:
        return upsample_latents(graphdef, st, x, adain, tone)

    def make_args(seed: int) -> tuple[Any, ...]:
        return (random_state(state, seed), concrete(latents, seed + 1), *put(factors_host, factors))

    return StageProgram(
        "upsample",
        jax.jit(up),
        (state, latents, *factors),
        make_args,
        extra={"videos": s.videos},
        notes=("upsample = latent upsampler + AdaIN (factor 1) as LTX2LatentUpsamplePipeline",),
        strategy=strategy,
    )
