"""``transformer.linear_partials``: where the blocks' projections round their products.

"float32" (the default) sums, adds the bias and rounds once, as diffusers does; "activation" has
the dot return the 16-bit activation dtype, so a contraction sharded over devices all-reduces
16-bit partial sums (half the bytes), and the bias adds after in float32."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from harness import targets
from ltx2.config import TransformerConfig
from ltx2.layers import Linear

REPO = Path(__file__).resolve().parents[2]
BF16_MANTISSA = 8  # bits of precision of bfloat16 (7 stored + the implicit one)


def _linear(partials: str, dtype: jnp.dtype = jnp.bfloat16, bias: bool = True) -> Linear:
    lin = Linear(96, 48, axes=(None, None), dtype=dtype, partials=partials, use_bias=bias, rngs=nnx.Rngs(0))
    if bias:  # a non-zero bias, so the add after the rounding is exercised
        lin.bias[...] = jax.random.normal(jax.random.key(1), (48,), dtype)
    return lin


def _x(dtype: jnp.dtype) -> jax.Array:
    return jax.random.normal(jax.random.key(2), (16, 96), jnp.float32).astype(dtype)


def _ulp_bf16(v: np.ndarray) -> np.ndarray:
    """The spacing of bfloat16 numbers at |v| (normal range)."""
    exponent = np.floor(np.log2(np.maximum(np.abs(v), 2.0**-126)))
    return 2.0 ** (exponent - (BF16_MANTISSA - 1))


def test_config_names_the_field_and_choices() -> None:
    with pytest.raises(ValueError, match=r"TransformerConfig.linear_partials='bf16': must be one of"):
        TransformerConfig(linear_partials="bf16")
    with pytest.raises(ValueError, match="Linear partials must be one of"):
        Linear(4, 4, axes=(None, None), partials="half", rngs=nnx.Rngs(0))


def test_no_effect_in_float32() -> None:
    x = _x(jnp.float32)
    assert np.array_equal(
        np.asarray(_linear("float32", jnp.float32)(x)), np.asarray(_linear("activation", jnp.float32)(x))
    )


@pytest.mark.parametrize("bias", [True, False])
def test_bfloat16_differs_from_one_rounding_by_at_most_the_extra_rounding(bias: bool) -> None:
    """The exact product p (float64 of the bf16 inputs), then: default y = rnd(p + b); activation
    y' = rnd(rnd(p) + b). |rnd(p) - p| <= ulp(p)/2 (one extra rounding), and each final rounding adds
    at most ulp(y)/2, so |y' - y| <= ulp(p)/2 + ulp(y); the float32 sum of 96 products adds < 96 EPS32
    relative to |x||w|, far below a bfloat16 ulp."""
    x = _x(jnp.bfloat16)
    one, two = _linear("float32", bias=bias), _linear("activation", bias=bias)
    y1, y2 = (np.asarray(m(x), np.float64) for m in (one, two))
    p = np.asarray(x, np.float64) @ np.asarray(one.kernel[...], np.float64)
    bound = _ulp_bf16(p) / 2 + _ulp_bf16(np.maximum(np.abs(y1), np.abs(y2)))
    assert np.all(np.abs(y2 - y1) <= bound)
    assert y2.dtype == y1.dtype and two(x).dtype == jnp.bfloat16


@pytest.mark.parametrize(("partials", "product"), [("float32", "f32"), ("activation", "bf16")])
def test_the_dot_returns_the_rounded_dtype(partials: str, product: str) -> None:
    """What XLA is handed: the dot's own result type (the sharded partitioner all-reduces that)."""
    lin = _linear(partials)
    graphdef, state = nnx.split(lin)
    text = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x)).lower(state, _x(jnp.bfloat16)).as_text()
    dots = [line for line in text.splitlines() if "dot_general" in line]
    assert len(dots) == 1 and dots[0].rstrip().endswith(f"tensor<16x48x{product}>")


TPU_SCRIPT = """
import jax, jax.numpy as jnp
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from harness import targets
from ltx2.layers import Linear

mesh = Mesh(targets.compile_devices("tpu", "v6e:2x4")[:2], ("tensor",))
for partials in ("float32", "activation"):
    lin = Linear(256, 128, axes=("mlp", None), dtype=jnp.bfloat16, partials=partials, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(lin)
    spec = lambda a: NamedSharding(mesh, P("tensor", None) if a.ndim == 2 else P())
    shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=spec(a)), state)
    x = jax.ShapeDtypeStruct((64, 256), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "tensor")))
    text = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x)).lower(shapes, x).compile().as_text()
    reduces = [l.split("=", 1)[1].split()[0] for l in text.splitlines() if " all-reduce" in l and "(" in l]
    print(partials, ",".join(sorted({r.split("[")[0] for r in reduces})))
"""


@pytest.mark.aot
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs the [tpu-aot] extra (libtpu): nox -s aot")
def test_tpu_all_reduces_the_partials_in_the_rounded_dtype() -> None:
    """Compiled for two v6e TensorCores with the contraction split between them: one all-reduce,
    of float32 partial sums by default and of bfloat16 ones with "activation"."""
    env = {**os.environ, **targets.compile_env("tpu"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", TPU_SCRIPT], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split() for line in done.stdout.splitlines() if line.startswith(("float32", "activation")))
    assert lines == {"float32": "f32", "activation": "bf16"}
