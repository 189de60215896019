"""LTX-2 vocoder configurations (diffusers ``LTX2Vocoder`` / ``LTX2VocoderWithBWE`` configs) and their checks.

:class:`VocoderConfig` is the HiFi-GAN / BigVGAN generator of LTX-2.0; :class:`VocoderWithBWEConfig`
is LTX-2.3's generator plus bandwidth extender (two generator configs, ``bwe_`` prefixed, and the
STFT between them). The modules are in :mod:`ltx2.vae.vocoder`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ltx2.vae.conv import check_common, config_fail, config_from_mapping

ACT_FNS = ("leaky_relu", "snake", "snakebeta")
FINAL_ACT_FNS = ("tanh", "clamp", None)


@dataclass(frozen=True)
class VocoderConfig:
    """diffusers ``LTX2Vocoder`` config (same field names and defaults); ``sharding`` and
    ``dtype`` are ours. ``output_sampling_rate`` is metadata for the pipeline."""

    in_channels: int = 128
    hidden_channels: int = 1024
    out_channels: int = 2
    upsample_kernel_sizes: tuple[int, ...] = (16, 15, 8, 4, 4)
    upsample_factors: tuple[int, ...] = (6, 5, 2, 2, 2)
    resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    act_fn: str = "leaky_relu"
    leaky_relu_negative_slope: float = 0.1
    antialias: bool = False
    antialias_ratio: int = 2
    antialias_kernel_size: int = 12
    final_act_fn: str | None = "tanh"
    final_bias: bool = True
    output_sampling_rate: int = 24000
    sharding: str = "replicated"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def tiny(cls) -> VocoderConfig:
        """Verified tiny config: mel ``[B, 2, T, 16]`` -> ``[B, 2, 240 T]`` at 2.0's strides."""
        return cls(in_channels=32, hidden_channels=64, resnet_kernel_sizes=(3,), resnet_dilations=((1, 3, 5),))

    @classmethod
    def ltx2_19b(cls) -> VocoderConfig:
        """LTX-2.0 release (= class defaults)."""
        return cls()

    @classmethod
    def from_diffusers(cls, config: Mapping[str, Any], **overrides: Any) -> VocoderConfig:
        return config_from_mapping(cls, config, overrides)

    @property
    def upsample_factor(self) -> int:
        """Waveform samples per mel frame, ``prod(upsample_factors)``."""
        return math.prod(self.upsample_factors)

    @property
    def final_channels(self) -> int:
        return self.hidden_channels // 2 ** len(self.upsample_factors)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the field for anything diffusers would not build or run."""
        check_generator(self, "")
        check_common(self)


def check_generator(cfg: Any, prefix: str) -> None:
    """Validate the generator fields ``prefix + name`` of ``cfg`` (``"bwe_"`` for the extender)."""

    def get(name: str) -> Any:
        return getattr(cfg, prefix + name)

    def fail(name: str, why: str) -> None:
        config_fail(cfg, prefix + name, why)

    for f in ("in_channels", "hidden_channels", "out_channels", "antialias_ratio", "antialias_kernel_size"):
        if get(f) <= 0:
            fail(f, "must be positive")
    factors, kernels = get("upsample_factors"), get("upsample_kernel_sizes")
    if not factors or len(kernels) != len(factors):
        fail("upsample_kernel_sizes", f"needs one entry per upsample factor ({len(factors)})")
    if min(factors) <= 0 or any(k < s for k, s in zip(kernels, factors, strict=True)):
        fail("upsample_factors", "must be positive and at most the matching kernel size")
    if get("hidden_channels") < 2 ** len(factors):
        # Each stage keeps channels // 2, as diffusers; from 0 channels its conv cannot run.
        fail("hidden_channels", f"must keep >= 1 channel through {len(factors)} halvings (>= {2 ** len(factors)})")
    if not get("resnet_kernel_sizes") or len(get("resnet_dilations")) != len(get("resnet_kernel_sizes")):
        fail("resnet_dilations", "needs one dilation tuple per resnet kernel size")
    if get("act_fn") not in ACT_FNS:
        fail("act_fn", f"must be one of {ACT_FNS}")
    if get("act_fn") == "leaky_relu" and get("antialias"):
        # diffusers then nests AntiAliasAct1d twice in acts2 (a loop-variable quirk); no release uses it.
        fail("antialias", "is not supported with act_fn='leaky_relu'")
    if get("final_act_fn") not in FINAL_ACT_FNS:
        fail("final_act_fn", f"must be one of {FINAL_ACT_FNS}")


# The generator fields both halves share; the extender's carry a ``bwe_`` prefix.
_GENERATOR_FIELDS = tuple(
    f.name for f in dataclasses.fields(VocoderConfig) if f.name not in ("output_sampling_rate", "sharding", "dtype")
)


@dataclass(frozen=True)
class VocoderWithBWEConfig:
    """diffusers ``LTX2VocoderWithBWE`` config (same names and defaults = LTX-2.3); ``sharding`` and
    ``dtype`` are ours. The stage-1 generator takes the plain fields, the bandwidth extender the
    ``bwe_*`` ones; ``filter_length/hop_length/window_length/num_mel_channels`` set the causal log-mel
    STFT between them, and ``output_sampling_rate // input_sampling_rate`` the Hann-sinc resampler."""

    in_channels: int = 128
    hidden_channels: int = 1536
    out_channels: int = 2
    upsample_kernel_sizes: tuple[int, ...] = (11, 4, 4, 4, 4, 4)
    upsample_factors: tuple[int, ...] = (5, 2, 2, 2, 2, 2)
    resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    act_fn: str = "snakebeta"
    leaky_relu_negative_slope: float = 0.1
    antialias: bool = True
    antialias_ratio: int = 2
    antialias_kernel_size: int = 12
    final_act_fn: str | None = None
    final_bias: bool = False
    bwe_in_channels: int = 128
    bwe_hidden_channels: int = 512
    bwe_out_channels: int = 2
    bwe_upsample_kernel_sizes: tuple[int, ...] = (12, 11, 4, 4, 4)
    bwe_upsample_factors: tuple[int, ...] = (6, 5, 2, 2, 2)
    bwe_resnet_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    bwe_resnet_dilations: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    bwe_act_fn: str = "snakebeta"
    bwe_leaky_relu_negative_slope: float = 0.1
    bwe_antialias: bool = True
    bwe_antialias_ratio: int = 2
    bwe_antialias_kernel_size: int = 12
    bwe_final_act_fn: str | None = None
    bwe_final_bias: bool = False
    filter_length: int = 512
    hop_length: int = 80
    window_length: int = 512
    num_mel_channels: int = 64
    input_sampling_rate: int = 16000
    output_sampling_rate: int = 48000
    sharding: str = "replicated"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def tiny(cls) -> VocoderWithBWEConfig:
        """LTX-2.3 strides at 2-128 channels, 2 dilations, a 128-tap STFT, 16 mel bins: ``[B,2,T,16] -> [B,2,480T]``."""
        return cls(
            in_channels=32,
            hidden_channels=128,
            resnet_kernel_sizes=(3,),
            resnet_dilations=((1, 3),),
            bwe_in_channels=32,
            bwe_hidden_channels=64,
            bwe_resnet_kernel_sizes=(3,),
            bwe_resnet_dilations=((1, 3),),
            filter_length=128,
            window_length=128,
            num_mel_channels=16,
        )

    @classmethod
    def ltx2_3_22b(cls) -> VocoderWithBWEConfig:
        """LTX-2.3 release (= class defaults)."""
        return cls()

    @classmethod
    def from_diffusers(cls, config: Mapping[str, Any], **overrides: Any) -> VocoderWithBWEConfig:
        return config_from_mapping(cls, config, overrides)

    def vocoder(self) -> VocoderConfig:
        return VocoderConfig(
            **{f: getattr(self, f) for f in _GENERATOR_FIELDS},
            output_sampling_rate=self.input_sampling_rate,
            sharding=self.sharding,
            dtype=self.dtype,
        )

    def bwe(self) -> VocoderConfig:
        return VocoderConfig(
            **{f: getattr(self, f"bwe_{f}") for f in _GENERATOR_FIELDS},
            output_sampling_rate=self.output_sampling_rate,
            sharding=self.sharding,
            dtype=self.dtype,
        )

    @property
    def resample_ratio(self) -> int:
        return self.output_sampling_rate // self.input_sampling_rate

    def validate(self) -> None:
        """Both generators' configs, plus the STFT and resampler settings."""
        for f in ("filter_length", "hop_length", "window_length", "num_mel_channels", "input_sampling_rate"):
            if getattr(self, f) <= 0:
                config_fail(self, f, "must be positive")
        if self.output_sampling_rate % self.input_sampling_rate or self.resample_ratio < 1:
            config_fail(
                self, "output_sampling_rate", f"must be a multiple of input_sampling_rate={self.input_sampling_rate}"
            )
        if self.bwe_in_channels != self.out_channels * self.num_mel_channels:
            config_fail(
                self,
                "bwe_in_channels",
                f"must be out_channels*num_mel_channels = {self.out_channels * self.num_mel_channels}",
            )
        check_generator(self, "")
        check_generator(self, "bwe_")
        if math.prod(self.bwe_upsample_factors) != self.hop_length * self.resample_ratio:
            config_fail(self, "bwe_upsample_factors", "must multiply to hop_length * output/input sampling rate")
        check_common(self)
