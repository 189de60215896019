"""LTX-2 video VAE (diffusers ``AutoencoderKLLTX2Video``, ``autoencoder_kl_ltx2.py``) in Flax NNX.

Public ``encode``/``decode`` take and return diffusers' layout ``[B, C, F, H, W]``; everything
inside runs channels-last ``[B, F, H, W, C]`` (the ``_bfhwc`` suffix), which XLA prefers on TPU.
Shapes: video ``[B, 3, 1 + 8k, 32h, 32w]`` <-> latent ``[B, latent_channels, 1 + k, h, w]`` for the
released layout. Parameter paths mirror diffusers' state-dict names (``ltx2.convert.video_vae``).
The config and its block plans are in :mod:`ltx2.vae.video_config` (re-exported here).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from ltx2 import scopes
from ltx2.layers import Linear, layer_norm, silu
from ltx2.sharding import constrain, param
from ltx2.vae.conv import Buffer, CausalConv3d, Conv
from ltx2.vae.video_config import DOWN_STRIDES, UP_STRIDES, DownPlan, UpPlan, VideoVAEConfig, decoder_plan, encoder_plan

_ACT = ("activation_batch", "activation_frames", None, None, "activation_channels")


# ----------------------------------------------------------------------------- pieces


def per_channel_rms_norm(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    """diffusers ``PerChannelRMSNorm``: ``x / sqrt(mean_C(x^2) + eps)``, no parameters."""
    xf = x.astype(jnp.float32)
    return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(x.dtype)


def spatial_noise(key: jax.Array, shape: tuple[int, int], dtype: jnp.dtype) -> jax.Array:
    """The ``[H, W]`` Gaussian map a noise-injecting resnet adds (one map for all channels)."""
    return jax.random.normal(key, shape, dtype)


def space_to_depth(x: jax.Array, stride: tuple[int, int, int]) -> jax.Array:
    """``[B, F, H, W, C] -> [B, F/s0, H/s1, W/s2, C*s0*s1*s2]``, channel order ``(c, s0, s1, s2)``."""
    b, f, h, w, c = x.shape
    s0, s1, s2 = stride
    x = x.reshape(b, f // s0, s0, h // s1, s1, w // s2, s2, c).transpose(0, 1, 3, 5, 7, 2, 4, 6)
    return x.reshape(b, f // s0, h // s1, w // s2, c * s0 * s1 * s2)


def depth_to_space(x: jax.Array, stride: tuple[int, int, int]) -> jax.Array:
    """Inverse of :func:`space_to_depth`."""
    b, f, h, w, c = x.shape
    s0, s1, s2 = stride
    x = x.reshape(b, f, h, w, c // (s0 * s1 * s2), s0, s1, s2).transpose(0, 1, 5, 2, 6, 3, 7, 4)
    return x.reshape(b, f * s0, h * s1, w * s2, c // (s0 * s1 * s2))


def timestep_sinusoids(t: jax.Array, dim: int = 256) -> jax.Array:
    """diffusers ``Timesteps(dim, flip_sin_to_cos=True, downscale_freq_shift=0)``: ``[B] -> [B, dim]``."""
    half = dim // 2
    freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
    arg = t.astype(jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.cos(arg), jnp.sin(arg)], axis=-1)


class TimestepEmbedder(nnx.Module):
    """``PixArtAlphaCombinedTimestepSizeEmbeddings(dim, 0)``: sinusoids -> Linear -> SiLU -> Linear."""

    def __init__(self, dim: int, *, dtype: jnp.dtype, rngs: nnx.Rngs):
        self.linear_1 = Linear(256, dim, axes=(None, "conv_out"), dtype=dtype, rngs=rngs)
        self.linear_2 = Linear(dim, dim, axes=("conv_in", "conv_out"), dtype=dtype, rngs=rngs)

    def __call__(self, t_b: jax.Array, dtype: jnp.dtype) -> jax.Array:
        return self.linear_2(silu(self.linear_1(timestep_sinusoids(t_b).astype(dtype))))


class LayerNorm(nnx.Module):
    """Affine LayerNorm over channels (torch ``nn.LayerNorm(C, elementwise_affine=True)``)."""

    def __init__(self, dim: int, *, eps: float, dtype: jnp.dtype):
        self.eps = eps
        self.scale = param(jnp.ones((dim,), dtype), ("norm",))
        self.bias = param(jnp.zeros((dim,), dtype), ("norm",))

    def __call__(self, x: jax.Array) -> jax.Array:
        return layer_norm(x, self.eps) * self.scale[...].astype(x.dtype) + self.bias[...].astype(x.dtype)


def _keys(key: jax.Array | None, n: int) -> list[jax.Array | None]:
    return [None] * n if key is None else list(jax.random.split(key, n))


def _modulate(x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    """``x * (1 + scale) + shift`` with per-(batch, channel) ``[B, C]`` modulation."""
    return x * (1 + scale[:, None, None, None, :]) + shift[:, None, None, None, :]


# ----------------------------------------------------------------------------- blocks


def _conv3(cfg: VideoVAEConfig, decoder: bool, cin: int, cout: int, rngs: nnx.Rngs, stride: int = 1):
    """A 3x3x3 ``LTX2VideoCausalConv3d`` with the encoder's or decoder's spatial padding."""
    mode = cfg.decoder_spatial_padding_mode if decoder else cfg.encoder_spatial_padding_mode
    dtype = jnp.dtype(cfg.dtype)
    return CausalConv3d(cin, cout, 3, stride=stride, spatial_padding_mode=mode, dtype=dtype, rngs=rngs)


class ResnetBlock(nnx.Module):
    """diffusers ``LTX2VideoResnetBlock3d``: (RMSNorm, [modulate], SiLU, causal conv, [noise]) x2
    plus a shortcut (affine LayerNorm + 1x1x1 conv when channels change). ``x [B, F, H, W, C_in]``;
    timestep conditioning exists in the decoder only, as in diffusers."""

    def __init__(self, cin: int, cout: int, cfg: VideoVAEConfig, *, decoder: bool, noise: bool, rngs: nnx.Rngs):
        dtype = jnp.dtype(cfg.dtype)
        self.conv1 = _conv3(cfg, decoder, cin, cout, rngs)
        self.conv2 = _conv3(cfg, decoder, cout, cout, rngs)
        same = cin == cout
        self.norm3 = None if same else LayerNorm(cin, eps=cfg.resnet_norm_eps, dtype=dtype)
        self.conv_shortcut = None if same else Conv(cin, cout, (1, 1, 1), dtype=dtype, rngs=rngs)
        zeros = lambda: param(jnp.zeros((cin,), dtype), ("conv_in",))  # noqa: E731
        self.per_channel_scale1 = zeros() if noise else None
        self.per_channel_scale2 = zeros() if noise else None
        table = jax.random.normal(rngs.params(), (4, cin), dtype) / cin**0.5
        tc = decoder and cfg.timestep_conditioning
        self.scale_shift_table = param(table, ("table", "conv_in")) if tc else None

    def _inject(self, h: jax.Array, scale: nnx.Param | None, key: jax.Array | None) -> jax.Array:
        if scale is None:
            return h
        if key is None:
            raise ValueError("decoder_inject_noise is enabled: decode(..., key=...) needs a PRNG key")
        noise = spatial_noise(key, (h.shape[2], h.shape[3]), h.dtype)
        return h + noise[None, None, :, :, None] * scale[...].astype(h.dtype)

    def __call__(self, x: jax.Array, temb: jax.Array | None = None, *, causal: bool, key=None) -> jax.Array:
        """``temb [B, 4*C_in]``: the block's embedded timestep, when timestep-conditioned."""
        k1, k2 = _keys(key, 2)
        h = per_channel_rms_norm(x)
        if self.scale_shift_table is not None:
            assert temb is not None, "a timestep-conditioned resnet needs its block's embedded timestep"
            mod = temb.reshape(temb.shape[0], 4, -1) + self.scale_shift_table[...].astype(temb.dtype)[None]
            h = _modulate(h, mod[:, 0], mod[:, 1])
        h = self._inject(self.conv1(silu(h), causal=causal), self.per_channel_scale1, k1)
        h = per_channel_rms_norm(h)
        if self.scale_shift_table is not None:
            h = _modulate(h, mod[:, 2], mod[:, 3])
        h = self._inject(self.conv2(silu(h), causal=causal), self.per_channel_scale2, k2)
        if self.conv_shortcut is not None and self.norm3 is not None:
            x = self.conv_shortcut(self.norm3(x))
        return h + x


class Downsampler(nnx.Module):
    """diffusers ``LTX2VideoDownsampler3d``: causal conv to ``out/s`` channels then
    space-to-depth, plus a space-to-depth residual averaged over channel groups."""

    def __init__(self, cin: int, cout: int, stride: tuple[int, int, int], cfg: VideoVAEConfig, rngs: nnx.Rngs):
        vol = math.prod(stride)
        self.stride, self.group_size = stride, cin * vol // cout
        self.conv = _conv3(cfg, False, cin, cout // vol, rngs)

    def __call__(self, x: jax.Array, *, causal: bool) -> jax.Array:
        s0, s1, s2 = self.stride
        x = jnp.concatenate([x[:, : s0 - 1], x], axis=1)  # 1 + s0*k frames become divisible by s0
        if x.shape[1] % s0 or x.shape[2] % s1 or x.shape[3] % s2:
            raise ValueError(f"downsampler stride {self.stride} does not divide padded F, H, W {x.shape[1:4]}")
        res = space_to_depth(x, self.stride)
        res = res.reshape(*res.shape[:-1], -1, self.group_size).mean(axis=-1)
        return space_to_depth(self.conv(x, causal=causal), self.stride) + res


class Upsampler(nnx.Module):
    """diffusers ``LTX2VideoUpsampler3d``: causal conv then depth-to-space, dropping the first
    ``s0 - 1`` frames; the residual is the depth-to-space input tiled over channels."""

    def __init__(self, cin: int, plan: UpPlan, cfg: VideoVAEConfig, rngs: nnx.Rngs):
        assert plan.upsample is not None
        self.stride, self.residual = UP_STRIDES[plan.upsample], plan.residual
        self.repeats = math.prod(self.stride) // plan.factor
        self.conv = _conv3(cfg, True, cin, cin * math.prod(self.stride) // plan.factor, rngs)

    def __call__(self, x: jax.Array, *, causal: bool) -> jax.Array:
        drop = self.stride[0] - 1
        h = depth_to_space(self.conv(x, causal=causal), self.stride)[:, drop:]
        if self.residual:
            h = h + jnp.tile(depth_to_space(x, self.stride), (1, 1, 1, 1, self.repeats))[:, drop:]
        return h


def _resnets(n: int, ch: int, cfg: VideoVAEConfig, *, decoder: bool, noise: bool, rngs: nnx.Rngs) -> nnx.List:
    return nnx.List([ResnetBlock(ch, ch, cfg, decoder=decoder, noise=noise, rngs=rngs) for _ in range(n)])


def _run_resnets(resnets: nnx.List, x: jax.Array, temb, *, causal: bool, key) -> jax.Array:
    for resnet, k in zip(resnets, _keys(key, len(resnets)), strict=True):
        x = resnet(x, temb, causal=causal, key=k)
    return x


class DownBlock(nnx.Module):
    """diffusers ``LTX2VideoDownBlock3D``: resnets at the input width, then one downsampler."""

    def __init__(self, plan: DownPlan, cfg: VideoVAEConfig, *, rngs: nnx.Rngs):
        ch = plan.channels
        self.resnets = _resnets(plan.num_layers, ch, cfg, decoder=False, noise=False, rngs=rngs)
        self.downsampler = (
            None
            if plan.downsample is None
            else _conv3(cfg, False, ch, ch, rngs, stride=2)
            if plan.downsample == "conv"
            else Downsampler(ch, plan.out, DOWN_STRIDES[plan.downsample], cfg, rngs)
        )

    def __call__(self, x: jax.Array, *, causal: bool) -> jax.Array:
        x = _run_resnets(self.resnets, x, None, causal=causal, key=None)
        return x if self.downsampler is None else self.downsampler(x, causal=causal)


class MidBlock(nnx.Module):
    """diffusers ``LTX2VideoMidBlock3d``: resnets, with their own timestep embedder if conditioned."""

    def __init__(self, ch: int, num_layers: int, cfg: VideoVAEConfig, *, decoder: bool, noise: bool, rngs):
        tc = decoder and cfg.timestep_conditioning
        self.time_embedder = TimestepEmbedder(4 * ch, dtype=jnp.dtype(cfg.dtype), rngs=rngs) if tc else None
        self.resnets = _resnets(num_layers, ch, cfg, decoder=decoder, noise=noise, rngs=rngs)

    @scopes.module_scope
    def __call__(self, x: jax.Array, t_b: jax.Array | None = None, *, causal: bool, key=None) -> jax.Array:
        temb = None if self.time_embedder is None or t_b is None else self.time_embedder(t_b, x.dtype)
        return _run_resnets(self.resnets, x, temb, causal=causal, key=key)


class UpBlock(nnx.Module):
    """diffusers ``LTX2VideoUpBlock3d``: [conv_in resnet], upsampler, resnets at the output width."""

    def __init__(self, plan: UpPlan, cfg: VideoVAEConfig, *, rngs: nnx.Rngs):
        tc, cin, out, noise = cfg.timestep_conditioning, plan.channels_in, plan.out, plan.inject_noise
        self.time_embedder = TimestepEmbedder(4 * cin, dtype=jnp.dtype(cfg.dtype), rngs=rngs) if tc else None
        # decoder_plan rules out conditioning and noise when this conv_in resnet exists.
        self.conv_in = None if cin == out else ResnetBlock(cin, out, cfg, decoder=True, noise=noise, rngs=rngs)
        self.upsampler = None if plan.upsample is None else Upsampler(out * plan.factor, plan, cfg, rngs)
        self.resnets = _resnets(plan.num_layers, out, cfg, decoder=True, noise=noise, rngs=rngs)

    @scopes.module_scope
    def __call__(self, x: jax.Array, t_b: jax.Array | None = None, *, causal: bool, key=None) -> jax.Array:
        if self.conv_in is not None:
            x = self.conv_in(x, causal=causal)
        temb = None if self.time_embedder is None or t_b is None else self.time_embedder(t_b, x.dtype)
        if self.upsampler is not None:
            x = self.upsampler(x, causal=causal)
        return _run_resnets(self.resnets, x, temb, causal=causal, key=key)


# ----------------------------------------------------------------------------- encoder / decoder


class VideoEncoder(nnx.Module):
    """diffusers ``LTX2VideoEncoder3d``: ``[B, F, H, W, C] -> moments [B, f, h, w, 2*latent]``."""

    def __init__(self, cfg: VideoVAEConfig, *, rngs: nnx.Rngs):
        self.patch_size, self.sharding = cfg.patch_size, cfg.sharding
        top, latent = cfg.block_out_channels[-1], cfg.latent_channels
        self.conv_in = _conv3(cfg, False, cfg.in_channels * cfg.patch_size**2, latent, rngs)
        self.down_blocks = nnx.List([DownBlock(p, cfg, rngs=rngs) for p in encoder_plan(cfg)])
        self.mid_block = MidBlock(top, cfg.layers_per_block[-1], cfg, decoder=False, noise=False, rngs=rngs)
        self.conv_out = _conv3(cfg, False, top, latent + 1, rngs)

    def patchify(self, x: jax.Array) -> jax.Array:
        """``[B, F, H, W, C] -> [B, F, H/p, W/p, C*p*p]`` with channel order ``(c, pw, ph)``
        (diffusers permutes ``(0, 1, 3, 7, 5, 2, 4, 6)``: the width patch index comes first)."""
        b, f, h, w, c = x.shape
        p = self.patch_size
        if h % p or w % p:
            raise ValueError(f"video height/width {(h, w)} must be multiples of patch_size={p}")
        x = x.reshape(b, f, h // p, p, w // p, p, c).transpose(0, 1, 2, 4, 6, 5, 3)
        return x.reshape(b, f, h // p, w // p, c * p * p)

    def __call__(self, x_bfhwc: jax.Array, *, causal: bool) -> jax.Array:
        x = self.conv_in(self.patchify(x_bfhwc), causal=causal)
        for block in self.down_blocks:
            x = constrain(block(x, causal=causal), _ACT, self.sharding)
        x = self.mid_block(x, causal=causal)
        x = self.conv_out(silu(per_channel_rms_norm(x)), causal=causal)
        # diffusers repeats the single logvar channel: [mean (latent), logvar (latent)].
        return jnp.concatenate([x, jnp.repeat(x[..., -1:], x.shape[-1] - 2, axis=-1)], axis=-1)


class VideoDecoder(nnx.Module):
    """diffusers ``LTX2VideoDecoder3d``: ``z [B, f, h, w, latent] -> video [B, F, H, W, C]``."""

    def __init__(self, cfg: VideoVAEConfig, *, rngs: nnx.Rngs):
        plan, dtype = decoder_plan(cfg), jnp.dtype(cfg.dtype)
        self.patch_size, self.sharding = cfg.patch_size, cfg.sharding
        top, last, layers = cfg.decoder_block_out_channels[-1], plan[-1].out, cfg.decoder_layers_per_block[-1]
        noise = cfg.decoder_inject_noise[-1]  # diffusers reverses the tuple: the mid block's is last
        self.conv_in = _conv3(cfg, True, cfg.latent_channels, top, rngs)
        self.mid_block = MidBlock(top, layers, cfg, decoder=True, noise=noise, rngs=rngs)
        self.up_blocks = nnx.List([UpBlock(p, cfg, rngs=rngs) for p in plan])
        self.conv_out = _conv3(cfg, True, last, cfg.out_channels * cfg.patch_size**2, rngs)
        tc = cfg.timestep_conditioning
        self.timestep_scale_multiplier = param(jnp.asarray(1000.0, jnp.float32), ()) if tc else None
        self.time_embedder = TimestepEmbedder(2 * last, dtype=dtype, rngs=rngs) if tc else None
        table = jax.random.normal(rngs.params(), (2, last), dtype) / last**0.5
        self.scale_shift_table = param(table, ("table", "conv_in")) if tc else None
        scopes.label(self, scopes.DECODER_CHILDREN)

    def unpatchify(self, x: jax.Array) -> jax.Array:
        """Inverse of the encoder's patchify: ``[B, F, h, w, C*p*p] -> [B, F, h*p, w*p, C]``."""
        b, f, h, w, c = x.shape
        p = self.patch_size
        x = x.reshape(b, f, h, w, c // (p * p), p, p).transpose(0, 1, 2, 6, 3, 5, 4)
        return x.reshape(b, f, h * p, w * p, c // (p * p))

    @scopes.scoped(scopes.VIDEO_VAE)
    def __call__(self, z_bfhwc: jax.Array, t_b: jax.Array | None = None, *, causal: bool, key=None) -> jax.Array:
        """``t_b [B]``: the decode timestep (diffusers ``temb``), needed iff timestep-conditioned."""
        if (t_b is None) != (self.timestep_scale_multiplier is None):
            raise ValueError("decode timestep (temb) must be given iff timestep_conditioning=True")
        if t_b is not None and self.timestep_scale_multiplier is not None:
            t_b = jnp.broadcast_to(jnp.asarray(t_b, jnp.float32).reshape(-1), (z_bfhwc.shape[0],))
            t_b = t_b * self.timestep_scale_multiplier[...]
        keys = _keys(key, 1 + len(self.up_blocks))
        x = self.mid_block(self.conv_in(z_bfhwc, causal=causal), t_b, causal=causal, key=keys[0])
        for block, k in zip(self.up_blocks, keys[1:], strict=True):
            x = constrain(block(x, t_b, causal=causal, key=k), _ACT, self.sharding)
        x = per_channel_rms_norm(x)
        if t_b is not None and self.time_embedder is not None and self.scale_shift_table is not None:
            mod = self.time_embedder(t_b, x.dtype).reshape(x.shape[0], 2, -1)
            mod = mod + self.scale_shift_table[...].astype(x.dtype)[None]
            x = _modulate(x, mod[:, 0], mod[:, 1])
        return self.unpatchify(self.conv_out(silu(x), causal=causal))


# ----------------------------------------------------------------------------- the VAE


def _to_bfhwc(x: jax.Array) -> jax.Array:
    if x.ndim != 5:
        raise ValueError(f"expected a [B, C, F, H, W] array, got shape {x.shape}")
    return jnp.moveaxis(x, 1, -1)


class VideoVAE(nnx.Module):
    """diffusers ``AutoencoderKLLTX2Video``. Public methods use diffusers' ``[B, C, F, H, W]``."""

    def __init__(self, cfg: VideoVAEConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, VideoVAEConfig):
            raise TypeError(f"VideoVAE needs a VideoVAEConfig, got {type(cfg).__name__}")
        cfg.validate()
        self.cfg = cfg
        self.encoder = VideoEncoder(cfg, rngs=rngs)
        self.decoder = VideoDecoder(cfg, rngs=rngs)
        self.latents_mean = Buffer(jnp.zeros((cfg.latent_channels,), jnp.float32), logical_axes=(None,))
        self.latents_std = Buffer(jnp.ones((cfg.latent_channels,), jnp.float32), logical_axes=(None,))

    def encode_distribution(self, x: jax.Array, *, causal: bool | None = None) -> tuple[jax.Array, jax.Array]:
        """``x [B, C, F, H, W]`` -> ``(mean, logvar)``, each ``[B, latent, f, h, w]``; logvar is
        clamped to [-30, 20] (diffusers ``DiagonalGaussianDistribution``). ``causal=None`` uses
        ``cfg.encoder_causal``; unlike diffusers (``causal or is_causal``), ``False`` is honoured."""
        causal = self.cfg.encoder_causal if causal is None else causal
        moments = self.encoder(_to_bfhwc(x).astype(jnp.dtype(self.cfg.dtype)), causal=causal)
        mean, logvar = jnp.split(jnp.moveaxis(moments, -1, 1), 2, axis=1)
        return mean, jnp.clip(logvar, -30.0, 20.0)

    def encode(self, x: jax.Array, *, causal: bool | None = None) -> jax.Array:
        """``x [B, C, F, H, W]`` -> latent mean (the posterior's mode) ``[B, latent, f, h, w]``."""
        return self.encode_distribution(x, causal=causal)[0]

    def decode(
        self,
        z: jax.Array,
        temb: jax.Array | None = None,
        *,
        causal: bool | None = None,
        key: jax.Array | None = None,
    ) -> jax.Array:
        """``z [B, latent, f, h, w]`` -> video ``[B, C, F, H, W]``. ``temb``: decode timestep ``[B]``
        or scalar, required iff ``timestep_conditioning``. ``key``: PRNG key for the resnets'
        noise injection, required iff any ``decoder_inject_noise``. ``causal=None`` uses
        ``cfg.decoder_causal``."""
        causal = self.cfg.decoder_causal if causal is None else causal
        out = self.decoder(_to_bfhwc(z).astype(jnp.dtype(self.cfg.dtype)), temb, causal=causal, key=key)
        return jnp.moveaxis(out, -1, 1)

    def _stats(self, z: jax.Array) -> tuple[jax.Array, jax.Array]:
        shape = (1, -1, 1, 1, 1)
        return self.latents_mean[...].reshape(shape).astype(z.dtype), self.latents_std[...].reshape(shape).astype(
            z.dtype
        )

    def normalize_latents(self, z: jax.Array) -> jax.Array:
        """``(z - mean) * scaling_factor / std`` over channels of ``[B, C, F, H, W]`` (pipeline)."""
        mean, std = self._stats(z)
        return (z - mean) * self.cfg.scaling_factor / std

    def denormalize_latents(self, z: jax.Array) -> jax.Array:
        """Inverse of :meth:`normalize_latents`: ``z * std / scaling_factor + mean``."""
        mean, std = self._stats(z)
        return z * std / self.cfg.scaling_factor + mean


def mix_decode_noise(z: jax.Array, noise: jax.Array, scale: jax.Array | float) -> jax.Array:
    """``(1 - s) * z + s * noise`` with ``s`` scalar or per batch ``[B]``: the LTX-2 pipeline's
    ``decode_noise_scale`` step before denormalising and decoding a timestep-conditioned VAE."""
    s = jnp.asarray(scale, z.dtype).reshape(-1, *(1,) * (z.ndim - 1))
    return (1 - s) * z + s * noise


__all__ = [
    "DownPlan",
    "UpPlan",
    "VideoDecoder",
    "VideoEncoder",
    "VideoVAE",
    "VideoVAEConfig",
    "decoder_plan",
    "encoder_plan",
    "mix_decode_noise",
]
