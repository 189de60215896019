"""LTX-2 video VAE configuration (diffusers ``AutoencoderKLLTX2Video`` config) and the block plans it implies.

:class:`VideoVAEConfig` carries diffusers' field names and defaults; :func:`encoder_plan` and
:func:`decoder_plan` derive each block's channels as diffusers' ``__init__`` builds them, and
reject a config whose channel flow diffusers would build but not run. The modules are in
:mod:`ltx2.vae.video`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from ltx2.vae.conv import PADDING_MODES

DOWN_STRIDES = {"spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2), "conv": (2, 2, 2)}
UP_STRIDES = {"spatial": (1, 2, 2), "temporal": (2, 1, 1), "spatiotemporal": (2, 2, 2)}
# Fields diffusers accepts as one bool for every block; the int is the length offset from
# the block count (decoder_inject_noise also covers the mid block).
_BOOL_OR_TUPLE = {
    "spatio_temporal_scaling": ("block_out_channels", 0),
    "decoder_spatio_temporal_scaling": ("decoder_block_out_channels", 0),
    "decoder_inject_noise": ("decoder_block_out_channels", 1),
    "upsample_residual": ("decoder_block_out_channels", 0),
}


@dataclass(frozen=True)
class VideoVAEConfig:
    """Field names and defaults equal diffusers' ``AutoencoderKLLTX2Video`` config; ``sharding``
    (a strategy in ``ltx2.sharding``) and ``dtype`` (parameters and compute) are ours."""

    in_channels: int = 3
    out_channels: int = 3
    latent_channels: int = 128
    block_out_channels: tuple[int, ...] = (256, 512, 1024, 2048)
    down_block_types: tuple[str, ...] = ("LTX2VideoDownBlock3D",) * 4
    decoder_block_out_channels: tuple[int, ...] = (256, 512, 1024)
    layers_per_block: tuple[int, ...] = (4, 6, 6, 2, 2)
    decoder_layers_per_block: tuple[int, ...] = (5, 5, 5, 5)
    spatio_temporal_scaling: tuple[bool, ...] = (True, True, True, True)
    decoder_spatio_temporal_scaling: tuple[bool, ...] = (True, True, True)
    decoder_inject_noise: tuple[bool, ...] = (False, False, False, False)
    downsample_type: tuple[str, ...] = ("spatial", "temporal", "spatiotemporal", "spatiotemporal")
    upsample_type: tuple[str, ...] = ("spatiotemporal",) * 3
    upsample_residual: tuple[bool, ...] = (True, True, True)
    upsample_factor: tuple[int, ...] = (2, 2, 2)
    timestep_conditioning: bool = False
    patch_size: int = 4
    patch_size_t: int = 1
    resnet_norm_eps: float = 1e-6
    scaling_factor: float = 1.0
    encoder_causal: bool = True
    decoder_causal: bool = True
    encoder_spatial_padding_mode: str = "zeros"
    decoder_spatial_padding_mode: str = "reflect"
    spatial_compression_ratio: int | None = None
    temporal_compression_ratio: int | None = None
    sharding: str = "replicated"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        for f in fields(self):  # lists (diffusers' JSON configs) -> hashable tuples
            if isinstance(getattr(self, f.name), list):
                object.__setattr__(self, f.name, tuple(getattr(self, f.name)))
        for name, (ref, extra) in _BOOL_OR_TUPLE.items():
            if isinstance(getattr(self, name), bool):
                object.__setattr__(self, name, (getattr(self, name),) * (len(getattr(self, ref)) + extra))
        self.validate()

    @classmethod
    def tiny(cls) -> VideoVAEConfig:
        """Released 4-block / 32x8 layout at 8-32 channels (reference notes §6)."""
        return cls(
            latent_channels=8,
            block_out_channels=(8, 16, 32, 32),
            decoder_block_out_channels=(8, 16, 32),
            layers_per_block=(1, 1, 1, 1, 1),
            decoder_layers_per_block=(1, 1, 1, 1),
            decoder_causal=False,
            spatial_compression_ratio=32,
            temporal_compression_ratio=8,
        )

    @classmethod
    def small(cls) -> VideoVAEConfig:
        """CPU-benchmark size: released layout, 32-128 channels, 2 resnets per block."""
        return cls(
            latent_channels=32,
            block_out_channels=(32, 64, 128, 128),
            decoder_block_out_channels=(32, 64, 128),
            layers_per_block=(2, 2, 2, 1, 1),
            decoder_layers_per_block=(2, 2, 2, 2),
            decoder_causal=False,
            spatial_compression_ratio=32,
            temporal_compression_ratio=8,
        )

    @classmethod
    def ltx2_19b(cls) -> VideoVAEConfig:
        """LTX-2.0 (``convert_ltx2_to_diffusers.py``): class defaults except these three."""
        return cls(decoder_causal=False, spatial_compression_ratio=32, temporal_compression_ratio=8)

    @classmethod
    def from_diffusers(cls, config: Any, **overrides: Any) -> VideoVAEConfig:
        """From a diffusers config mapping (``module.config``); ``_``-prefixed keys are metadata."""
        known = {f.name for f in fields(cls)}
        items = {k: v for k, v in dict(config).items() if not k.startswith("_")}
        unknown = sorted(set(items) - known)
        if unknown:
            raise ValueError(f"diffusers video VAE config has fields we do not know: {unknown}")
        return cls(**{**items, **overrides})

    @property
    def spatial_compression(self) -> int:
        """Pixels per latent cell along H/W (diffusers' ``spatial_compression_ratio`` attribute)."""
        if self.spatial_compression_ratio is not None:
            return self.spatial_compression_ratio
        return self.patch_size * 2 ** sum(self.spatio_temporal_scaling)

    @property
    def temporal_compression(self) -> int:
        if self.temporal_compression_ratio is not None:
            return self.temporal_compression_ratio
        return self.patch_size_t * 2 ** sum(self.spatio_temporal_scaling)

    def latent_shape(self, num_frames: int, height: int, width: int) -> tuple[int, int, int, int]:
        """``(C, F, H, W)`` of the latent of a ``num_frames x height x width`` video."""
        s, t = self.spatial_compression, self.temporal_compression
        return (self.latent_channels, (num_frames - 1) // t + 1, height // s, width // s)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for anything diffusers would build wrong or not run."""
        _check_config(self)


def _fail(field: str, value: Any, why: str) -> NoReturn:
    raise ValueError(f"VideoVAEConfig.{field}={value!r}: {why}")


def _check_config(c: VideoVAEConfig) -> None:
    n, nd = len(c.block_out_channels), len(c.decoder_block_out_channels)
    lengths = {
        "down_block_types": n,
        "spatio_temporal_scaling": n,
        "downsample_type": n,
        "layers_per_block": n + 1,
        "decoder_spatio_temporal_scaling": nd,
        "upsample_type": nd,
        "upsample_residual": nd,
        "upsample_factor": nd,
        "decoder_layers_per_block": nd + 1,
        "decoder_inject_noise": nd + 1,
    }
    for name, want in lengths.items():
        if len(getattr(c, name)) != want:
            _fail(name, getattr(c, name), f"needs {want} entries to match the block channel tuples")
    for name in ("in_channels", "out_channels", "latent_channels", "patch_size", "patch_size_t"):
        if getattr(c, name) <= 0:
            _fail(name, getattr(c, name), "must be positive")
    for name in ("block_out_channels", "decoder_block_out_channels", "upsample_factor"):
        if any(v <= 0 for v in getattr(c, name)):
            _fail(name, getattr(c, name), "entries must be positive")
    if any(v < 0 for v in c.layers_per_block + c.decoder_layers_per_block):
        _fail("layers_per_block", (c.layers_per_block, c.decoder_layers_per_block), "counts must be >= 0")
    if c.patch_size_t != 1:
        _fail(
            "patch_size_t",
            c.patch_size_t,
            "diffusers' encoder conv_in assumes 1 (in_channels * patch_size**2)",
        )
    if c.resnet_norm_eps <= 0:
        _fail("resnet_norm_eps", c.resnet_norm_eps, "must be positive")
    if any(t != "LTX2VideoDownBlock3D" for t in c.down_block_types):
        _fail("down_block_types", c.down_block_types, "only 'LTX2VideoDownBlock3D' exists")
    if any(t not in DOWN_STRIDES for t in c.downsample_type):
        _fail("downsample_type", c.downsample_type, f"entries must be in {sorted(DOWN_STRIDES)}")
    if any(t not in UP_STRIDES for t in c.upsample_type):
        _fail("upsample_type", c.upsample_type, f"entries must be in {sorted(UP_STRIDES)}")
    for name in ("encoder_spatial_padding_mode", "decoder_spatial_padding_mode"):
        if getattr(c, name) not in PADDING_MODES:
            _fail(name, getattr(c, name), f"must be one of {sorted(PADDING_MODES)}")
    if c.dtype not in ("float32", "bfloat16", "float16"):
        _fail("dtype", c.dtype, "must be float32, bfloat16 or float16")
    encoder_plan(c)
    decoder_plan(c)


@dataclass(frozen=True)
class DownPlan:
    channels: int  # resnet width (the block's input channels)
    out: int  # channels after the downsampler
    num_layers: int
    downsample: str | None


@dataclass(frozen=True)
class UpPlan:
    channels_in: int  # diffusers' up-block in_channels (only differs from out with a conv_in resnet)
    out: int
    num_layers: int
    upsample: str | None
    residual: bool
    factor: int
    inject_noise: bool


def encoder_plan(c: VideoVAEConfig) -> list[DownPlan]:
    """Per-block channels exactly as ``LTX2VideoEncoder3d.__init__`` builds them, checked for a
    consistent channel flow (diffusers would build an inconsistent one and fail in forward)."""
    plan, ch = [], c.latent_channels
    for i, out in enumerate(c.block_out_channels):
        kind = c.downsample_type[i] if c.spatio_temporal_scaling[i] else None
        if kind in (None, "conv"):
            if ch != out:
                _fail(
                    "block_out_channels",
                    c.block_out_channels,
                    f"block {i} ({kind or 'no'} downsampling) keeps {ch} channels but declares {out}",
                )
        else:
            vol = math.prod(DOWN_STRIDES[kind])
            group = ch * vol // out
            if out % vol or group == 0 or (ch * vol) % group or ch * vol // group != out:
                _fail(
                    "block_out_channels",
                    c.block_out_channels,
                    f"block {i}: {kind} downsampling cannot take {ch} channels to {out}",
                )
        plan.append(DownPlan(ch, out, c.layers_per_block[i], kind))
        ch = out
    return plan


def decoder_plan(c: VideoVAEConfig) -> list[UpPlan]:
    """Per-block channels as ``LTX2VideoDecoder3d.__init__`` builds them (tuples reversed, except
    ``upsample_type``, which diffusers indexes unreversed), checked for a consistent flow."""
    rev = lambda t: tuple(reversed(t))  # noqa: E731
    chans, scale, layers = (
        rev(c.decoder_block_out_channels),
        rev(c.decoder_spatio_temporal_scaling),
        rev(c.decoder_layers_per_block),
    )
    noise, residual, factor = rev(c.decoder_inject_noise), rev(c.upsample_residual), rev(c.upsample_factor)
    plan, declared, ch = [], chans[0], chans[0]
    for i in range(len(chans)):
        cin, out = declared // factor[i], chans[i] // factor[i]
        where = f"up block {i} (reversed order)"
        if cin != out:
            if ch != cin:
                _fail(
                    "decoder_block_out_channels",
                    c.decoder_block_out_channels,
                    f"{where} gets {ch} channels, its conv_in resnet expects {cin}",
                )
            if c.timestep_conditioning or noise[i + 1]:
                _fail(
                    "timestep_conditioning" if c.timestep_conditioning else "decoder_inject_noise",
                    True,
                    f"{where} has a conv_in resnet ({cin}->{out}), which diffusers cannot condition",
                )
            ch = out
        kind = c.upsample_type[i] if scale[i] else None
        if kind is not None:
            vol = math.prod(UP_STRIDES[kind])
            if ch != out * factor[i] or (residual[i] and ((out * factor[i]) % vol or vol % factor[i])):
                _fail(
                    "upsample_factor",
                    c.upsample_factor,
                    f"{where}: {kind} x{factor[i]} upsampler cannot take {ch} channels to {out}",
                )
            ch = out
        if ch != out:
            _fail("decoder_block_out_channels", c.decoder_block_out_channels, f"{where} gets {ch}, needs {out}")
        plan.append(UpPlan(cin, out, layers[i + 1], kind, residual[i], factor[i], noise[i + 1]))
        declared = out
    return plan
