"""diffusers ``LTX2Vocoder`` / ``LTX2VocoderWithBWE`` -> :mod:`ltx2.vae.vocoder`.

One table for both classes: the BWE model nests two generators under ``vocoder.`` and
``bwe_generator.``. Conv weights ``[O, I, k]`` become ``[k, I, O]``, ConvTranspose weights
``[I, O, k]`` become ``[k, I, O]``, fixed filter buffers ``[1, 1, K]`` become ``[K]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flax import nnx

from ltx2.convert.audio_vae import conv
from ltx2.convert.keymap import Rule, ignore, load_state_dict
from ltx2.vae.conv import kernel_from_torch
from ltx2.vae.vocoder import LTX2Vocoder, LTX2VocoderWithBWE, VocoderConfig, VocoderWithBWEConfig


def transposed_kernel(w: np.ndarray) -> np.ndarray:
    """torch ``ConvTranspose1d.weight`` ``[I, O, k]`` -> ``[k, I, O]``."""
    return np.moveaxis(w, -1, 0)


def taps(w: np.ndarray) -> np.ndarray:
    """A depthwise filter buffer ``[1, 1, K]`` -> ``[K]``."""
    return w.reshape(w.shape[2:])


def _activation(prefix: str) -> list[Rule]:
    """SnakeBeta params, bare or inside an ``AntiAliasAct1d`` (with its two filter buffers)."""
    return [
        Rule(f"{prefix}.alpha", f"{prefix}.alpha"),
        Rule(f"{prefix}.beta", f"{prefix}.beta"),
        Rule(f"{prefix}.act.alpha", f"{prefix}.act.alpha"),
        Rule(f"{prefix}.act.beta", f"{prefix}.act.beta"),
        Rule(f"{prefix}.upsample.filter", f"{prefix}.upsample.filter", taps),
        Rule(f"{prefix}.downsample.filter", f"{prefix}.downsample.filter", taps),
    ]


def _generator(p: str) -> list[Rule]:
    return [
        *conv(f"{p}conv_in", f"{p}conv_in.conv"),
        Rule(f"{p}upsamplers.{{i}}.weight", f"{p}upsamplers.{{i}}.kernel", transposed_kernel),
        Rule(f"{p}upsamplers.{{i}}.bias", f"{p}upsamplers.{{i}}.bias"),
        *conv(f"{p}resnets.{{i}}.convs{{c}}.{{m}}", f"{p}resnets.{{i}}.convs{{c}}.{{m}}.conv"),
        *_activation(f"{p}resnets.{{i}}.acts{{c}}.{{m}}"),
        *_activation(f"{p}act_out"),
        *conv(f"{p}conv_out", f"{p}conv_out.conv"),
    ]


RULES: list[Rule] = [
    *_generator(""),
    *_generator("vocoder."),
    *_generator("bwe_generator."),
    Rule("mel_stft.mel_basis", "mel_stft.mel_basis"),
    Rule("mel_stft.stft_fn.forward_basis", "mel_stft.stft_fn.forward_basis", kernel_from_torch),
    # The inverse STFT basis is only for resynthesis, which the forward pass never runs.
    *ignore("mel_stft.stft_fn.inverse_basis"),
]


def load(cfg: VocoderConfig | VocoderWithBWEConfig, state_dict: Mapping[str, Any]) -> LTX2Vocoder | LTX2VocoderWithBWE:
    """Our vocoder for ``cfg`` (its class follows the config's) with every parameter and buffer
    taken from ``state_dict``."""
    cls: Any = LTX2VocoderWithBWE if isinstance(cfg, VocoderWithBWEConfig) else LTX2Vocoder
    model = nnx.eval_shape(lambda: cls(cfg, rngs=nnx.Rngs(0)))
    load_state_dict(model, state_dict, RULES)
    return model


def from_diffusers(module: Any, **overrides: Any) -> LTX2Vocoder | LTX2VocoderWithBWE:
    """Convert a diffusers ``LTX2Vocoder`` or ``LTX2VocoderWithBWE`` (config + weights);
    ``overrides`` set our extra config fields (``sharding``, ``dtype``)."""
    name = type(module).__name__
    configs: dict[str, Any] = {"LTX2Vocoder": VocoderConfig, "LTX2VocoderWithBWE": VocoderWithBWEConfig}
    if name not in configs:
        raise TypeError(f"ltx2.convert.vocoder converts {sorted(configs)}, not {name}")
    return load(configs[name].from_diffusers(module.config, **overrides), module.state_dict())
