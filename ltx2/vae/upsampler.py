"""LTX-2 latent upsampler (x2 spatial) in Flax NNX.

Follows diffusers ``LTX2LatentUpsamplerModel`` (``pipelines/ltx2/latent_upsampler.py``): a conv
stem, res blocks, an upsampler, res blocks and a final conv, all on video-VAE latents. LTX-2.0
upsamples with the *rational resampler* (per-frame Conv2d -> pixel shuffle by ``num`` -> binomial
blur with stride ``den``, scale ``num/den``); LTX-2.3 with a plain Conv2d + PixelShuffle.

Public ``__call__`` takes diffusers' ``[B, C, F, H, W]`` and returns ``[B, C, F, 2H, 2W]`` (x2 spatial);
inside everything runs channels-last ``[B, F, H, W, C]`` (suffix ``_bfhwc``; per-frame 2-D work
folds frames into the batch, ``[B*F, H, W, C]``, which is free in this layout).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2 import scopes
from ltx2.layers import silu
from ltx2.sharding import constrain
from ltx2.vae.conv import Conv, GroupNorm, buffer, check_common, config_fail, config_from_mapping, pad

# diffusers RATIONAL_RESAMPLER_SCALE_MAPPING: scale -> (upsample numerator, blur stride denominator).
RATIONAL_SCALES: dict[float, tuple[int, int]] = {0.75: (3, 4), 1.5: (3, 2), 2.0: (2, 1), 4.0: (4, 1)}
_ACT = ("activation_batch", "activation_frames", None, None, "activation_channels")


@dataclass(frozen=True)
class LatentUpsamplerConfig:
    """diffusers ``LTX2LatentUpsamplerModel`` config (same field names and defaults = LTX-2.0);
    ``sharding`` and ``dtype`` are ours."""

    in_channels: int = 128
    mid_channels: int = 1024
    num_blocks_per_stage: int = 4
    dims: int = 3
    spatial_upsample: bool = True
    temporal_upsample: bool = False
    rational_spatial_scale: float = 2.0
    use_rational_resampler: bool = True
    sharding: str = "replicated"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def tiny(cls) -> LatentUpsamplerConfig:
        """Verified tiny config: ``[B, 8, F, H, W] -> [B, 8, F, 2H, 2W]``."""
        return cls(in_channels=8, mid_channels=32, num_blocks_per_stage=1)

    @classmethod
    def ltx2_19b(cls) -> LatentUpsamplerConfig:
        """LTX-2.0 ``ltx-2-spatial-upscaler-x2-1.0`` (= class defaults, rational resampler)."""
        return cls()

    @classmethod
    def ltx2_3_22b(cls) -> LatentUpsamplerConfig:
        """LTX-2.3: Conv2d + PixelShuffle instead of the rational resampler."""
        return cls(use_rational_resampler=False)

    @classmethod
    def from_diffusers(cls, config: Mapping[str, Any], **overrides: Any) -> LatentUpsamplerConfig:
        return config_from_mapping(cls, config, overrides)

    @property
    def rational(self) -> bool:
        """Whether the rational resampler runs (spatial-only upsampling with it enabled)."""
        return self.spatial_upsample and not self.temporal_upsample and self.use_rational_resampler

    @property
    def spatial_scale(self) -> float:
        if not self.spatial_upsample:
            return 1.0
        return self.rational_spatial_scale if self.rational else 2.0

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for anything diffusers would not build or run."""
        for f in ("in_channels", "mid_channels", "num_blocks_per_stage"):
            if getattr(self, f) <= 0:
                config_fail(self, f, "must be positive")
        if self.mid_channels % 32:
            config_fail(self, "mid_channels", "must be a multiple of 32 (GroupNorm(32) everywhere)")
        if self.dims not in (2, 3):
            config_fail(self, "dims", "must be 2 or 3")
        if not (self.spatial_upsample or self.temporal_upsample):
            config_fail(self, "spatial_upsample", "spatial_upsample or temporal_upsample must be True")
        if self.temporal_upsample and self.dims != 3:
            config_fail(self, "dims", "temporal_upsample needs dims=3 (Conv3d upsampler)")
        if self.rational and self.rational_spatial_scale not in RATIONAL_SCALES:
            config_fail(self, "rational_spatial_scale", f"must be one of {sorted(RATIONAL_SCALES)}")
        check_common(self)


# ----------------------------------------------------------------------------- pieces


class SameConv(Conv):
    """torch ``ConvNd(kernel_size=3, padding=1)``: zero-pad 1 on every kernel axis, then convolve."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return super().__call__(pad(x, ((1, 1),) * len(self.kernel_size)))


def _conv(cfg: LatentUpsamplerConfig, cin: int, cout: int, nd: int, rngs: nnx.Rngs) -> SameConv:
    return SameConv(cin, cout, (3,) * nd, dtype=jnp.dtype(cfg.dtype), rngs=rngs)


def pixel_shuffle(x: jax.Array, factors: Sequence[int], axes: Sequence[int]) -> jax.Array:
    """diffusers ``PixelShuffleND`` channels-last: ``[.., S_a, .., C*prod(p)] -> [.., S_a*p_a, .., C]``
    for each spatial ``axes[i]`` with factor ``factors[i]``; channel ``c*prod(p) + (i, j, ..)``."""
    *lead, cp = x.shape
    n = len(lead)
    x = x.reshape(*lead, cp // math.prod(factors), *factors)
    perm: list[int] = []
    shape: list[int] = []
    for i, size in enumerate(lead):
        perm.append(i)
        shape.append(size)
        if i in axes:
            k = list(axes).index(i)
            perm.append(n + 1 + k)
            shape[-1] *= factors[k]
    return jnp.transpose(x, (*perm, n)).reshape(*shape, -1)


def binomial_kernel(size: int) -> np.ndarray:
    """Normalised outer product of the binomial row ``C(size-1, k)`` (``[1,4,6,4,1]`` for 5)."""
    k = np.array([math.comb(size - 1, i) for i in range(size)], np.float64)
    k2 = np.outer(k, k)
    return (k2 / k2.sum()).astype(np.float32)


class BlurDownsample(nnx.Module):
    """diffusers ``BlurDownsample``: depthwise binomial blur, stride ``s``, zero padding ``k//2``, per
    frame: ``[N, H, W, C] -> [N, ceil(H/s), ceil(W/s), C]``; identity when ``s == 1``. The kernel is a
    checkpoint buffer."""

    def __init__(self, stride: int, kernel_size: int = 5):
        self.stride = stride
        self.kernel = buffer(jnp.asarray(binomial_kernel(kernel_size)), (None, None))

    def __call__(self, x_nhwc: jax.Array) -> jax.Array:
        if self.stride == 1:
            return x_nhwc
        k, c = self.kernel.shape[0], x_nhwc.shape[-1]
        taps = jnp.broadcast_to(self.kernel[...].astype(x_nhwc.dtype)[:, :, None, None], (k, k, 1, c))
        return jax.lax.conv_general_dilated(
            x_nhwc,
            taps,
            (self.stride,) * 2,
            ((k // 2, k // 2),) * 2,
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
            feature_group_count=c,
        )


class RationalResampler(nnx.Module):
    """diffusers ``SpatialRationalResampler``: per-frame Conv2d ``M -> num^2 M``, pixel shuffle by
    ``num``, blur-downsample by ``den``: ``[N, H, W, M] -> [N, H*num/den, W*num/den, M]``."""

    def __init__(self, cfg: LatentUpsamplerConfig, *, rngs: nnx.Rngs):
        self.num, den = RATIONAL_SCALES[cfg.rational_spatial_scale]
        self.conv = _conv(cfg, cfg.mid_channels, self.num**2 * cfg.mid_channels, 2, rngs)
        self.blur_down = BlurDownsample(den)

    def __call__(self, x_nhwc: jax.Array) -> jax.Array:
        return self.blur_down(pixel_shuffle(self.conv(x_nhwc), (self.num, self.num), (1, 2)))


class ShuffleUpsampler(nnx.Module):
    """diffusers' ``Sequential(ConvNd, PixelShuffleND)`` upsamplers: spatial x2 (per-frame Conv2d,
    ``[N, H, W, M]``), or temporal x2 / spatiotemporal x2 (Conv3d on ``[B, F, H, W, M]``)."""

    def __init__(self, cfg: LatentUpsamplerConfig, *, rngs: nnx.Rngs):
        self.factors: tuple[int, ...]
        self.axes: tuple[int, ...]
        if not cfg.temporal_upsample:
            self.factors, self.axes, nd = (2, 2), (1, 2), 2
        elif cfg.spatial_upsample:
            self.factors, self.axes, nd = (2, 2, 2), (1, 2, 3), 3
        else:
            self.factors, self.axes, nd = (2,), (1,), 3
        self.conv = _conv(cfg, cfg.mid_channels, math.prod(self.factors) * cfg.mid_channels, nd, rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return pixel_shuffle(self.conv(x), self.factors, self.axes)


class ResBlock(nnx.Module):
    """``silu(x + norm2(conv2(silu(norm1(conv1(x))))))``, 3x3(x3) convs, GroupNorm(32, eps=1e-5)."""

    def __init__(self, cfg: LatentUpsamplerConfig, *, rngs: nnx.Rngs):
        m, nd, dtype = cfg.mid_channels, cfg.dims, jnp.dtype(cfg.dtype)
        self.conv1 = _conv(cfg, m, m, nd, rngs)
        self.norm1 = GroupNorm(32, m, eps=1e-5, dtype=dtype)
        self.conv2 = _conv(cfg, m, m, nd, rngs)
        self.norm2 = GroupNorm(32, m, eps=1e-5, dtype=dtype)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = silu(self.norm1(self.conv1(x)))
        return silu(self.norm2(self.conv2(h)) + x)


# ----------------------------------------------------------------------------- the model


class LTX2LatentUpsamplerModel(nnx.Module):
    """diffusers ``LTX2LatentUpsamplerModel``: latents ``[B, C, F, H, W] -> [B, C, F', sH, sW]`` with
    ``s = spatial_scale`` (2 for the releases) and ``F' = 2F - 1`` when ``temporal_upsample``.

    ``initial_conv`` -> GroupNorm(32) -> SiLU -> ``res_blocks`` -> ``upsampler`` -> ``post_upsample_res_blocks``
    -> ``final_conv``; convs are 3-D (``dims=3``) or per-frame 2-D (``dims=2``), the spatial
    upsampler is always per frame."""

    def __init__(self, cfg: LatentUpsamplerConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, LatentUpsamplerConfig):
            raise TypeError(f"LTX2LatentUpsamplerModel needs a LatentUpsamplerConfig, got {type(cfg).__name__}")
        cfg.validate()
        self.cfg = cfg
        self.initial_conv = _conv(cfg, cfg.in_channels, cfg.mid_channels, cfg.dims, rngs)
        self.initial_norm = GroupNorm(32, cfg.mid_channels, eps=1e-5, dtype=jnp.dtype(cfg.dtype))
        self.res_blocks = nnx.List([ResBlock(cfg, rngs=rngs) for _ in range(cfg.num_blocks_per_stage)])
        self.upsampler = RationalResampler(cfg, rngs=rngs) if cfg.rational else ShuffleUpsampler(cfg, rngs=rngs)
        self.post_upsample_res_blocks = nnx.List([ResBlock(cfg, rngs=rngs) for _ in range(cfg.num_blocks_per_stage)])
        self.final_conv = _conv(cfg, cfg.mid_channels, cfg.in_channels, cfg.dims, rngs)

    def _upsample(self, x: jax.Array, batch: int) -> jax.Array:
        if self.cfg.temporal_upsample:  # Conv3d + shuffle on [B, F, H, W, M]; the first frame is dropped
            return self.upsampler(x)[:, 1:]
        if x.ndim == 4:  # dims=2: frames already folded into the batch
            return self.upsampler(x)
        y = self.upsampler(x.reshape(-1, *x.shape[2:]))
        return y.reshape(batch, -1, *y.shape[1:])

    def upsample_bfhwc(self, x_bfhwc: jax.Array) -> jax.Array:
        """Channels-last core: ``[B, F, H, W, C] -> [B, F', sH, sW, C]``."""
        cfg = self.cfg
        b = x_bfhwc.shape[0]
        x = x_bfhwc.astype(jnp.dtype(cfg.dtype))
        if cfg.dims == 2:
            x = x.reshape(-1, *x.shape[2:])
        x = silu(self.initial_norm(self.initial_conv(x)))
        for block in self.res_blocks:
            x = block(x)
        x = self._upsample(x, b)
        for block in self.post_upsample_res_blocks:
            x = block(x)
        x = self.final_conv(x)
        x = x.reshape(b, -1, *x.shape[1:]) if cfg.dims == 2 else x
        return constrain(x, _ACT, cfg.sharding)

    @scopes.scoped(scopes.UPSAMPLER)
    def __call__(self, latents: jax.Array) -> jax.Array:
        """``[B, C, F, H, W] -> [B, C, F', sH, sW]`` (diffusers layout)."""
        if latents.ndim != 5:
            raise ValueError(f"expected [B, C, F, H, W] latents, got shape {latents.shape}")
        return jnp.moveaxis(self.upsample_bfhwc(jnp.moveaxis(latents, 1, -1)), -1, 1)


__all__ = ["LTX2LatentUpsamplerModel", "LatentUpsamplerConfig"]
