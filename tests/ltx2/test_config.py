"""TransformerConfig: presets, validation naming the field, diffusers config import, FLOPs."""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import pytest
from flax import nnx

from ltx2.config import KNOBS, TransformerConfig
from ltx2.transformer import LTX2Transformer


def test_presets_and_derived_sizes() -> None:
    tiny = TransformerConfig.tiny()
    assert (tiny.inner_dim, tiny.audio_inner_dim, tiny.head_dim, tiny.audio_head_dim) == (32, 16, 16, 8)
    big = TransformerConfig.ltx2_19b()
    assert (big.inner_dim, big.audio_inner_dim, big.rope_type, big.num_layers) == (4096, 2048, "split", 48)
    v23 = TransformerConfig.ltx2_3_22b()
    assert v23.prompt_modulation and v23.perturbed_attn and not v23.use_prompt_embeddings
    assert (v23.video_mod_params, v23.audio_mod_params) == (9, 9)
    assert TransformerConfig.small(num_layers=4).num_layers == 4
    medium = TransformerConfig.medium()
    assert (medium.inner_dim, medium.audio_inner_dim, medium.head_dim, medium.num_layers) == (1024, 512, 64, 2)
    assert round(medium.forward_flops(576, 68, 128, batch_size=2) / 1e9, 2) == 92.15  # the bench's step
    with pytest.raises(dataclasses.FrozenInstanceError):
        tiny.num_layers = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"cross_attention_dim": 48}, "cross_attention_dim"),
        ({"audio_cross_attention_dim": 8}, "audio_cross_attention_dim"),
        ({"rope_type": "rotary"}, "rope_type"),
        ({"sharding": "nope"}, "sharding"),
        ({"num_layers": 0}, "num_layers"),
        ({"attention_head_dim": -16}, "attention_head_dim"),
        ({"dtype": "float16"}, "dtype"),
        ({"param_dtype": "int8"}, "param_dtype"),
        ({"attention_impl": "flash"}, "attention_impl"),
        ({"norm_eps": 0.0}, "norm_eps"),
        ({"vae_scale_factors": (8, 32)}, "vae_scale_factors"),
        ({"attention_head_dim": 15, "cross_attention_dim": 30}, "attention_head_dim"),
    ],
)
def test_validation_names_field_and_value(changes: dict, field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"TransformerConfig.{field}={changes[field]!r}")):
        TransformerConfig.tiny(**changes)


def test_cross_dim_free_without_text_projection() -> None:
    # Without caption projection or prompt tables the text width is the checkpoint's business.
    cfg = TransformerConfig.tiny(use_prompt_embeddings=False, cross_attention_dim=48)
    assert cfg.cross_attention_dim == 48


def _diffusers_style(cfg: TransformerConfig) -> dict:
    knobs = set(KNOBS)
    d = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in knobs}
    d |= {
        "activation_fn": "gelu-approximate",
        "qk_norm": "rms_norm_across_heads",
        "norm_elementwise_affine": False,
        "use_keyframes_abs_pos_embedding": False,
        "_class_name": "LTX2VideoTransformer3DModel",
        "_diffusers_version": "0.42.1",
        "vae_scale_factors": list(cfg.vae_scale_factors),
    }
    return d


def test_from_diffusers_config_round_trip_and_rejections() -> None:
    cfg = TransformerConfig.ltx2_3_22b()
    assert TransformerConfig.from_diffusers_config(_diffusers_style(cfg)) == cfg
    assert TransformerConfig.from_diffusers_config(_diffusers_style(cfg), scan_layers=False).scan_layers is False
    d = _diffusers_style(TransformerConfig.tiny()) | {"out_channels": None, "audio_out_channels": None}
    got = TransformerConfig.from_diffusers_config(d)
    assert (got.out_channels, got.audio_out_channels) == (8, 8)
    with pytest.raises(ValueError, match="activation_fn='gelu'"):
        TransformerConfig.from_diffusers_config(_diffusers_style(cfg) | {"activation_fn": "gelu"})
    with pytest.raises(ValueError, match="use_keyframes_abs_pos_embedding=True"):
        TransformerConfig.from_diffusers_config(_diffusers_style(cfg) | {"use_keyframes_abs_pos_embedding": True})
    with pytest.raises(ValueError, match="'mystery_knob'"):
        TransformerConfig.from_diffusers_config(_diffusers_style(cfg) | {"mystery_knob": 1})


def test_flops_scale_with_batch_and_match_xla_matmuls() -> None:
    cfg = TransformerConfig.small(num_layers=1)
    L, A, S = 256, 32, 64
    assert cfg.forward_flops(L, A, S, batch_size=2) == 2 * cfg.forward_flops(L, A, S)
    model = nnx.eval_shape(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(model)

    def forward(state, x, a, text, audio_text, t):
        return nnx.merge(graphdef, state)(
            x, a, text, audio_text, t, num_frames=4, height=8, width=8, audio_num_frames=A
        )

    args = [jax.ShapeDtypeStruct(s, jnp.float32) for s in ((1, L, 128), (1, A, 128), (1, S, 128), (1, S, 128), (1,))]
    compiled = jax.jit(forward).lower(state, *args).compile({"xla_backend_optimization_level": 0})
    xla = compiled.cost_analysis()["flops"]
    ours = cfg.forward_flops(L, A, S)
    # XLA also counts elementwise work (norms, softmax, RoPE, GELU), so it is a little above the matmuls.
    print(f"small 1-layer forward FLOPs: ours {ours:.4g}, XLA cost_analysis {xla:.4g} ({xla / ours:.3f}x)")
    assert ours <= xla <= 1.15 * ours, (ours, xla)
