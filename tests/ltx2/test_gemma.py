"""Gemma-3 text encoder: torchax and host placements against transformers, joint vs separate
CFG batching, wrapper conversion, tokenizer handling, and the torchax import shim."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ltx2.convert import from_diffusers
from ltx2.convert.gemma import from_transformers, language_model
from ltx2.text.gemma import GemmaTextEncoder, TextEncoderConfig, load_tokenizer
from tests.tolerances import FP32_ELEMENTWISE, FP32_KERNEL, FP32_MODULE

TOL = FP32_MODULE
SEQ = 12


@pytest.fixture(scope="module")
def text_config() -> Any:
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=256,
        sliding_window=4,
        query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"] * 2,
    )


def tiny_gemma(text_config: Any, seed: int = 0) -> Any:
    import torch
    from transformers import Gemma3TextModel

    torch.manual_seed(seed)
    return Gemma3TextModel(text_config).eval()


@pytest.fixture(scope="module")
def gemma(text_config: Any) -> Any:
    return tiny_gemma(text_config)


@pytest.fixture(scope="module")
def tokens() -> dict[str, np.ndarray]:
    """Positive and negative prompts, batch 2, left padded (by 5/0 and 9/3 tokens)."""
    rng = np.random.default_rng(0)
    out = {}
    for name, pads in (("pos", (5, 0)), ("neg", (9, 3))):
        ids = rng.integers(1, 128, size=(2, SEQ)).astype(np.int32)
        mask = np.ones((2, SEQ), np.int32)
        for row, pad in enumerate(pads):
            ids[row, :pad], mask[row, :pad] = 0, 0
        out[f"{name}_ids"], out[f"{name}_mask"] = ids, mask
    return out


def reference(model: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``LTX2Pipeline._get_gemma_prompt_embeds`` before flattening: stack(hidden_states, -1)."""
    import torch

    with torch.no_grad():
        out = model(
            input_ids=torch.from_numpy(ids).long(),
            attention_mask=torch.from_numpy(mask).long(),
            output_hidden_states=True,
        )
    return torch.stack(out.hidden_states, dim=-1).numpy()


def valid_error(ours: Any, ref: np.ndarray, mask: np.ndarray) -> float:
    valid = mask.astype(bool)
    ours = np.asarray(ours)
    return float(np.max(np.abs(ours[valid] - ref[valid])) / max(1.0, np.max(np.abs(ref[valid]))))


@pytest.fixture(scope="module")
def torchax_encoder(gemma: Any) -> GemmaTextEncoder:
    return from_transformers(
        gemma, TextEncoderConfig(placement="torchax", batching="separate", max_sequence_length=SEQ)
    )


@pytest.mark.parity
def test_torchax_matches_transformers(gemma: Any, torchax_encoder: GemmaTextEncoder, tokens: dict) -> None:
    ids, mask = tokens["pos_ids"], tokens["pos_mask"]
    ours = torchax_encoder.encode(ids, mask)
    ref = reference(gemma, ids, mask)
    err = valid_error(ours, ref, mask)
    print(f"gemma torchax vs transformers (valid tokens): {err:.3g}")
    assert ours.shape == (2, SEQ, 32, 5) == ref.shape
    assert err <= TOL
    assert np.isfinite(np.asarray(ours)).all()  # padding rows too: they must not poison anything


@pytest.mark.parity
def test_host_matches_transformers(gemma: Any, tokens: dict) -> None:
    encoder = from_transformers(gemma, TextEncoderConfig(placement="host"))
    ids, mask = tokens["pos_ids"], tokens["pos_mask"]
    ours = encoder.encode(ids, mask)
    ref = reference(gemma, ids, mask)
    err = float(np.max(np.abs(ours - ref)) / max(1.0, np.max(np.abs(ref))))
    print(f"gemma host vs transformers (all tokens): {err:.3g}")
    # The same PyTorch module on the same batch: any difference is our wrapper's (stacking, casts).
    assert isinstance(ours, np.ndarray) and err <= FP32_ELEMENTWISE


@pytest.mark.parametrize("strategy", ["trillium", "naive"])
def test_sharded_torchax_matches_unsharded(
    gemma: Any, torchax_encoder: GemmaTextEncoder, tokens: dict, strategy: str
) -> None:
    """Weights placed by their logical names on fsdp=2 x context=2 x tensor=2, output constrained:
    the same hidden states (fp32; only the order of partial sums may change: FP32_KERNEL)."""
    import jax
    from jax.sharding import PartitionSpec as P

    from ltx2 import sharding

    mesh = sharding.build_mesh({"fsdp": 2, "context": 2, "tensor": 2})
    cfg = TextEncoderConfig(placement="torchax", batching="separate", max_sequence_length=SEQ, sharding=strategy)
    encoder = GemmaTextEncoder(gemma, cfg).shard(mesh)
    ids, mask = tokens["pos_ids"], tokens["pos_mask"]
    with jax.set_mesh(mesh):
        ours = encoder.encode(ids, mask)
    err = valid_error(ours, np.asarray(torchax_encoder.encode(ids, mask)), mask)
    print(f"gemma torchax {strategy} vs replicated: {err:.3g}")
    assert err <= FP32_KERNEL
    assert encoder.weights is not None
    q_spec = encoder.weights["language_model.layers.0.self_attn.q_proj.weight"].sharding.spec
    assert q_spec == {"trillium": P("tensor", "fsdp"), "naive": P(None, ("context", "fsdp"))}[strategy]
    if strategy == "trillium":  # batch over data x fsdp; this mesh has no data axis
        assert ours.sharding.spec[0] == "fsdp"


def test_every_gemma_weight_has_logical_names(torchax_encoder: GemmaTextEncoder) -> None:
    from ltx2.text.gemma import gemma_logical_axes

    assert torchax_encoder.weights is not None
    axes = {k: gemma_logical_axes(k, w.ndim) for k, w in torchax_encoder.weights.items()}
    assert axes["language_model.layers.0.mlp.down_proj.weight"] == ("mlp_out", "mlp")
    assert axes["language_model.norm.weight"] == ("norm",)
    with pytest.raises(ValueError, match="'language_model.lm_head.weight' has no logical axis rule"):
        gemma_logical_axes("language_model.lm_head.weight", 2)
    with pytest.raises(ValueError, match="sharding='zigzag'"):
        TextEncoderConfig(sharding="zigzag")
    with pytest.raises(ValueError, match="no JAX weights to shard"):
        GemmaTextEncoder(torchax_encoder.language_model, TextEncoderConfig(placement="host")).shard(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("placement", ["torchax", "host"])
def test_joint_and_separate_batching_agree(
    gemma: Any, torchax_encoder: GemmaTextEncoder, tokens: dict, placement: str
) -> None:
    separate_cfg = TextEncoderConfig(placement=placement, batching="separate")
    separate = torchax_encoder if placement == "torchax" else GemmaTextEncoder(gemma, separate_cfg)
    joint = GemmaTextEncoder(gemma, dataclasses.replace(separate_cfg, batching="joint"))
    args = (tokens["pos_ids"], tokens["pos_mask"], tokens["neg_ids"], tokens["neg_mask"])
    for (j, s), mask in zip(
        zip(joint.encode_pair(*args), separate.encode_pair(*args), strict=True),
        (tokens["pos_mask"], tokens["neg_mask"]),
        strict=True,
    ):
        err = valid_error(j, np.asarray(s), mask)
        print(f"gemma {placement} joint vs separate: {err:.3g}")
        # One batch of four rows or two of two: GEMM blocking may reorder the K-term sums.
        assert err <= FP32_KERNEL


@pytest.mark.parity
def test_wrappers_convert_to_their_language_model(text_config: Any, gemma: Any, tokens: dict) -> None:
    from transformers import Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, SiglipVisionConfig

    causal = Gemma3ForCausalLM(text_config).eval()
    causal.model.load_state_dict(gemma.state_dict())
    vision = SiglipVisionConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28, patch_size=14
    )
    multimodal_cfg = Gemma3Config(
        text_config=text_config,
        vision_config=vision,
        mm_tokens_per_image=4,
        image_token_index=127,
        boi_token_index=125,
        eoi_token_index=126,
    )
    multimodal = Gemma3ForConditionalGeneration(multimodal_cfg).eval()
    multimodal.model.language_model.load_state_dict(gemma.state_dict())
    assert language_model(causal) is causal.model
    assert language_model(multimodal) is multimodal.model.language_model

    host = TextEncoderConfig(placement="host")
    ids, mask = tokens["pos_ids"], tokens["pos_mask"]
    expected = from_transformers(gemma, host).encode(ids, mask)
    for wrapper in (causal, multimodal):
        np.testing.assert_array_equal(from_diffusers(wrapper, cfg=host).encode(ids, mask), expected)


def test_conversion_errors(text_config: Any) -> None:
    import torch

    model = tiny_gemma(text_config)
    model.register_buffer("calibration_scale", torch.ones(1))
    with pytest.raises(KeyError, match="'calibration_scale'"):
        from_transformers(model)
    with pytest.raises(TypeError, match="no Gemma-3 language model in Linear"):
        from_transformers(torch.nn.Linear(2, 2))


def test_tokenizer_left_pads_and_encodes(gemma: Any, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, "a": 3, "cat": 4, "dog": 5, "runs": 6}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>").save_pretrained(tmp_path)

    cfg = TextEncoderConfig(placement="host", max_sequence_length=6, tokenizer_dir=str(tmp_path))
    encoder = GemmaTextEncoder(gemma, cfg)
    ids, mask = encoder.tokenize(["a cat runs", "  dog "])
    np.testing.assert_array_equal(ids, [[1, 1, 1, 3, 4, 6], [1, 1, 1, 1, 1, 5]])  # pad = eos, on the left
    np.testing.assert_array_equal(mask, [[0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]])
    hidden, mask2 = encoder.encode_text("a dog")
    assert hidden.shape == (1, 6, 32, 5) and mask2.sum() == 2


def test_text_without_tokenizer_is_a_clear_error(gemma: Any, tmp_path: Path) -> None:
    encoder = GemmaTextEncoder(gemma, TextEncoderConfig(placement="host"))
    with pytest.raises(ValueError, match="text prompts need a tokenizer"):
        encoder.encode_text(["a cat"])
    with pytest.raises(ValueError, match="no usable tokenizer in"):
        load_tokenizer(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="placement='tpu'"):
        TextEncoderConfig(placement="tpu")  # type: ignore[arg-type]


def test_torchax_shim_is_idempotent_and_narrow() -> None:
    import torch
    from torch._ops import OpOverloadPacket

    from ltx2.text.torchax_compat import RemovedOverload, apply, import_torchax

    torchax = import_torchax()
    patched = OpOverloadPacket.__getattr__
    apply()
    assert OpOverloadPacket.__getattr__ is patched and hasattr(torchax, "extract_jax")
    placeholder = torch.ops.aten.prod.dim_Dimname
    assert isinstance(placeholder, RemovedOverload) and placeholder is torch.ops.aten.prod.dim_Dimname
    with pytest.raises(NotImplementedError, match="named tensors"):
        placeholder()
    with pytest.raises(AttributeError):
        torch.ops.aten.prod.no_such_overload  # noqa: B018


def test_weightless_gemma_traces_the_same_program(text_config: Any, torchax_encoder: GemmaTextEncoder) -> None:
    """A Gemma-3 built on torch's meta device gives the same traced function as one with weights:
    fed the same weights, the same hidden states, bit for bit; its shapes are those weights'."""
    import jax
    import jax.numpy as jnp

    from ltx2.text.gemma import abstract_gemma

    shapes, apply = abstract_gemma(text_config, "replicated")
    weights = torchax_encoder.weights
    assert weights is not None and torchax_encoder.apply is not None
    assert {k: (s.shape, s.dtype) for k, s in shapes.items()} == {k: (w.shape, w.dtype) for k, w in weights.items()}
    rng = np.random.default_rng(1)
    ids = jnp.asarray(rng.integers(1, 128, (2, SEQ)), jnp.int32)
    mask = jnp.ones((2, SEQ), jnp.int32).at[:, :3].set(0)
    got = jax.jit(apply)(weights, ids, mask)
    want = jax.jit(torchax_encoder.apply)(weights, ids, mask)
    assert got.shape == (2, SEQ, 32, 5) and np.array_equal(np.asarray(got), np.asarray(want))
