"""diffusers ``LTX2TextConnectors`` -> :class:`ltx2.text.connectors.LTX2TextConnectors`.

Names are kept except ``to_out.0`` -> ``to_out``, ``ff.net.0.proj`` / ``ff.net.2`` ->
``ff.proj_in`` / ``ff.proj_out`` and norm ``weight`` -> ``scale``; block keys of every layer are
stacked on the leading ``layers`` axis. Projection and gate keys occur only in the configs that
have them (2.0: ``text_proj_in``; 2.3: ``{video,audio}_text_proj_in``, ``to_gate_logits``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from flax import nnx

from ltx2.convert.keymap import Rule, linear, load_state_dict
from ltx2.text.connectors import ConnectorsConfig, LTX2TextConnectors


def _connector(modality: str) -> list[Rule]:
    src = f"{modality}_connector.transformer_blocks.{{layer}}"
    dst = f"{modality}_connector.transformer_blocks"
    names = {"to_q": "to_q", "to_k": "to_k", "to_v": "to_v", "to_out.0": "to_out", "to_gate_logits": "to_gate_logits"}
    attn = [r for name, target in names.items() for r in linear(f"{src}.attn1.{name}", f"{dst}.attn1.{target}")]
    return [
        Rule(f"{modality}_connector.learnable_registers", f"{modality}_connector.learnable_registers"),
        *attn,
        Rule(f"{src}.attn1.norm_q.weight", f"{dst}.attn1.norm_q.scale"),
        Rule(f"{src}.attn1.norm_k.weight", f"{dst}.attn1.norm_k.scale"),
        *linear(f"{src}.ff.net.0.proj", f"{dst}.ff.proj_in"),
        *linear(f"{src}.ff.net.2", f"{dst}.ff.proj_out"),
    ]


RULES: list[Rule] = [
    *linear("text_proj_in", "text_proj_in"),
    *linear("video_text_proj_in", "video_text_proj_in"),
    *linear("audio_text_proj_in", "audio_text_proj_in"),
    *_connector("video"),
    *_connector("audio"),
]


def load(cfg: ConnectorsConfig, state_dict: Mapping[str, Any]) -> LTX2TextConnectors:
    """Our connectors for ``cfg`` with every parameter taken from ``state_dict``."""
    model = nnx.eval_shape(lambda: LTX2TextConnectors(cfg, rngs=nnx.Rngs(0)))
    return cast(LTX2TextConnectors, load_state_dict(model, state_dict, RULES))


def from_diffusers(module: Any, **overrides: Any) -> LTX2TextConnectors:
    """Convert a diffusers ``LTX2TextConnectors`` (config + weights); ``overrides`` set our
    extra config fields (``scan_layers``, ``sharding``, ``dtype``, ``param_dtype``)."""
    return load(ConnectorsConfig.from_diffusers_config(module.config, **overrides), module.state_dict())
