"""What libtpu gathers for MaxDiffusion's pre-#385 projections (issue 41): the weights, or the input?

One block's shapes on tpu7x:2x2x1, mesh data 2 x context 4 (their v7x-8 run): the tokens x [2, 6144, 4096]
split over (data, context); an AdaLN-style modulation in front (its 6*D output split over context with
``--mod-sharded``, as their ``(None, "embed")`` linear; replicated otherwise); a Q projection, the FFN in / out
and an output projection, whose model-width dim is split over context (``before``) or whole (``ffn``: the
FFN fixed, #385's first rung). Prints each all-gather's result shape, compiled with their async-collective
flags, for float32 or bfloat16 dot outputs. Compile-only (libtpu), seconds:

    JAX_PLATFORMS=cpu PYTHONPATH=. python benchmarks/projection_gathers.py {f32,bf16} {before,ffn} [--mod-sharded]
"""

from __future__ import annotations

import os
import re
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness import targets

L, D, F = 6144, 4096, 16384
FLAGS = {
    "xla_tpu_enable_async_collective_fusion": True,
    "xla_tpu_enable_async_collective_fusion_fuse_all_reduce": True,
    "xla_tpu_enable_async_collective_fusion_multiple_steps": True,
    "xla_tpu_overlap_compute_collective_tc": True,
    "xla_enable_async_all_reduce": True,
}


def main(out: str, rung: str, mod_sharded: bool) -> None:
    os.environ.update(targets.compile_env("tpu"))  # before libtpu starts (compile_devices)
    mesh = Mesh(np.array(targets.compile_devices("tpu", "tpu7x:2x2x1")).reshape(2, 4), ("data", "context"))

    def spec(shape: tuple[int, ...], *axes: str | None) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, P(*axes)))

    def lin(x: jax.Array, w: jax.Array, b: jax.Array) -> jax.Array:
        if out == "f32":
            return (jnp.matmul(x, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32)).astype(x.dtype)
        return jnp.matmul(x, w) + b

    def block(x, temb, wt, bt, wq, bq, w1, b1, w2, b2, wo, bo):  # type: ignore[no-untyped-def]
        x = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, P("data", "context", None)))
        mod = (jnp.matmul(temb, wt) + bt).reshape(2, 1, 6, D)
        x = x * (1 + mod[:, :, 1]) + mod[:, :, 0]
        h = jax.nn.gelu(lin(lin(x, wq, bq), w1, b1))
        return lin(lin(h, w2, b2), wo, bo)

    ffn = None if rung == "ffn" else "context"
    mod = "context" if mod_sharded else None
    args = [
        spec((2, L, D), "data", "context", None),
        spec((2, 1, D), "data", None, None),
        spec((D, 6 * D), None, mod),
        spec((6 * D,), mod),
        spec((D, D), "context", None),
        spec((D,), None),
        spec((D, F), ffn, None),
        spec((F,), None),
        spec((F, D), None, ffn),
        spec((D,), ffn),
        spec((D, D), None, "context"),
        spec((D,), "context"),
    ]
    text = jax.jit(block).lower(*args).compile(compiler_options=FLAGS).as_text()
    for m in re.finditer(r"= (\S+) all-gather(?:-start)?\(", text):
        print("all-gather", m.group(1))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--mod-sharded" in sys.argv[3:])
