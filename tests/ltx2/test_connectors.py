"""Text connectors: parity with diffusers ``LTX2TextConnectors`` (2.0 and 2.3 paths), the
register reorder, the scan/loop paths, conversion and config errors."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2 import sharding
from ltx2.convert import from_diffusers
from ltx2.convert.connectors import load
from ltx2.sharding import logical_axes
from ltx2.text.connectors import (
    ConnectorsConfig,
    LTX2TextConnectors,
    fill_with_registers,
    per_layer_masked_mean_norm,
)
from tests.tolerances import FP32_KERNEL, FP32_MODULE

TOL = FP32_MODULE
KNOBS = ("scan_layers", "sharding", "dtype", "param_dtype")
CASES = {
    "2.0": ConnectorsConfig.tiny(),
    "2.0-loop": ConnectorsConfig.tiny(scan_layers=False),
    "2.3": ConnectorsConfig.tiny_ltx2_3(),
    "2.0-no-registers-interleaved": ConnectorsConfig.tiny(
        video_connector_num_learnable_registers=None,
        audio_connector_num_learnable_registers=None,
        rope_type="interleaved",
    ),
}


def diffusers_kwargs(cfg: ConnectorsConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in KNOBS}


@pytest.fixture(scope="module")
def reference_cls() -> Any:
    from diffusers.pipelines.ltx2 import LTX2TextConnectors as Reference

    return Reference


def build_reference(reference_cls: Any, cfg: ConnectorsConfig, seed: int = 0) -> Any:
    import torch

    torch.manual_seed(seed)
    return reference_cls(**diffusers_kwargs(cfg)).eval()


def inputs(cfg: ConnectorsConfig, four_d: bool) -> tuple[np.ndarray, np.ndarray]:
    """Batch 2, 16 tokens, left padded by 5 and 11; stacked hidden states [B, S, C, L'] or flat."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 16, cfg.caption_channels, cfg.text_proj_in_factor)).astype(np.float32)
    x *= rng.uniform(0.5, 4.0, size=(1, 1, 1, cfg.text_proj_in_factor)).astype(np.float32)
    mask = np.ones((2, 16), np.int64)
    mask[0, :5] = 0
    mask[1, :11] = 0
    return (x if four_d else x.reshape(2, 16, -1)), mask


def relative_error(ours: Any, ref: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(ours) - ref)) / max(1.0, np.max(np.abs(ref))))


@nnx.jit
def run(model: LTX2TextConnectors, x: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    return model(x, mask)


@pytest.mark.parity
@pytest.mark.parametrize("case", list(CASES))
def test_matches_diffusers(reference_cls: Any, case: str) -> None:
    import torch

    cfg = CASES[case]
    ref = build_reference(reference_cls, cfg)
    x, mask = inputs(cfg, four_d=case == "2.3")
    with torch.no_grad():
        ref_video, ref_audio, ref_mask = (t.numpy() for t in ref(torch.from_numpy(x), torch.from_numpy(mask)))
    model = from_diffusers(ref, scan_layers=cfg.scan_layers)
    video, audio, out_mask = run(model, jnp.asarray(x), jnp.asarray(mask, jnp.int32))
    errors = {"video": relative_error(video, ref_video), "audio": relative_error(audio, ref_audio)}
    print(f"connectors {case}: max|ours-ref|/max(1,|ref|) = {errors}")
    assert video.shape == ref_video.shape and audio.shape == ref_audio.shape
    assert max(errors.values()) <= TOL
    np.testing.assert_array_equal(np.asarray(out_mask), ref_mask)


def test_a_bfloat16_normalisation_rounds_once() -> None:
    """LTX-2.0's masked mean / range normalisation of bfloat16 hidden states is the float32 one
    rounded once, as torch's promotion computes it in diffusers (the float32 count makes the mean
    float32); rounding each step in bfloat16 put the connectors' output further from float32 than
    diffusers' bfloat16 (benchmarks/results/bf16-accuracy-2026-11-29.md)."""
    x, mask = inputs(ConnectorsConfig.tiny(), four_d=True)
    x_bf16, lengths = jnp.asarray(x, jnp.bfloat16), jnp.asarray(mask.sum(-1))
    got = per_layer_masked_mean_norm(x_bf16, lengths)
    want = per_layer_masked_mean_norm(x_bf16.astype(jnp.float32), lengths).astype(jnp.bfloat16)
    assert got.dtype == jnp.bfloat16 and got.shape == (2, 16, 72)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))


def test_registers_reorder_is_stable() -> None:
    x = jnp.arange(2 * 8, dtype=jnp.float32).reshape(2, 8, 1) + 100
    valid = jnp.asarray([[0, 0, 0, 1, 1, 0, 1, 1], [1] * 8], dtype=bool)
    registers = jnp.asarray([[-1.0], [-2.0], [-3.0], [-4.0]])
    out = np.asarray(fill_with_registers(x, valid, registers))[..., 0]
    np.testing.assert_array_equal(out[0], [103, 104, 106, 107, -1, -2, -3, -4])
    np.testing.assert_array_equal(out[1], np.arange(8) + 108)


def test_register_count_must_divide_length() -> None:
    model = nnx.eval_shape(lambda: LTX2TextConnectors(ConnectorsConfig.tiny(), rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="text length 12 must be divisible by the number of registers 8"):
        nnx.eval_shape(lambda m: m(jnp.zeros((1, 12, 72)), jnp.ones((1, 12), jnp.int32)), model)


def test_blocks_are_stacked_on_layers_axis() -> None:
    model = nnx.eval_shape(lambda: LTX2TextConnectors(ConnectorsConfig.tiny(), rngs=nnx.Rngs(0)))
    kernel = model.video_connector.transformer_blocks.attn1.to_q.kernel
    assert kernel.shape == (2, 24, 24)
    assert logical_axes(kernel) == ("layers", "qkv_in", "heads")
    assert model.audio_connector.transformer_blocks.ff.proj_in.kernel.shape == (1, 24, 96)


@pytest.mark.parity
def test_conversion_errors_name_the_key(reference_cls: Any) -> None:
    cfg = ConnectorsConfig.tiny()
    state = dict(build_reference(reference_cls, cfg).state_dict())
    with pytest.raises(KeyError, match="video_connector.extra_scale"):
        load(cfg, {**state, "video_connector.extra_scale": np.ones(3)})
    bad = {**state, "text_proj_in.weight": np.ones((24, 71), np.float32)}
    with pytest.raises(ValueError, match="text_proj_in.weight"):
        load(cfg, bad)
    del state["audio_connector.learnable_registers"]
    with pytest.raises(KeyError, match="audio_connector.learnable_registers"):
        load(cfg, state)


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="video_connector_num_attention_heads.*caption_channels = 24"):
        ConnectorsConfig.tiny(video_connector_num_attention_heads=3)
    with pytest.raises(ValueError, match="rope_type"):
        ConnectorsConfig.tiny(rope_type="spiral")
    with pytest.raises(ValueError, match="audio_hidden_dim = 16"):
        ConnectorsConfig.tiny_ltx2_3(audio_connector_attention_head_dim=4)
    with pytest.raises(ValueError, match="'not_a_field'"):
        ConnectorsConfig.from_diffusers_config({"_class_name": "LTX2TextConnectors", "not_a_field": 1})


def test_full_size_presets_build_abstractly() -> None:
    for cfg, video_width in ((ConnectorsConfig.ltx2_19b(), 3840), (ConnectorsConfig.ltx2_3(), 4096)):
        model = nnx.eval_shape(lambda cfg=cfg: LTX2TextConnectors(cfg, rngs=nnx.Rngs(0)))
        out = nnx.eval_shape(lambda m: m(jnp.zeros((1, 256, 3840 * 49)), jnp.ones((1, 256), jnp.int32)), model)
        assert out[0].shape == (1, 256, video_width)
        assert out[1].shape == (1, 256, 3840 if not cfg.per_modality_projections else 2048)


@pytest.mark.parametrize(
    ("strategy", "mesh_axes"), [("trillium", {"fsdp": 2, "tensor": 4}), ("ironwood", {"data": 2, "tensor": 4})]
)
def test_sharded_run_matches_replicated(reference_cls: Any, strategy: str, mesh_axes: dict[str, int]) -> None:
    cfg = ConnectorsConfig.tiny_ltx2_3()
    state = build_reference(reference_cls, cfg).state_dict()
    x, mask = (jnp.asarray(a) for a in inputs(cfg, four_d=False))
    expected = run(load(cfg, state), x, mask)
    mesh = sharding.build_mesh(mesh_axes)
    model = sharding.shard_module(load(cfg.replace(sharding=strategy), state), strategy, mesh)
    with jax.set_mesh(mesh):
        got = run(model, x, mask)
    errors = [relative_error(g, np.asarray(e)) for g, e in zip(got, expected, strict=True)]
    print(f"connectors sharded {strategy} vs replicated: {errors}")
    assert max(errors) <= FP32_KERNEL  # same math; sharded contractions reorder the sums
    assert model.video_connector.transformer_blocks.attn1.to_q.kernel[...].sharding.spec[-1] == "tensor"
