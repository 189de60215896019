"""diffusers ``LTX2VideoTransformer3DModel`` -> :class:`ltx2.transformer.LTX2Transformer`.

One key table: every diffusers state-dict key is mapped here (the model has no buffers and no
keys we drop); ``transformer_blocks.{layer}`` keys stack onto our scanned blocks.
"""

from __future__ import annotations

from typing import Any

from flax import nnx

from ltx2.config import TransformerConfig
from ltx2.convert.keymap import Rule, linear, load_state_dict
from ltx2.pipeline_parallel import store_stage_major
from ltx2.transformer import LTX2Transformer

_ADALN = (
    "time_embed",
    "audio_time_embed",
    "av_cross_attn_video_scale_shift",
    "av_cross_attn_audio_scale_shift",
    "av_cross_attn_video_a2v_gate",
    "av_cross_attn_audio_v2a_gate",
    "prompt_adaln",
    "audio_prompt_adaln",
)
_ATTENTION = ("attn1", "audio_attn1", "attn2", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn")
_BLOCK_TABLES = (
    "scale_shift_table",
    "audio_scale_shift_table",
    "prompt_scale_shift_table",
    "audio_prompt_scale_shift_table",
    "video_a2v_cross_attn_scale_shift_table",
    "audio_a2v_cross_attn_scale_shift_table",
)


def _attention_rules(src: str, dst: str) -> list[Rule]:
    rules = [*linear(f"{src}.to_out.0", f"{dst}.to_out"), *linear(f"{src}.to_gate_logits", f"{dst}.to_gate_logits")]
    for proj in ("to_q", "to_k", "to_v"):
        rules += linear(f"{src}.{proj}", f"{dst}.{proj}")
    rules += [Rule(f"{src}.norm_q.weight", f"{dst}.norm_q.scale"), Rule(f"{src}.norm_k.weight", f"{dst}.norm_k.scale")]
    return rules


def transformer_rules() -> list[Rule]:
    """diffusers key pattern -> our state path, for every key any supported config produces."""
    rules: list[Rule] = []
    for name in ("proj_in", "audio_proj_in", "proj_out", "audio_proj_out"):
        rules += linear(name, name)
    for name in ("caption_projection", "audio_caption_projection"):
        rules += linear(f"{name}.linear_1", f"{name}.linear_1") + linear(f"{name}.linear_2", f"{name}.linear_2")
    for name in _ADALN:
        for i in (1, 2):
            rules += linear(f"{name}.emb.timestep_embedder.linear_{i}", f"{name}.linear_{i}")
        rules += linear(f"{name}.linear", f"{name}.linear")
    rules += [
        Rule("scale_shift_table", "scale_shift_table"),
        Rule("audio_scale_shift_table", "audio_scale_shift_table"),
    ]
    src, dst = "transformer_blocks.{layer}", "transformer_blocks"
    for name in _ATTENTION:
        rules += _attention_rules(f"{src}.{name}", f"{dst}.{name}")
    for name in ("ff", "audio_ff"):
        rules += linear(f"{src}.{name}.net.0.proj", f"{dst}.{name}.proj_in")
        rules += linear(f"{src}.{name}.net.2", f"{dst}.{name}.proj_out")
    rules += [Rule(f"{src}.{name}", f"{dst}.{name}") for name in _BLOCK_TABLES]
    return rules


def from_diffusers(module: Any, **overrides: Any) -> LTX2Transformer:
    """Our transformer with the weights of a diffusers ``LTX2VideoTransformer3DModel``; ``overrides``
    set our knobs (``scan_layers``, ``sharding``, ``dtype`` ...)."""
    cfg = TransformerConfig.from_diffusers_config(dict(module.config), **overrides)
    # Shapes only: every parameter is then filled from the state dict (missing ones raise).
    model = nnx.eval_shape(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)))
    load_state_dict(model, module.state_dict(), transformer_rules())
    if cfg.pipeline_stages > 1:  # the stack stage-major: stage s's slice holds layers s, s + S, ...
        store_stage_major(model.transformer_blocks, cfg.pipeline_stages)
    return model
