"""diffusers ``AutoencoderKLLTX2Audio`` -> :class:`ltx2.vae.audio.AutoencoderKLLTX2Audio`.

Names are kept; torch conv weights ``[O, I, kh, kw]`` become Flax kernels ``[kh, kw, I, O]`` and
norm ``weight`` becomes ``scale``. Every diffusers key has exactly one rule below (GroupNorm and
attention keys only occur with ``norm_type="group"`` / attention enabled).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flax import nnx

from ltx2.convert.keymap import Rule, load_state_dict
from ltx2.vae.audio import AudioVAEConfig, AutoencoderKLLTX2Audio
from ltx2.vae.conv import kernel_from_torch


def conv(source: str, target: str | None = None, *, bias: bool = True) -> list[Rule]:
    """Rules for a torch ``nn.Conv{1,2,3}d`` at ``source`` loaded into :class:`ltx2.vae.conv.Conv`."""
    target = source if target is None else target
    rules = [Rule(f"{source}.weight", f"{target}.kernel", kernel_from_torch)]
    return rules + ([Rule(f"{source}.bias", f"{target}.bias")] if bias else [])


def group_norm(source: str, target: str | None = None) -> list[Rule]:
    target = source if target is None else target
    return [Rule(f"{source}.weight", f"{target}.scale"), Rule(f"{source}.bias", f"{target}.bias")]


def _resnet(prefix: str) -> list[Rule]:
    return [
        *group_norm(f"{prefix}.norm1"),
        *conv(f"{prefix}.conv1.conv"),
        *group_norm(f"{prefix}.norm2"),
        *conv(f"{prefix}.conv2.conv"),
        *conv(f"{prefix}.nin_shortcut.conv"),
    ]


def _attn(prefix: str) -> list[Rule]:
    return [*group_norm(f"{prefix}.norm"), *(r for n in ("q", "k", "v", "proj_out") for r in conv(f"{prefix}.{n}"))]


def _coder(side: str, stage: str, resample: str) -> list[Rule]:
    return [
        *conv(f"{side}.conv_in.conv"),
        *_resnet(f"{side}.{stage}.{{i}}.block.{{j}}"),
        *_attn(f"{side}.{stage}.{{i}}.attn.{{j}}"),
        *conv(f"{side}.{stage}.{{i}}.{resample}"),
        *_resnet(f"{side}.mid.block_{{m}}"),
        *_attn(f"{side}.mid.attn_1"),
        *group_norm(f"{side}.norm_out"),
        *conv(f"{side}.conv_out.conv"),
    ]


RULES: list[Rule] = [
    Rule("latents_mean", "latents_mean"),
    Rule("latents_std", "latents_std"),
    *_coder("encoder", "down", "downsample.conv"),
    *_coder("decoder", "up", "upsample.conv.conv"),
]


def load(cfg: AudioVAEConfig, state_dict: Mapping[str, Any]) -> AutoencoderKLLTX2Audio:
    """Our audio VAE for ``cfg`` with every parameter and buffer taken from ``state_dict``."""
    model = nnx.eval_shape(lambda: AutoencoderKLLTX2Audio(cfg, rngs=nnx.Rngs(0)))
    load_state_dict(model, state_dict, RULES)
    return model


def from_diffusers(module: Any, **overrides: Any) -> AutoencoderKLLTX2Audio:
    """Convert a diffusers ``AutoencoderKLLTX2Audio`` (config + weights); ``overrides`` set our
    extra config fields (e.g. ``sharding``)."""
    return load(AudioVAEConfig.from_diffusers(module.config, **overrides), module.state_dict())
