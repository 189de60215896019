"""LTX-2 audio VAE: stereo log-mel spectrograms <-> audio latents, in Flax NNX.

Follows diffusers ``AutoencoderKLLTX2Audio`` (``models/autoencoders/autoencoder_kl_ltx2_audio.py``):
the LDM encoder/decoder with 2-D convolutions made causal along one axis (``causality_axis="height"``,
i.e. time, is the default and the released setting) and parameter-free pixel norms.

Public methods take diffusers' layout: mel ``[B, 2, T, M]`` (T mel frames, M mel bins), latents
``[B, Cz, A, M/4]`` with ``A = (T - 1)/4 + 1``; ``decode`` maps ``A`` latent frames to ``4A - 3`` mel
frames. Inside, everything runs channels-last ``[B, T, M, C]`` (suffix ``_btmc``).

Quirk kept from the pipeline: the DiT sees *packed* latents ``[B, A, Cz*M/4]``, normalised per
feature with ``latents_mean/latents_std`` of size ``base_channels``; that only lines up when
``base_channels == latent_channels * mel_bins / 4`` (2.0: 128 = 8 * 64/4).

Its buffers, group norm and config checks are shared with the other VAEs and live in
:mod:`ltx2.vae.conv`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from ltx2 import scopes
from ltx2.layers import silu
from ltx2.sharding import constrain
from ltx2.vae.conv import Conv, GroupNorm, buffer, check_common, config_fail, config_from_mapping, pad

LATENT_DOWNSAMPLE_FACTOR = 4
CAUSALITY_AXES = ("none", "width", "height", "width-compatibility")
NORM_TYPES = ("pixel", "group")
_ACT = ("activation_batch", "activation_frames", None, "activation_channels")


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class AudioVAEConfig:
    """diffusers ``AutoencoderKLLTX2Audio`` config (same field names and defaults); ``sharding``
    (a strategy in ``ltx2.sharding``) and ``dtype`` (parameters and compute) are ours.

    ``dropout`` is accepted and unused (inference only); ``sample_rate``, ``mel_hop_length`` and
    ``is_causal`` describe the mel front end for the pipeline and do not change the network.
    """

    base_channels: int = 128
    output_channels: int = 2
    ch_mult: tuple[int, ...] = (1, 2, 4)
    num_res_blocks: int = 2
    attn_resolutions: tuple[int, ...] | None = None
    in_channels: int = 2
    resolution: int = 256
    latent_channels: int = 8
    norm_type: str = "pixel"
    causality_axis: str = "height"
    dropout: float = 0.0
    mid_block_add_attention: bool = False
    sample_rate: int = 16000
    mel_hop_length: int = 160
    is_causal: bool = True
    mel_bins: int | None = 64
    double_z: bool = True
    sharding: str = "replicated"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def tiny(cls) -> AudioVAEConfig:
        """Verified tiny config (2.0's ch_mult / res-block layout; 16 = 4 * 16/4 for packing)."""
        return cls(base_channels=16, ch_mult=(1, 2, 4), num_res_blocks=2, resolution=16, latent_channels=4, mel_bins=16)

    @classmethod
    def ltx2_19b(cls) -> AudioVAEConfig:
        """LTX-2.0 release (= class defaults; 2.3 and 2.5 ship the same audio VAE)."""
        return cls()

    @classmethod
    def from_diffusers(cls, config: Mapping[str, Any], **overrides: Any) -> AudioVAEConfig:
        return config_from_mapping(cls, config, overrides)

    @property
    def latent_mel_bins(self) -> int | None:
        return None if self.mel_bins is None else self.mel_bins // LATENT_DOWNSAMPLE_FACTOR

    @property
    def packed_latent_channels(self) -> int | None:
        """Width ``Cz * M/4`` of a packed latent token (what the DiT's audio stream sees)."""
        return None if self.mel_bins is None else self.latent_channels * self.mel_bins // LATENT_DOWNSAMPLE_FACTOR

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for anything diffusers would not build or run."""
        for f in ("base_channels", "output_channels", "num_res_blocks", "in_channels", "resolution", "latent_channels"):
            if getattr(self, f) <= 0:
                config_fail(self, f, "must be positive")
        if not self.ch_mult or min(self.ch_mult) <= 0:
            config_fail(self, "ch_mult", "must be a non-empty tuple of positive ints")
        if self.norm_type not in NORM_TYPES:
            config_fail(self, "norm_type", f"must be one of {NORM_TYPES}")
        if self.causality_axis not in CAUSALITY_AXES:
            config_fail(self, "causality_axis", f"must be one of {CAUSALITY_AXES}")
        if self.norm_type == "group" and self.causality_axis != "none":
            config_fail(self, "causality_axis", "norm_type='group' only works with causality_axis='none'")
        if self.norm_type == "group" and self.base_channels % 32:
            config_fail(self, "base_channels", "must be a multiple of 32 for GroupNorm(32)")
        if self.mel_bins is not None and (self.mel_bins <= 0 or self.mel_bins % LATENT_DOWNSAMPLE_FACTOR):
            config_fail(self, "mel_bins", "must be a positive multiple of 4")
        if not 0.0 <= self.dropout < 1.0:
            config_fail(self, "dropout", "must be in [0, 1)")
        check_common(self)


# ----------------------------------------------------------------------------- blocks


def _causal_pads(kernel: int, causality_axis: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """``((before, after) on T, (before, after) on M)`` zero padding of a stride-1 ``k x k`` conv:
    all ``k-1`` before the causal axis, split evenly (extra after) on the other."""
    p = kernel - 1
    even = (p // 2, p - p // 2)
    if causality_axis == "height":
        return (p, 0), even
    if causality_axis in ("width", "width-compatibility"):
        return even, (p, 0)
    return even, even


# LTX2AudioDownsample's F.pad per causality axis, as ((T before, after), (M before, after)).
_DOWNSAMPLE_PADS = {
    "none": ((0, 1), (0, 1)),
    "width": ((0, 1), (2, 0)),
    "height": ((2, 0), (0, 1)),
    "width-compatibility": ((0, 1), (1, 0)),
}


class CausalConv2d(nnx.Module):
    """``LTX2AudioCausalConv2d``: zero-pad causally along ``causality_axis``, stride-1 conv."""

    def __init__(self, cin: int, cout: int, kernel: int, cfg: AudioVAEConfig, *, rngs: nnx.Rngs):
        self.pads = _causal_pads(kernel, cfg.causality_axis)
        self.conv = Conv(cin, cout, (kernel, kernel), dtype=jnp.dtype(cfg.dtype), rngs=rngs)

    @scopes.module_scope
    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        return self.conv(pad(x_btmc, self.pads))


class PixelNorm(nnx.Module):
    """``LTX2AudioPixelNorm``: ``x / sqrt(mean_C(x^2) + eps)`` at every position, no parameters."""

    def __init__(self, eps: float = 1e-6):
        self.eps = eps

    def __call__(self, x: jax.Array) -> jax.Array:
        xf = x.astype(jnp.float32)
        return (xf / jnp.sqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)).astype(x.dtype)


def _norm(cfg: AudioVAEConfig, channels: int) -> nnx.Module:
    if cfg.norm_type == "pixel":
        return PixelNorm(1e-6)
    return GroupNorm(32, channels, eps=1e-6, dtype=jnp.dtype(cfg.dtype))


class ResnetBlock(nnx.Module):
    """``LTX2AudioResnetBlock`` (no time embedding): ``s(x) + conv2(silu(norm2(conv1(silu(norm1 x)))))``
    where ``s`` is a causal 1x1 ``nin_shortcut`` when the width changes. ``[B,T,M,Cin] -> [B,T,M,Cout]``."""

    def __init__(self, cfg: AudioVAEConfig, cin: int, cout: int, *, rngs: nnx.Rngs):
        self.norm1 = _norm(cfg, cin)
        self.conv1 = CausalConv2d(cin, cout, 3, cfg, rngs=rngs)
        self.norm2 = _norm(cfg, cout)
        self.conv2 = CausalConv2d(cout, cout, 3, cfg, rngs=rngs)
        self.nin_shortcut = CausalConv2d(cin, cout, 1, cfg, rngs=rngs) if cin != cout else None

    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        h = self.conv1(silu(self.norm1(x_btmc)))
        h = self.conv2(silu(self.norm2(h)))
        return (x_btmc if self.nin_shortcut is None else self.nin_shortcut(x_btmc)) + h


class AttnBlock(nnx.Module):
    """``LTX2AudioAttnBlock``: one-head self-attention over all ``N = T*M`` positions via 1x1 convs."""

    def __init__(self, cfg: AudioVAEConfig, channels: int, *, rngs: nnx.Rngs):
        dtype = jnp.dtype(cfg.dtype)
        self.norm = _norm(cfg, channels)
        self.q, self.k, self.v, self.proj_out = (
            Conv(channels, channels, (1, 1), dtype=dtype, rngs=rngs) for _ in range(4)
        )

    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        b, t, m, c = x_btmc.shape
        h = self.norm(x_btmc)
        q_bnc, k_bnc, v_bnc = (f(h).reshape(b, t * m, c) for f in (self.q, self.k, self.v))
        w_bnn = jax.nn.softmax(jnp.einsum("bnc,bmc->bnm", q_bnc, k_bnc) * c**-0.5, axis=-1)
        out = jnp.einsum("bnm,bmc->bnc", w_bnn, v_bnc).reshape(b, t, m, c)
        return x_btmc + self.proj_out(out)


class Downsample(nnx.Module):
    """``LTX2AudioDownsample``: causal zero pad, 3x3 stride-2 conv: ``[T, M] -> [ceil(T/2), M/2]``."""

    def __init__(self, channels: int, cfg: AudioVAEConfig, *, rngs: nnx.Rngs):
        self.pads = _DOWNSAMPLE_PADS[cfg.causality_axis]
        self.conv = Conv(channels, channels, (3, 3), stride=2, dtype=jnp.dtype(cfg.dtype), rngs=rngs)

    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        return self.conv(pad(x_btmc, self.pads))


class Upsample(nnx.Module):
    """``LTX2AudioUpsample``: nearest x2, causal 3x3 conv, then drop the first row (height) or
    column (width), so a causal stack maps ``T -> 2T - 1``."""

    def __init__(self, channels: int, cfg: AudioVAEConfig, *, rngs: nnx.Rngs):
        self.causality_axis = cfg.causality_axis
        self.conv = CausalConv2d(channels, channels, 3, cfg, rngs=rngs)

    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        x = self.conv(jnp.repeat(jnp.repeat(x_btmc, 2, axis=1), 2, axis=2))
        if self.causality_axis == "height":
            return x[:, 1:]
        if self.causality_axis == "width":
            return x[:, :, 1:]
        return x


class MidBlock(nnx.Module):
    """Res block, optional attention, res block (``encoder.mid`` / ``decoder.mid``)."""

    def __init__(self, cfg: AudioVAEConfig, channels: int, *, rngs: nnx.Rngs):
        self.block_1 = ResnetBlock(cfg, channels, channels, rngs=rngs)
        self.attn_1 = AttnBlock(cfg, channels, rngs=rngs) if cfg.mid_block_add_attention else None
        self.block_2 = ResnetBlock(cfg, channels, channels, rngs=rngs)

    @scopes.module_scope
    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        x = self.block_1(x_btmc)
        x = x if self.attn_1 is None else self.attn_1(x)
        return self.block_2(x)


class Level(nnx.Module):
    """One resolution level: ``block`` res blocks, each followed by ``attn`` when the level's
    resolution is in ``attn_resolutions``; the encoder/decoder adds its resampler."""

    def __init__(self, cfg: AudioVAEConfig, cin: int, cout: int, n: int, res: int, *, rngs: nnx.Rngs):
        self.block = nnx.List([ResnetBlock(cfg, cin if j == 0 else cout, cout, rngs=rngs) for j in range(n)])
        use_attn = bool(cfg.attn_resolutions) and res in (cfg.attn_resolutions or ())
        self.attn = nnx.List([AttnBlock(cfg, cout, rngs=rngs) for _ in range(n)] if use_attn else [])

    def blocks(self, x_btmc: jax.Array) -> jax.Array:
        for i, block in enumerate(self.block):
            x_btmc = block(x_btmc)
            if len(self.attn):
                x_btmc = self.attn[i](x_btmc)
        return x_btmc


class DownLevel(Level):
    def __init__(self, cfg: AudioVAEConfig, cin: int, cout: int, res: int, *, last: bool, rngs: nnx.Rngs):
        super().__init__(cfg, cin, cout, cfg.num_res_blocks, res, rngs=rngs)
        self.downsample = None if last else Downsample(cout, cfg, rngs=rngs)

    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        x = self.blocks(x_btmc)
        return x if self.downsample is None else self.downsample(x)


class UpLevel(Level):
    def __init__(self, cfg: AudioVAEConfig, cin: int, cout: int, res: int, *, first: bool, rngs: nnx.Rngs):
        super().__init__(cfg, cin, cout, cfg.num_res_blocks + 1, res, rngs=rngs)
        self.upsample = None if first else Upsample(cout, cfg, rngs=rngs)

    @scopes.module_scope
    def __call__(self, x_btmc: jax.Array) -> jax.Array:
        x = self.blocks(x_btmc)
        return x if self.upsample is None else self.upsample(x)


# ----------------------------------------------------------------------------- encoder / decoder


class AudioEncoder(nnx.Module):
    """``LTX2AudioEncoder``: mel ``[B, T, M, Cin]`` -> moments ``[B, (T-1)/4+1, M/4, 2*Cz]``
    (``Cz`` without ``double_z``)."""

    def __init__(self, cfg: AudioVAEConfig, *, rngs: nnx.Rngs):
        cfg.validate()
        self.sharding = cfg.sharding
        base, n = cfg.base_channels, len(cfg.ch_mult)
        self.conv_in = CausalConv2d(cfg.in_channels, base, 3, cfg, rngs=rngs)
        levels, cin = [], base
        for i, mult in enumerate(cfg.ch_mult):
            cout = base * mult
            levels.append(DownLevel(cfg, cin, cout, cfg.resolution // 2**i, last=i == n - 1, rngs=rngs))
            cin = cout
        self.down = nnx.List(levels)
        self.mid = MidBlock(cfg, cin, rngs=rngs)
        self.norm_out = _norm(cfg, cin)
        z_channels = 2 * cfg.latent_channels if cfg.double_z else cfg.latent_channels
        self.conv_out = CausalConv2d(cin, z_channels, 3, cfg, rngs=rngs)

    def __call__(self, mel_btmc: jax.Array) -> jax.Array:
        x = self.conv_in(mel_btmc)
        for level in self.down:
            x = constrain(level(x), _ACT, self.sharding)
        x = self.mid(x)
        return self.conv_out(silu(self.norm_out(x)))


class AudioDecoder(nnx.Module):
    """``LTX2AudioDecoder``: latents ``[B, A, M', Cz]`` -> mel ``[B, 4A-3, mel_bins, output_channels]``,
    cropped or zero-padded to exactly that size as diffusers does."""

    def __init__(self, cfg: AudioVAEConfig, *, rngs: nnx.Rngs):
        cfg.validate()
        self.sharding, self.mel_bins = cfg.sharding, cfg.mel_bins
        n = len(cfg.ch_mult)
        cin = cfg.base_channels * cfg.ch_mult[-1]
        self.conv_in = CausalConv2d(cfg.latent_channels, cin, 3, cfg, rngs=rngs)
        self.mid = MidBlock(cfg, cin, rngs=rngs)
        levels: list[UpLevel] = []
        for i in reversed(range(n)):
            cout = cfg.base_channels * cfg.ch_mult[i]
            levels.insert(0, UpLevel(cfg, cin, cout, cfg.resolution // 2**i, first=i == 0, rngs=rngs))
            cin = cout
        self.up = nnx.List(levels)  # indexed by level as in diffusers; runs deepest first
        self.norm_out = _norm(cfg, cin)
        self.conv_out = CausalConv2d(cin, cfg.output_channels, 3, cfg, rngs=rngs)
        scopes.label(self, scopes.DECODER_CHILDREN)

    @scopes.scoped(scopes.AUDIO_VAE)
    def __call__(self, z_btmc: jax.Array) -> jax.Array:
        frames, bins = z_btmc.shape[1], z_btmc.shape[2]
        x = self.mid(self.conv_in(z_btmc))
        for level in reversed(self.up):
            x = constrain(level(x), _ACT, self.sharding)
        x = self.conv_out(silu(self.norm_out(x)))
        # diffusers' top-level causality_axis is a string, never None, so the target is 4A-3 frames.
        target_t = max(frames * LATENT_DOWNSAMPLE_FACTOR - (LATENT_DOWNSAMPLE_FACTOR - 1), 1)
        target_m = self.mel_bins if self.mel_bins is not None else bins
        x = x[:, :target_t, :target_m]
        return pad(x, ((0, target_t - x.shape[1]), (0, target_m - x.shape[2])))


def _to_btmc(x: jax.Array) -> jax.Array:
    if x.ndim != 4:
        raise ValueError(f"expected a [B, C, T, M] array, got shape {x.shape}")
    return jnp.moveaxis(x, 1, -1)


class AutoencoderKLLTX2Audio(nnx.Module):
    """The LTX-2 audio VAE (diffusers ``AutoencoderKLLTX2Audio``).

    ``encode(mel [B, 2, T, M]) -> [B, Cz, (T-1)/4+1, M/4]`` (the posterior mode),
    ``decode(z [B, Cz, A, M/4]) -> mel [B, 2, 4A-3, M]``. ``latents_mean/latents_std``
    (``[base_channels]``) normalise packed latents ``[B, A, Cz*M/4]`` for the DiT.
    """

    def __init__(self, cfg: AudioVAEConfig, *, rngs: nnx.Rngs):
        if not isinstance(cfg, AudioVAEConfig):
            raise TypeError(f"AutoencoderKLLTX2Audio needs an AudioVAEConfig, got {type(cfg).__name__}")
        cfg.validate()
        self.cfg = cfg
        self.encoder = AudioEncoder(cfg, rngs=rngs)
        self.decoder = AudioDecoder(cfg, rngs=rngs)
        self.latents_mean = buffer(jnp.zeros((cfg.base_channels,), jnp.float32), (None,))
        self.latents_std = buffer(jnp.ones((cfg.base_channels,), jnp.float32), (None,))

    def encode_distribution(self, mel: jax.Array) -> tuple[jax.Array, jax.Array]:
        """mel ``[B, 2, T, M]`` -> posterior ``(mean, logvar)``, each ``[B, Cz, (T-1)/4+1, M/4]``;
        logvar clamped to [-30, 20] (diffusers ``DiagonalGaussianDistribution``)."""
        h = jnp.moveaxis(self.encoder(_to_btmc(mel).astype(jnp.dtype(self.cfg.dtype))), -1, 1)
        half = (h.shape[1] + 1) // 2  # torch.chunk(2, dim=1)
        return h[:, :half], jnp.clip(h[:, half:], -30.0, 20.0)

    def encode(self, mel: jax.Array) -> jax.Array:
        """mel ``[B, 2, T, M]`` -> posterior mode (its mean) ``[B, Cz, (T-1)/4+1, M/4]``."""
        return self.encode_distribution(mel)[0]

    def decode(self, z: jax.Array) -> jax.Array:
        """latents ``[B, Cz, A, M/4]`` -> mel ``[B, 2, 4A-3, M]``."""
        return jnp.moveaxis(self.decoder(_to_btmc(z).astype(jnp.dtype(self.cfg.dtype))), -1, 1)

    def __call__(self, mel: jax.Array) -> jax.Array:
        return self.decode(self.encode(mel))

    def _stats(self, packed: jax.Array) -> tuple[jax.Array, jax.Array]:
        if packed.shape[-1] != self.latents_mean.shape[0]:
            raise ValueError(
                f"packed latents have {packed.shape[-1]} features, latents_mean has {self.latents_mean.shape[0]}:"
                f" diffusers normalises packed latents per feature, so base_channels={self.cfg.base_channels}"
                f" must equal latent_channels*mel_bins/4={self.cfg.packed_latent_channels}"
            )
        return self.latents_mean[...].astype(packed.dtype), self.latents_std[...].astype(packed.dtype)

    def normalize_packed(self, packed: jax.Array) -> jax.Array:
        """``(x - mean) / std`` on packed latents ``[B, A, Cz*M/4]`` (``_normalize_audio_latents``)."""
        mean, std = self._stats(packed)
        return (packed - mean) / std

    def denormalize_packed(self, packed: jax.Array) -> jax.Array:
        """``x * std + mean`` on packed latents ``[B, A, Cz*M/4]`` (``_denormalize_audio_latents``)."""
        mean, std = self._stats(packed)
        return packed * std + mean


def pack_latents(z: jax.Array) -> jax.Array:
    """``[B, Cz, A, M'] -> [B, A, Cz*M']`` (pipeline ``_pack_audio_latents``, no patching)."""
    b, c, a, m = z.shape
    return jnp.transpose(z, (0, 2, 1, 3)).reshape(b, a, c * m)


def unpack_latents(packed: jax.Array, latent_mel_bins: int) -> jax.Array:
    """``[B, A, Cz*M'] -> [B, Cz, A, M']`` (pipeline ``_unpack_audio_latents``)."""
    b, a, d = packed.shape
    return jnp.transpose(packed.reshape(b, a, d // latent_mel_bins, latent_mel_bins), (0, 2, 1, 3))


__all__ = [
    "AudioVAEConfig",
    "AutoencoderKLLTX2Audio",
    "pack_latents",
    "unpack_latents",
]
