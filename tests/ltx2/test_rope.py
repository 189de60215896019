"""RoPE pieces against diffusers' ``LTX2AudioVideoRotaryPosEmbed`` and apply functions (fp32).

Tolerances are error bounds computed from the inputs, not constants tuned to one CPU: see
:func:`_table_bound` (cos/sin tables), :func:`_frequency_bound` and :func:`_rotation_bound`.
"""

from __future__ import annotations

import math
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
    rope_frequencies,
    rope_tables,
)
from tests.tolerances import EPS32


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
        # Quoted decimals vs their float32 values: <= ulp(0.09) / 2 = 3.7e-9, plus a few roundings.
        np.testing.assert_allclose(np.asarray(got)[0, 0, :3], [[0, 0.01], [0.01, 0.05], [0.05, 0.09]], atol=1e-7)


def _split_to_bnt(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, 1, 2)  # ours [B, T, N, R] -> diffusers [B, N, T, R]


def _torch_frequencies(torch: Any, dim: int, num_axes: int, double: bool) -> np.ndarray:
    """diffusers' frequency formula (``LTX2AudioVideoRotaryPosEmbed.forward``, step 3) run by torch."""
    grid = torch.linspace(0.0, 1.0, dim // (2 * num_axes), dtype=torch.float64 if double else torch.float32)
    return (torch.pow(10000.0, grid) * torch.pi / 2.0).to(torch.float32).numpy()


def _frequency_bound(freqs: np.ndarray, double: bool, theta: float = 10000.0) -> np.ndarray:
    """|ours - diffusers| bound per frequency ``f = theta**x * pi/2``, x in [0, 1].

    float64 formula (``double``): both sides round float64 values that agree to ~1e-16 once to
    float32: <= 1 ulp apart (0 unless they straddle a float32 tie) -> eps |f|.
    float32 program ``fl(fl(theta**x) * fl(pi)) / 2`` on a float32 grid x, three inputs whose last bit
    follows torch's CPU kernels: the grid (torch's vectorised linspace rounds points past the middle
    1 ulp away from its scalar formula, which ours follows; seen from 64 steps) moves theta**x by
    <= ln(theta) * ulp(x) <= ln(theta) eps x relatively; torch's float32 pow is <= 1 ulp from the
    correctly rounded one we use; the product's rounding can add 1 ulp -> (ln(theta) x + 2) eps |f|."""
    if double:
        return EPS32 * np.abs(freqs)
    x = np.log(np.abs(freqs) / (np.pi / 2)) / math.log(theta)
    return (math.log(theta) * x + 2.0) * EPS32 * np.abs(freqs)


def _table_bound(grid: np.ndarray, freqs: np.ndarray, freq_diff: float, device_grid: bool) -> float:
    """|ours - diffusers| bound for a cos/sin entry. Inputs: positions ``grid`` as fractions g of
    ``max_positions``, the frequencies and the largest |ours - diffusers| among them (measured; its
    own bound is :func:`_frequency_bound`), and whether our g came from XLA (``device_grid``).

    Both sides compute ``angle = fl(u * f)``, ``u = fl(2g - 1)`` (2g exact), g = fl(coord / max):
    * g: correctly rounded in torch and numpy; XLA multiplies by the constant's rounded reciprocal,
      <= 1.5 ulp off, so on the device path |dg| <= 2 eps |g| and |du| <= 4 eps |g| + eps |u|;
    * |d angle| <= |u| |df| + |f| |du| + eps |angle| (the last: each product rounds by <= 1/2 ulp).
      With identical inputs (host grid, equal frequencies) the two float32 programs are the same
      IEEE operations, and the angles are bit-identical.
    |d cos|, |d sin| <= |d angle| + both sides' cos/sin errors (<= 2 eps each for values in [-1, 1];
    measured over |angle| <= 1.6e4: XLA 3.2e-8, torch 3.6e-8). The angles reach theta * pi / 2
    ~ 1.6e4 rad where one float32 ulp is ~1e-3: any input difference costs that much."""
    g = np.abs(grid.astype(np.float64))
    u = np.abs(2.0 * g - 1.0)
    f_max = float(np.abs(freqs).max())
    if freq_diff == 0 and not device_grid:
        return 4.0 * EPS32
    du = 4.0 * EPS32 * g + EPS32 * u if device_grid else np.zeros_like(g)
    angle = u * freq_diff + f_max * du + EPS32 * u * f_max
    return float(angle.max()) + 4.0 * EPS32


@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize(("dim", "num_axes"), [(32, 3), (40, 3), (4096, 3), (16, 1), (2048, 1), (30, 3)])
def test_frequencies(ref: Any, dim: int, num_axes: int, double: bool) -> None:
    """The host frequency vector (4096 / 2048: the 19B's video and audio widths) against diffusers'
    formula run by torch, and against the exact math in float64 at x = k / (n - 1): correctly rounded
    for the float64 formula; for the float32 program within its roundings (grid point <= eps x, pow
    0.5 ulp, fl(pi) 0.23 ulp, product 0.5 ulp -> (ln(theta) x + 1.25) eps relative)."""
    steps = dim // (2 * num_axes)
    want = _torch_frequencies(ref[0], dim, num_axes, double)
    got = rope_frequencies(dim, num_axes, 10000.0, double)
    assert got.dtype == np.float32 and got.shape == (steps,)
    diff = np.abs(got.astype(np.float64) - want)
    assert (diff <= _frequency_bound(want, double)).all(), diff / np.spacing(want)
    x = np.arange(steps) / max(steps - 1, 1)
    exact = np.array([math.pow(10000.0, v) * math.pi / 2 for v in x])
    err = np.abs(got - exact)
    if double:  # float64's own error (~1e-15 relative after pow) is the only slack past half an ulp
        assert (err <= np.spacing(got) / 2 + 1e-14 * exact).all(), err / np.spacing(got)
    else:
        assert (err <= (math.log(10000.0) * x + 1.25) * EPS32 * exact).all(), err / (EPS32 * exact)


@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
@pytest.mark.parametrize("double", [True, False])
@pytest.mark.parametrize(("modality", "dim", "heads"), [("video", 32, 2), ("video", 40, 4), ("audio", 16, 2)])
def test_tables(ref: Any, rope_type: str, double: bool, modality: str, dim: int, heads: int) -> None:
    """Host (numpy) and device (jnp) coordinates, each within :func:`_table_bound` of diffusers."""
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
    grid = coords.numpy().mean(axis=-1, dtype=np.float64) / np.asarray(max_pos, np.float64)[:, None]
    freqs = _torch_frequencies(torch, dim, len(max_pos), double)
    freq_diff = float(np.abs(rope_frequencies(dim, len(max_pos), 10000.0, double) - freqs).max())
    for xp in (np, jnp):
        bound = _table_bound(grid, freqs, freq_diff, device_grid=xp is jnp)
        got = rope_tables(
            xp.asarray(coords.numpy()),
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
        assert cos.shape == sin.shape == cos_t.shape
        err = max(float(np.abs(cos - cos_t).max()), float(np.abs(sin - sin_t).max()))
        print(f"rope {modality} dim {dim} {rope_type} double={double} {xp.__name__}: max|d| {err:.2e} <= {bound:.2e}")
        assert err <= bound


def _rotation_bound(x: np.ndarray) -> float:
    """|ours - diffusers| bound for ``a cos + b sin`` with |cos|, |sin| <= 1 shared by both sides:
    two products and a sum, one rounding each, <= eps (|a| + |b|) per side (less when XLA fuses
    an FMA), so <= 4 eps max|x| between the two."""
    return 4.0 * EPS32 * float(np.abs(x).max())


def test_apply_matches_diffusers(ref: Any) -> None:
    torch, mod = ref
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 12, 32)).astype(np.float32)
    angles = rng.uniform(-20, 20, size=(2, 12, 16)).astype(np.float32)
    cos, sin = np.repeat(np.cos(angles), 2, -1), np.repeat(np.sin(angles), 2, -1)
    want = mod.apply_interleaved_rotary_emb(torch.tensor(x), (torch.tensor(cos), torch.tensor(sin))).numpy()
    got = apply_interleaved_rope(jnp.asarray(x), _tables(cos, sin))
    np.testing.assert_allclose(np.asarray(got), want, atol=_rotation_bound(x), rtol=0)

    cos_s, sin_s = np.cos(angles).reshape(2, 12, 4, 4), np.sin(angles).reshape(2, 12, 4, 4)  # 4 heads of 8
    want = mod.apply_split_rotary_emb(
        torch.tensor(x), (torch.tensor(_split_to_bnt(cos_s)), torch.tensor(_split_to_bnt(sin_s)))
    ).numpy()
    got = apply_split_rope(jnp.asarray(x), _tables(cos_s, sin_s))
    np.testing.assert_allclose(np.asarray(got), want, atol=_rotation_bound(x), rtol=0)


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
