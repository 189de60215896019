"""Weights from diffusers / transformers modules into our JAX modules.

``from_diffusers(torch_module)`` dispatches on the module's class name to the component's
converter, which reads ``module.config`` and ``module.state_dict()`` through one key table.
"""

from __future__ import annotations

import importlib
from typing import Any

from ltx2.convert.keymap import Rule, ignore, linear, load_state_dict

# class name -> "module:function"; each converter takes the torch module and returns ours.
_CONVERTERS: dict[str, str] = {
    "LTX2VideoTransformer3DModel": "ltx2.convert.transformer:from_diffusers",
    "AutoencoderKLLTX2Video": "ltx2.convert.video_vae:from_diffusers",
    "AutoencoderKLLTX2Audio": "ltx2.convert.audio_vae:from_diffusers",
    "LTX2Vocoder": "ltx2.convert.vocoder:from_diffusers",
    "LTX2VocoderWithBWE": "ltx2.convert.vocoder:from_diffusers",
    "LTX2LatentUpsamplerModel": "ltx2.convert.upsampler:from_diffusers",
    "LTX2TextConnectors": "ltx2.convert.connectors:from_diffusers",
    "Gemma3TextModel": "ltx2.convert.gemma:from_transformers",
    "Gemma3ForCausalLM": "ltx2.convert.gemma:from_transformers",
    "Gemma3ForConditionalGeneration": "ltx2.convert.gemma:from_transformers",
    "FlowMatchEulerDiscreteScheduler": "ltx2.convert.scheduler:from_diffusers",
}


def from_diffusers(module: Any, **kwargs: Any) -> Any:
    """The JAX equivalent of a diffusers (or transformers Gemma-3) module, weights included."""
    name = type(module).__name__
    try:
        target = _CONVERTERS[name]
    except KeyError:
        raise TypeError(f"no converter for {name}; supported: {sorted(_CONVERTERS)}") from None
    module_name, fn = target.split(":")
    return getattr(importlib.import_module(module_name), fn)(module, **kwargs)


def load_pretrained(directory: Any, **kwargs: Any) -> Any:
    """The ``LTX2Pipeline`` saved in a diffusers-format directory (see :mod:`ltx2.convert.pipeline`)."""
    from ltx2.convert.pipeline import load_pretrained as load

    return load(directory, **kwargs)


__all__ = ["Rule", "from_diffusers", "ignore", "linear", "load_pretrained", "load_state_dict"]
