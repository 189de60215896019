"""Guidance of LTX-2 in x0 space, as ``LTX2Pipeline.__call__`` does it (diffusers).

Each model prediction (a velocity ``v``) becomes a clean-sample estimate ``x0 = x - v*sigma``;
the guided estimate adds one delta per extra pass,

    x0_g = x0 + (cfg - 1)(x0 - x0_uncond) + stg (x0 - x0_perturbed) + (modality - 1)(x0 - x0_isolated)

optionally rescaled towards the conditional estimate's std (``rescale_noise_cfg``, Lin et al.
2023, sec. 3.4), then turns back into a velocity ``(x - x0_g) / sigma`` for the Euler step.
Video and audio use the same rule with their own scales.

Scales are traced values (a pytree of float32 scalars), never static: changing them does not
recompile; rescale on/off is a ``lax.cond``. *Which* passes run (uncond / perturbed / isolated)
is structure, decided once from the config by :meth:`GuidanceConfig.passes`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ltx2 import scopes


class GuidanceScales(NamedTuple):
    """Scales of one modality, as float32 arrays (traced under jit)."""

    cfg: jax.Array
    stg: jax.Array
    modality: jax.Array
    rescale: jax.Array


class AVGuidanceScales(NamedTuple):
    video: GuidanceScales
    audio: GuidanceScales


class GuidancePasses(NamedTuple):
    """Which extra transformer passes run (static): text-unconditional (CFG), perturbed
    self-attention (STG), cross-modal attention off (modality isolation)."""

    cfg: bool
    stg: bool
    modality: bool


@dataclass(frozen=True)
class GuidanceConfig:
    """Guidance scales; defaults are ``LTX2Pipeline.__call__``'s (LTX-2.3 recommendations)."""

    guidance_scale: float = 3.0
    stg_scale: float = 1.0
    modality_scale: float = 3.0
    guidance_rescale: float = 0.7
    audio_guidance_scale: float = 7.0
    audio_stg_scale: float = 1.0
    audio_modality_scale: float = 3.0
    audio_guidance_rescale: float = 0.7

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"GuidanceConfig.{f.name}={value!r}: must be a number")
        for name in ("guidance_rescale", "audio_guidance_rescale"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"GuidanceConfig.{name}={getattr(self, name)!r}: must be in [0, 1]")

    @classmethod
    def cfg_only(cls, guidance_scale: float = 3.0, audio_guidance_scale: float | None = None) -> GuidanceConfig:
        """Plain CFG (the LTX-2.0 style run): no STG, no modality guidance, no rescale."""
        audio = guidance_scale if audio_guidance_scale is None else audio_guidance_scale
        return cls(guidance_scale, 0.0, 1.0, 0.0, audio, 0.0, 1.0, 0.0)

    def passes(self) -> GuidancePasses:
        """The passes diffusers runs for these scales (either modality asking is enough)."""
        return GuidancePasses(
            cfg=self.guidance_scale > 1.0 or self.audio_guidance_scale > 1.0,
            stg=self.stg_scale > 0.0 or self.audio_stg_scale > 0.0,
            modality=self.modality_scale > 1.0 or self.audio_modality_scale > 1.0,
        )

    def scales(self) -> AVGuidanceScales:
        """The scales as float32 device arrays, to pass into compiled functions."""
        return jax.tree.map(jnp.asarray, self.host_scales())

    def host_scales(self) -> AVGuidanceScales:
        """The scales as float32 numpy scalars: no device is touched, so a compile-only stage (whose
        default backend may be a TPU topology with no device to run on) can take their shapes."""

        def s(*values: float) -> GuidanceScales:
            host: list[Any] = [np.asarray(v, np.float32) for v in values]  # jax.Array once passed to a jit
            return GuidanceScales(*host)

        return AVGuidanceScales(
            video=s(self.guidance_scale, self.stg_scale, self.modality_scale, self.guidance_rescale),
            audio=s(
                self.audio_guidance_scale, self.audio_stg_scale, self.audio_modality_scale, self.audio_guidance_rescale
            ),
        )

    def replace(self, **changes: Any) -> GuidanceConfig:
        return dataclasses.replace(self, **changes)


def velocity_to_x0(sample: jax.Array, velocity: jax.Array, sigma: jax.Array) -> jax.Array:
    """``x0 = x - v * sigma`` (``LTX2Pipeline.convert_velocity_to_x0``)."""
    return sample - velocity * sigma


def x0_to_velocity(sample: jax.Array, x0: jax.Array, sigma: jax.Array) -> jax.Array:
    """``v = (x - x0) / sigma`` (``LTX2Pipeline.convert_x0_to_velocity``)."""
    return (sample - x0) / sigma


def rescale_noise_cfg(guided: jax.Array, cond: jax.Array, rescale: jax.Array) -> jax.Array:
    """Mix ``guided`` with itself rescaled to ``cond``'s per-sample std (unbiased, over all
    non-batch axes): diffusers ``rescale_noise_cfg``."""
    axes = tuple(range(1, guided.ndim))
    std_cond = jnp.std(cond, axis=axes, keepdims=True, ddof=1)
    std_guided = jnp.std(guided, axis=axes, keepdims=True, ddof=1)
    rescaled = guided * (std_cond / std_guided)
    return rescale * rescaled + (1 - rescale) * guided


def maybe_rescale(guided: jax.Array, cond: jax.Array, rescale: jax.Array) -> jax.Array:
    """:func:`rescale_noise_cfg` when ``rescale > 0``, else ``guided`` unchanged (``lax.cond``
    on the traced value, so toggling it does not recompile)."""
    return jax.lax.cond(
        rescale > 0, lambda: rescale_noise_cfg(guided, cond, rescale).astype(guided.dtype), lambda: guided
    )


def guide_x0(
    x0_cond: jax.Array,
    scales: GuidanceScales,
    *,
    x0_uncond: jax.Array | None = None,
    x0_perturbed: jax.Array | None = None,
    x0_isolated: jax.Array | None = None,
) -> jax.Array:
    """Guided x0 from the conditional estimate and the estimates of the passes that ran
    (``None`` = pass not run, its delta is 0), summed in diffusers' order, then rescaled."""
    guided = x0_cond
    if x0_uncond is not None:
        guided = guided + (scales.cfg - 1) * (x0_cond - x0_uncond)
    if x0_perturbed is not None:
        guided = guided + scales.stg * (x0_cond - x0_perturbed)
    if x0_isolated is not None:
        guided = guided + (scales.modality - 1) * (x0_cond - x0_isolated)
    return maybe_rescale(guided, x0_cond, scales.rescale)


@scopes.scoped(scopes.GUIDANCE)
def guided_velocity(
    sample: jax.Array,
    sigma: jax.Array,
    v_cond: jax.Array,
    scales: GuidanceScales,
    *,
    v_uncond: jax.Array | None = None,
    v_perturbed: jax.Array | None = None,
    v_isolated: jax.Array | None = None,
) -> jax.Array:
    """The velocity to step with, from the model's velocities (cast to float32 like the
    pipeline) at noise level ``sigma``: to x0, :func:`guide_x0`, back to a velocity."""

    def x0(v: jax.Array) -> jax.Array:
        return velocity_to_x0(sample, v.astype(jnp.float32), sigma)

    def maybe_x0(v: jax.Array | None) -> jax.Array | None:
        return None if v is None else x0(v)

    guided = guide_x0(
        x0(v_cond),
        scales,
        x0_uncond=maybe_x0(v_uncond),
        x0_perturbed=maybe_x0(v_perturbed),
        x0_isolated=maybe_x0(v_isolated),
    )
    return x0_to_velocity(sample, guided, sigma)


def split_cfg_batch(pred: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(uncond, cond) halves of a prediction over the ``[negative; positive]`` CFG batch."""
    half = pred.shape[0] // 2
    return pred[:half], pred[half:]
