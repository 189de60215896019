"""diffusers ``LTX2LatentUpsamplerModel`` -> :class:`ltx2.vae.upsampler.LTX2LatentUpsamplerModel`.

Conv weights ``[O, I, *k]`` become ``[*k, I, O]``; GroupNorm ``weight`` becomes ``scale``; the
non-rational upsampler's ``Sequential`` index ``upsampler.0`` is our ``upsampler.conv``; the blur
buffer ``[1, 1, k, k]`` becomes ``[k, k]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flax import nnx

from ltx2.convert.audio_vae import conv, group_norm
from ltx2.convert.keymap import Rule, load_state_dict
from ltx2.vae.upsampler import LatentUpsamplerConfig, LTX2LatentUpsamplerModel


def blur_kernel(w: np.ndarray) -> np.ndarray:
    return w.reshape(w.shape[2:])


def _res_blocks(name: str) -> list[Rule]:
    p = f"{name}.{{i}}"
    return [*conv(f"{p}.conv1"), *group_norm(f"{p}.norm1"), *conv(f"{p}.conv2"), *group_norm(f"{p}.norm2")]


RULES: list[Rule] = [
    *conv("initial_conv"),
    *group_norm("initial_norm"),
    *_res_blocks("res_blocks"),
    *conv("upsampler.conv"),  # rational resampler
    Rule("upsampler.blur_down.kernel", "upsampler.blur_down.kernel", blur_kernel),
    *conv("upsampler.0", "upsampler.conv"),  # Sequential(ConvNd, PixelShuffleND)
    *_res_blocks("post_upsample_res_blocks"),
    *conv("final_conv"),
]


def load(cfg: LatentUpsamplerConfig, state_dict: Mapping[str, Any]) -> LTX2LatentUpsamplerModel:
    """Our upsampler for ``cfg`` with every parameter and buffer taken from ``state_dict``."""
    model = nnx.eval_shape(lambda: LTX2LatentUpsamplerModel(cfg, rngs=nnx.Rngs(0)))
    load_state_dict(model, state_dict, RULES)
    return model


def from_diffusers(module: Any, **overrides: Any) -> LTX2LatentUpsamplerModel:
    """Convert a diffusers ``LTX2LatentUpsamplerModel`` (config + weights); ``overrides`` set our
    extra config fields (``sharding``, ``dtype``)."""
    return load(LatentUpsamplerConfig.from_diffusers(module.config, **overrides), module.state_dict())
