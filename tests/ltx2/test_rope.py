"""RoPE pieces against diffusers' ``LTX2AudioVideoRotaryPosEmbed`` and apply functions (fp32, 1e-5)."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

from ltx2.config import TransformerConfig
from ltx2.rope import (
    RopeTables,
    apply_interleaved_rope,
    apply_split_rope,
    av_rope,
    prepare_audio_coords,
    prepare_video_coords,
    rope_tables,
)

TOL = 1e-5


@pytest.fixture(scope="module")
def ref() -> Any:
    import torch
    from diffusers.models.transformers import transformer_ltx2

    return torch, transformer_ltx2


def _rope(ref: Any, **kw: Any) -> Any:
    return ref[1].LTX2AudioVideoRotaryPosEmbed(**kw)


@pytest.mark.parametrize(("patch", "patch_t", "fps", "offset"), [(1, 1, 24.0, 1), (2, 1, 25.0, 0), (1, 2, 23.976, 1)])
def test_video_coords(ref: Any, patch: int, patch_t: int, fps: float, offset: int) -> None:
    torch = ref[0]
    r = _rope(ref, dim=32, patch_size=patch, patch_size_t=patch_t, causal_offset=offset, scale_factors=(8, 32, 32))
    want = r.prepare_video_coords(2, 5, 4, 6, torch.device("cpu"), fps=fps).numpy()
    got = prepare_video_coords(2, 5, 4, 6, patch_size=patch, patch_size_t=patch_t, causal_offset=offset, fps=fps)
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize(("patch_t", "shift", "offset"), [(1, 0, 1), (2, 3, 1), (1, 0, 0)])
def test_audio_coords(ref: Any, patch_t: int, shift: int, offset: int) -> None:
    torch = ref[0]
    r = _rope(ref, dim=16, patch_size_t=patch_t, causal_offset=offset, scale_factors=[4], modality="audio")
    want = r.prepare_audio_coords(2, 9, torch.device("cpu"), shift=shift).numpy()
    got = prepare_audio_coords(2, 9, patch_size_t=patch_t, causal_offset=offset, shift=shift)
    np.testing.assert_array_equal(np.asarray(got), want)
    if (patch_t, shift, offset) == (1, 0, 1):  # rows quoted in the reference notes
        np.testing.assert_allclose(np.asarray(got)[0, 0, :3], [[0, 0.01], [0.01, 0.05], [0.05, 0.09]], atol=1e-7)


def _split_to_bnt(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, 1, 2)  # ours [B, T, N, R] -> diffusers [B, N, T, R]


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize(("modality", "dim", "heads"), [("video", 32, 2), ("video", 40, 4), ("audio", 16, 2)])
def test_tables(ref: Any, rope_type: str, double: bool, modality: str, dim: int, heads: int) -> None:
    torch = ref[0]
    r = _rope(
        ref,
        dim=dim,
        modality=modality,
        rope_type=rope_type,
        double_precision=double,
        num_attention_heads=heads,
        scale_factors=(8, 32, 32) if modality == "video" else [4],
    )
    if modality == "video":
        coords = r.prepare_video_coords(2, 3, 4, 4, torch.device("cpu"), fps=24.0)
        max_pos = (20, 2048, 2048)
    else:
        coords = r.prepare_audio_coords(2, 12, torch.device("cpu"))
        max_pos = (20,)
    cos_t, sin_t = (t.numpy() for t in r(coords))
    got = rope_tables(
        jnp.asarray(coords.numpy()),
        dim=dim,
        max_positions=max_pos,
        theta=10000.0,
        double_precision=double,
        rope_type=rope_type,
        num_heads=heads,
    )
    cos, sin = np.asarray(got.cos), np.asarray(got.sin)
    if rope_type == "split":
        cos, sin = _split_to_bnt(cos), _split_to_bnt(sin)
    assert cos.shape == cos_t.shape
    np.testing.assert_allclose(cos, cos_t, atol=TOL, rtol=0)
    np.testing.assert_allclose(sin, sin_t, atol=TOL, rtol=0)


def test_apply_matches_diffusers(ref: Any) -> None:
    torch, mod = ref
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 12, 32)).astype(np.float32)
    angles = rng.uniform(-20, 20, size=(2, 12, 16)).astype(np.float32)
    cos, sin = np.repeat(np.cos(angles), 2, -1), np.repeat(np.sin(angles), 2, -1)
    want = mod.apply_interleaved_rotary_emb(torch.tensor(x), (torch.tensor(cos), torch.tensor(sin))).numpy()
    got = apply_interleaved_rope(jnp.asarray(x), _tables(cos, sin))
    np.testing.assert_allclose(np.asarray(got), want, atol=TOL, rtol=0)

    cos_s, sin_s = np.cos(angles).reshape(2, 12, 4, 4), np.sin(angles).reshape(2, 12, 4, 4)  # 4 heads of 8
    want = mod.apply_split_rotary_emb(
        torch.tensor(x), (torch.tensor(_split_to_bnt(cos_s)), torch.tensor(_split_to_bnt(sin_s)))
    ).numpy()
    got = apply_split_rope(jnp.asarray(x), _tables(cos_s, sin_s))
    np.testing.assert_allclose(np.asarray(got), want, atol=TOL, rtol=0)


def _tables(cos: np.ndarray, sin: np.ndarray) -> RopeTables:
    return RopeTables(jnp.asarray(cos), jnp.asarray(sin))


def test_av_rope_shapes_and_cross_time_only() -> None:
    cfg = TransformerConfig.tiny()
    video = prepare_video_coords(1, 2, 4, 4)
    audio = prepare_audio_coords(1, 8)
    rope = av_rope(cfg, video, audio)
    assert rope.video.cos.shape == (1, 32, 2, 8)
    assert rope.audio.cos.shape == (1, 8, 2, 4)
    assert rope.cross_video.cos.shape == (1, 32, 2, 4)
    assert rope.cross_audio.cos.shape == (1, 8, 2, 4)
    # Time-only: tokens of the same frame share the cross RoPE.
    np.testing.assert_array_equal(np.asarray(rope.cross_video.cos[0, 0]), np.asarray(rope.cross_video.cos[0, 15]))
