"""diffusers ``AutoencoderKLLTX2Video`` -> :class:`ltx2.vae.video.VideoVAE`.

One table. Our module tree keeps diffusers' names except: torch conv ``weight [O, I, kd, kh, kw]``
becomes ``kernel [kd, kh, kw, I, O]`` (channels-last), ``norm3.weight`` becomes ``scale``,
``downsamplers.0`` / ``upsamplers.0`` (one-element ModuleLists) become ``downsampler`` /
``upsampler``, ``time_embedder.timestep_embedder.linear_*`` drops the inner level, and the
``per_channel_scale* [C, 1, 1]`` noise scales become ``[C]``. Keys that only exist for some
configs (``norm3``/``conv_shortcut`` when a resnet changes width, noise scales, timestep
conditioning) have rules too; loading fails on any key without one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flax import nnx

from ltx2.convert.keymap import Rule, linear, load_state_dict
from ltx2.vae.conv import kernel_from_torch
from ltx2.vae.video import VideoVAE, VideoVAEConfig


def _flat(w: np.ndarray) -> np.ndarray:
    """``per_channel_scale [C, 1, 1]`` -> ``[C]``."""
    return w.reshape(-1)


def conv(source: str, target: str) -> list[Rule]:
    """A torch ``nn.Conv3d`` (weight + bias) into :class:`ltx2.vae.conv.Conv`."""
    return [Rule(f"{source}.weight", f"{target}.kernel", kernel_from_torch), Rule(f"{source}.bias", f"{target}.bias")]


def causal_conv(source: str, target: str) -> list[Rule]:
    """``LTX2VideoCausalConv3d`` (its ``nn.Conv3d`` is ``.conv``) into :class:`CausalConv3d`."""
    return conv(f"{source}.conv", f"{target}.conv")


def time_embedder(source: str, target: str) -> list[Rule]:
    inner = f"{source}.timestep_embedder"
    return [*linear(f"{inner}.linear_1", f"{target}.linear_1"), *linear(f"{inner}.linear_2", f"{target}.linear_2")]


def resnet(source: str, target: str) -> list[Rule]:
    return [
        *causal_conv(f"{source}.conv1", f"{target}.conv1"),
        *causal_conv(f"{source}.conv2", f"{target}.conv2"),
        Rule(f"{source}.norm3.weight", f"{target}.norm3.scale"),
        Rule(f"{source}.norm3.bias", f"{target}.norm3.bias"),
        *conv(f"{source}.conv_shortcut", f"{target}.conv_shortcut"),
        Rule(f"{source}.per_channel_scale1", f"{target}.per_channel_scale1", _flat),
        Rule(f"{source}.per_channel_scale2", f"{target}.per_channel_scale2", _flat),
        Rule(f"{source}.scale_shift_table", f"{target}.scale_shift_table"),
    ]


_ENC, _DEC = "encoder", "decoder"
_DOWN, _UP = "encoder.down_blocks.{i}", "decoder.up_blocks.{i}"

RULES: list[Rule] = [
    Rule("latents_mean", "latents_mean"),
    Rule("latents_std", "latents_std"),
    # encoder
    *causal_conv(f"{_ENC}.conv_in", f"{_ENC}.conv_in"),
    *resnet(f"{_DOWN}.resnets.{{j}}", f"{_DOWN}.resnets.{{j}}"),
    *causal_conv(f"{_DOWN}.downsamplers.0", f"{_DOWN}.downsampler"),  # downsample_type="conv"
    *causal_conv(f"{_DOWN}.downsamplers.0.conv", f"{_DOWN}.downsampler.conv"),  # LTX2VideoDownsampler3d
    *resnet(f"{_ENC}.mid_block.resnets.{{j}}", f"{_ENC}.mid_block.resnets.{{j}}"),
    *causal_conv(f"{_ENC}.conv_out", f"{_ENC}.conv_out"),
    # decoder
    *causal_conv(f"{_DEC}.conv_in", f"{_DEC}.conv_in"),
    *time_embedder(f"{_DEC}.mid_block.time_embedder", f"{_DEC}.mid_block.time_embedder"),
    *resnet(f"{_DEC}.mid_block.resnets.{{j}}", f"{_DEC}.mid_block.resnets.{{j}}"),
    *time_embedder(f"{_UP}.time_embedder", f"{_UP}.time_embedder"),
    *resnet(f"{_UP}.conv_in", f"{_UP}.conv_in"),
    *causal_conv(f"{_UP}.upsamplers.0.conv", f"{_UP}.upsampler.conv"),
    *resnet(f"{_UP}.resnets.{{j}}", f"{_UP}.resnets.{{j}}"),
    *causal_conv(f"{_DEC}.conv_out", f"{_DEC}.conv_out"),
    *time_embedder(f"{_DEC}.time_embedder", f"{_DEC}.time_embedder"),
    Rule(f"{_DEC}.scale_shift_table", f"{_DEC}.scale_shift_table"),
    Rule(f"{_DEC}.timestep_scale_multiplier", f"{_DEC}.timestep_scale_multiplier"),
]


def load(cfg: VideoVAEConfig, state_dict: Mapping[str, Any]) -> VideoVAE:
    """Our video VAE for ``cfg`` with every parameter and buffer taken from ``state_dict``
    (built abstractly first, so full-size models never pay for a random init)."""
    model = nnx.eval_shape(lambda: VideoVAE(cfg, rngs=nnx.Rngs(0)))
    load_state_dict(model, state_dict, RULES)
    return model


def from_diffusers(module: Any, **overrides: Any) -> VideoVAE:
    """Convert a diffusers ``AutoencoderKLLTX2Video`` (config + weights); ``overrides`` set our
    extra config fields (``sharding``, ``dtype``)."""
    cfg = VideoVAEConfig.from_diffusers(module.config, **overrides)
    return load(cfg, module.state_dict())
