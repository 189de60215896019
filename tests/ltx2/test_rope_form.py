"""``transformer.rope_form``: the split RoPE written as diffusers does ("concat": halves sliced,
rotated, concatenated) or as one elementwise expression over heads-major tables ("fused"). Both are
the same float32 arithmetic: op by op they give the same bits; compiled, XLA may contract a product
and a sum into a fused multiply-add differently in each, which moves an output by at most the
rotation bound of test_rope (4 eps max|x|)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.config import TransformerConfig
from ltx2.rope import RopeTables, apply_rope, av_rope, prepare_audio_coords, prepare_video_coords, rope_tables
from ltx2.transformer import LTX2Transformer
from tests.ltx2 import test_strategies as ts
from tests.tolerances import EPS32


def _tables(heads: int = 4, half: int = 8) -> tuple[np.ndarray, RopeTables, RopeTables]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 12, heads * 2 * half)).astype(np.float32)
    angles = rng.uniform(-20, 20, size=(2, 12, heads, half)).astype(np.float32)
    tokens_major = RopeTables(jnp.cos(angles), jnp.sin(angles))
    heads_major = RopeTables(jnp.swapaxes(tokens_major.cos, 1, 2), jnp.swapaxes(tokens_major.sin, 1, 2))
    return x, tokens_major, heads_major


def test_op_by_op_the_forms_give_the_same_bits() -> None:
    x, tm, hm = _tables()
    with jax.disable_jit():
        concat = np.asarray(apply_rope(jnp.asarray(x), tm, "split", "concat"))
        fused = np.asarray(apply_rope(jnp.asarray(x), hm, "split", "fused"))
    assert np.array_equal(concat, fused)


def test_compiled_the_forms_differ_by_at_most_the_rotation_bound() -> None:
    x, tm, hm = _tables()
    concat = jax.jit(lambda v, t: apply_rope(v, t, "split", "concat"))(x, tm)
    fused = jax.jit(lambda v, t: apply_rope(v, t, "split", "fused"))(x, hm)
    assert float(jnp.abs(concat - fused).max()) <= 4.0 * EPS32 * float(np.abs(x).max())


def test_heads_major_tables_are_the_token_major_ones_transposed() -> None:
    coords = prepare_video_coords(1, 2, 4, 4)
    kw = dict(
        dim=64, max_positions=(20, 2048, 2048), theta=10000.0, double_precision=True, rope_type="split", num_heads=4
    )
    tm, hm = rope_tables(coords, **kw), rope_tables(coords, heads_major=True, **kw)
    assert tm.cos.shape == (1, 32, 4, 8) and hm.cos.shape == (1, 4, 32, 8)
    for a, b in ((tm.cos, hm.cos), (tm.sin, hm.sin)):
        assert np.array_equal(np.asarray(jnp.swapaxes(a, 1, 2)), np.asarray(b))
    cfg = TransformerConfig.tiny(rope_form="fused")
    rope = av_rope(cfg, coords, prepare_audio_coords(1, 8))
    assert rope.video.cos.shape == (1, 2, 32, 8)  # the tiny config's 2 heads


def test_config_and_apply_refuse_the_fused_form_of_interleaved_tables() -> None:
    with pytest.raises(ValueError, match=r"TransformerConfig.rope_form='fused': applies to rope_type 'split'"):
        TransformerConfig.tiny(rope_type="interleaved", rope_form="fused")
    with pytest.raises(ValueError, match="rope_form='sliced': must be one of"):
        TransformerConfig.tiny(rope_form="sliced")
    x, tm, _ = _tables()
    with pytest.raises(ValueError, match="applies to split tables"):
        apply_rope(jnp.asarray(x), tm, "interleaved", "fused")


def test_the_tiny_step_in_the_fused_form_gives_the_reference_numbers() -> None:
    """The replicated tiny denoising step (concat form, test_strategies' reference) against the same
    weights in the fused form, within the strategies' step tolerance."""
    cfg, grid = ts.PRESETS["tiny"](rope_form="fused"), ts.GRIDS["tiny"]
    weights, *reference = ts._reference_step("tiny")
    graphdef, state = ts._place(ts._build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights), "replicated", None)
    x, a = ts._compile_and_run(ts._denoise_step(graphdef, grid), state, ts._step_inputs(cfg, grid))
    errors = (ts._error(x, reference[0]), ts._error(a, reference[1]))
    print(f"tiny step, fused RoPE against concat: video {errors[0]:.2e}, audio {errors[1]:.2e}")
    assert max(errors) <= ts.TOL


def test_the_fused_form_widens_the_halves_after_slicing_them() -> None:
    """A bf16 input is sliced into its halves before any float32 widening: no convert takes the whole
    ``[B, T, N, 2, R]`` tensor (or its ``[B, T, D]`` original). Compiled for v7x, widening the whole
    tensor first made libtpu write it to HBM as float32 before the rotation (the 19B loop: 116.1 GB
    of traffic per step against 93.6 sliced first; ltx2.rope.apply_fused_split_rope)."""
    x, _, hm = _tables()
    jaxpr = jax.make_jaxpr(lambda v, t: apply_rope(v, t, "split", "fused"))(jnp.asarray(x, jnp.bfloat16), hm)
    widened = [
        e.invars[0].aval.shape
        for e in jaxpr.jaxpr.eqns
        if e.primitive.name == "convert_element_type" and e.invars[0].aval.dtype == jnp.bfloat16
    ]
    assert widened == [(2, 12, 4, 1, 8), (2, 12, 4, 1, 8)]  # the two halves, nothing whole
