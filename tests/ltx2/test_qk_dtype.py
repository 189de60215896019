"""``transformer.qk_dtype``: the dtype the attentions' Q/K norms return. "float32" keeps queries and keys
in float32 through RoPE into the score kernel (MaxDiffusion's LTX-2: ``nnx.RMSNorm(dtype=float32)``),
values and the output projection stay in the activation dtype."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.attention import Attention
from ltx2.config import TransformerConfig


def _attention(qk_float32: bool) -> Attention:
    return Attention(64, 64, 4, 16, param_dtype=jnp.bfloat16, qk_float32=qk_float32, rngs=nnx.Rngs(0))


def _x() -> jax.Array:
    return jax.random.normal(jax.random.key(1), (2, 24, 64), jnp.float32).astype(jnp.bfloat16)


def test_config_names_the_field_and_choices() -> None:
    with pytest.raises(ValueError, match=r"TransformerConfig.qk_dtype='bfloat16': must be one of"):
        TransformerConfig(qk_dtype="bfloat16")
    with pytest.raises(ValueError, match="qk_dtype='float32' with attention_impl='splash_input'"):
        Attention(64, 64, 4, 16, impl="splash_input", qk_float32=True, rngs=nnx.Rngs(0))


@pytest.mark.parametrize(("qk_float32", "operand"), [(False, "bf16"), (True, "f32")])
def test_the_score_dot_takes_the_chosen_dtype_and_the_output_stays_bf16(qk_float32: bool, operand: str) -> None:
    """The lowered program's first dot_general after the projections (q k^T) has operands of the chosen
    dtype; the score/value dot and every projection keep bf16 operands; the result is bf16."""
    attn = _attention(qk_float32)
    graphdef, state = nnx.split(attn)
    fn = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))
    text = fn.lower(state, _x()).as_text()
    dots = [line.split(":", 1)[1] for line in text.splitlines() if "stablehlo.dot_general" in line]
    operands = [d.split("->")[0] for d in dots]
    assert len(dots) == 6  # q, k, v projections, q k^T, p v, output projection
    assert sum(f"x{operand}>, tensor<" in o and o.count(operand) == 2 for o in operands) >= 1
    n_f32 = sum("xf32>, tensor<" in o and "bf16" not in o for o in operands)
    assert n_f32 == (1 if qk_float32 else 0)
    assert fn(state, _x()).dtype == jnp.bfloat16


def test_float32_keys_stay_within_bf16_smoke_bound_of_the_float32_model() -> None:
    """Same weights; both bf16 variants land within a bf16-sized relative error of the float32 forward
    (a smoke bound: 3 roundings of 2^-8 on O(1) values, not a parity tolerance)."""
    x = _x()
    graphdef32, _ = nnx.split(Attention(64, 64, 4, 16, param_dtype=jnp.float32, rngs=nnx.Rngs(0)))
    weights = jax.tree.map(lambda a: a.astype(jnp.float32), nnx.split(_attention(False))[1])
    ref = np.asarray(nnx.merge(graphdef32, weights)(x.astype(jnp.float32)), np.float64)
    for flag in (False, True):
        got = np.asarray(_attention(flag)(x), np.float64)
        assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < 3 * 2.0**-8
