"""Latent layout of the LTX-2 pipeline: the static grid of one generation and (un)packing.

Follows ``LTX2Pipeline`` (diffusers ``pipeline_ltx2.py``): video latents ``[B, C, F, H, W]``
are packed into tokens ``[B, L, C*pt*p*p]`` (``_pack_latents``), audio latents
``[B, Cz, A, M']`` into ``[B, A, Cz*M']`` (``ltx2.vae.audio.pack_latents``). The audio length
is ``round(num_frames / frame_rate * sample_rate / hop / 4)`` latent frames, and ``mu`` of the
dynamic shift is linear in the video token count L.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ltx2.guidance import GuidancePasses
from ltx2.pipeline_config import PipelineConfig
from ltx2.vae.audio import LATENT_DOWNSAMPLE_FACTOR


class TextEmbeddings(NamedTuple):
    """Connector outputs for the DiT: ``[negative; positive]`` rows when CFG runs, else positive."""

    video: jax.Array  # [B', S, Dv]
    audio: jax.Array  # [B', S, Da]
    mask: jax.Array  # [B', S] int32


class Latents(NamedTuple):
    """Packed, normalised latents: video ``[B, L, C]``, audio ``[B, A, Ca]`` (float32)."""

    video: jax.Array
    audio: jax.Array


@dataclass(frozen=True)
class Plan:
    """Static facts of one generation (hashable: a ``jax.jit`` static argument).

    ``frames, height, width``: the latent grid F, H, W; ``audio_frames``: A; ``fps``: the RoPE
    frame rate; ``passes``: which guidance passes run; ``stg_blocks``: perturbed blocks;
    ``guidance_batching``, ``stg_fork``, ``text_kv_cache``: how the guided step runs its passes
    (:class:`~ltx2.pipeline_config.PipelineOptions`)."""

    batch: int
    frames: int
    height: int
    width: int
    audio_frames: int
    latent_mel_bins: int
    fps: float
    passes: GuidancePasses
    stg_blocks: tuple[int, ...]
    use_cross_timestep: bool
    patch_size: int
    patch_size_t: int
    guidance_batching: str = "batched"
    stg_fork: bool = True
    text_kv_cache: bool = True

    @property
    def video_tokens(self) -> int:
        """L = F/pt * H/p * W/p."""
        return (self.frames // self.patch_size_t) * (self.height // self.patch_size) * (self.width // self.patch_size)

    @classmethod
    def build(
        cls,
        cfg: PipelineConfig,
        *,
        batch: int = 1,
        height: int | None = None,
        width: int | None = None,
        num_frames: int | None = None,
        frame_rate: float | None = None,
    ) -> Plan:
        """The plan for a ``num_frames x height x width`` video at ``frame_rate`` (defaults from
        ``cfg.pipeline``), as ``LTX2Pipeline.__call__`` derives it."""
        o, v, a = cfg.pipeline, cfg.video_vae, cfg.audio_vae
        height, width = height or o.height, width or o.width
        num_frames, frame_rate = num_frames or o.num_frames, frame_rate or o.frame_rate
        s, t = v.spatial_compression, v.temporal_compression
        if height % s or width % s:
            raise ValueError(f"height={height} and width={width} must be multiples of the VAE's {s}")
        duration_s = num_frames / frame_rate
        latents_per_second = a.sample_rate / a.mel_hop_length / float(LATENT_DOWNSAMPLE_FACTOR)
        assert a.latent_mel_bins is not None  # PipelineConfig requires mel_bins
        return cls(
            batch=batch,
            frames=(num_frames - 1) // t + 1,
            height=height // s,
            width=width // s,
            audio_frames=round(duration_s * latents_per_second),
            latent_mel_bins=a.latent_mel_bins,
            fps=float(frame_rate),
            passes=cfg.guidance.passes(),
            stg_blocks=o.spatio_temporal_guidance_blocks,
            use_cross_timestep=o.use_cross_timestep,
            patch_size=cfg.transformer.patch_size,
            patch_size_t=cfg.transformer.patch_size_t,
            guidance_batching=o.guidance_batching,
            stg_fork=o.stg_fork,
            text_kv_cache=o.text_kv_cache,
        )


def pack_video(z: jax.Array, p: int = 1, pt: int = 1) -> jax.Array:
    """``[B, C, F, H, W] -> [B, F/pt * H/p * W/p, C*pt*p*p]`` (``LTX2Pipeline._pack_latents``)."""
    b, c, f, h, w = z.shape
    z = z.reshape(b, c, f // pt, pt, h // p, p, w // p, p)
    z = jnp.transpose(z, (0, 2, 4, 6, 1, 3, 5, 7))
    return z.reshape(b, (f // pt) * (h // p) * (w // p), c * pt * p * p)


def unpack_video(x: jax.Array, frames: int, height: int, width: int, p: int = 1, pt: int = 1) -> jax.Array:
    """Inverse of :func:`pack_video` for the grid ``frames x height x width`` (post-patch)."""
    b = x.shape[0]
    x = x.reshape(b, frames, height, width, -1, pt, p, p)
    x = jnp.transpose(x, (0, 4, 1, 5, 2, 6, 3, 7))
    return x.reshape(b, x.shape[1], frames * pt, height * p, width * p)
