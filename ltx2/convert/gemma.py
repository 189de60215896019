"""transformers Gemma-3 -> :class:`ltx2.text.gemma.GemmaTextEncoder`.

The encoder runs the transformers text model itself (through torchax or on the host), so no
weight is renamed; conversion picks the language model out of its wrapper and checks every
state-dict key against one table: each key is a Gemma-3 text-model weight under the wrapper's
language-model prefix, or a part we ignore on purpose (LM head, vision tower, projector).
Anything else is an error naming the key.
"""

from __future__ import annotations

import re
from typing import Any

from ltx2.text.gemma import GemmaTextEncoder, TextEncoderConfig

# wrapper class -> (attribute path of its Gemma3TextModel, state-dict prefix of that model)
LANGUAGE_MODEL: dict[str, str] = {
    "Gemma3TextModel": "",
    "Gemma3ForCausalLM": "model",
    "Gemma3ForConditionalGeneration": "model.language_model",
}

# Gemma-3 text-model keys, relative to the language-model prefix ({i}: layer index).
TEXT_MODEL_KEYS: tuple[str, ...] = (
    "embed_tokens.weight",
    "layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.self_attn.q_norm.weight",
    "layers.{i}.self_attn.k_norm.weight",
    "layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.mlp.up_proj.weight",
    "layers.{i}.mlp.down_proj.weight",
    "layers.{i}.input_layernorm.weight",
    "layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.pre_feedforward_layernorm.weight",
    "layers.{i}.post_feedforward_layernorm.weight",
    "norm.weight",
)

# Keys outside the language model that we drop on purpose (prefix match).
IGNORED_PREFIXES: tuple[str, ...] = ("lm_head.", "model.vision_tower.", "model.multi_modal_projector.")


def _pattern(key: str) -> str:
    return re.escape(key).replace(re.escape("{i}"), r"\d+")


_TEXT_MODEL_RE = re.compile("|".join(f"(?:{_pattern(k)})" for k in TEXT_MODEL_KEYS) + r"\Z")


def language_model(module: Any) -> Any:
    """The ``Gemma3TextModel`` inside a Gemma-3 module (itself, ``.model`` or ``.model.language_model``)."""
    name = type(module).__name__
    if name not in LANGUAGE_MODEL:
        raise TypeError(f"no Gemma-3 language model in {name}; supported: {sorted(LANGUAGE_MODEL)}")
    inner = module
    for attr in filter(None, LANGUAGE_MODEL[name].split(".")):
        inner = getattr(inner, attr)
    return inner


def check_keys(module: Any) -> None:
    """Every state-dict key is a text-model weight or deliberately ignored; else KeyError."""
    prefix = LANGUAGE_MODEL[type(module).__name__]
    prefix = f"{prefix}." if prefix else ""
    for key in module.state_dict():
        if key.startswith(prefix) and _TEXT_MODEL_RE.match(key[len(prefix) :]):
            continue
        if prefix and key.startswith(IGNORED_PREFIXES):
            continue
        raise KeyError(f"unexpected key {key!r}: not a Gemma-3 text-model weight and not ignored")


def from_transformers(module: Any, cfg: TextEncoderConfig | None = None, *, tokenizer: Any = None) -> GemmaTextEncoder:
    """A text encoder around the language model of a ``Gemma3TextModel``,
    ``Gemma3ForCausalLM`` or ``Gemma3ForConditionalGeneration`` (the vision tower is unused)."""
    lm = language_model(module)
    check_keys(module)
    return GemmaTextEncoder(lm, cfg or TextEncoderConfig(), tokenizer=tokenizer)
