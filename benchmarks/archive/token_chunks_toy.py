"""Does libtpu overlap one token chunk's all-reduce with the other chunk's matmuls, or combine them?

Toy: x [2, 6144, 4096] bf16 on data 2 x context 2 x tensor 2, four FFN-like sub-layers (column- then
row-parallel matmul, the row-parallel one's bf16 partial sums all-reduced over tensor, residual),
whole (1 chunk) or on 2 strided token chunks as ``transformer.token_chunks`` does. Compiled for a
TPU topology without the hardware; prints the all-reduce count and bytes of the scheduled program and
the harness simulator's step. ``--async-flags``: the async-collective libtpu flags; ``--combine-below``:
libtpu's all-reduce combiner threshold in bytes (``xla_jf_crs_combiner_threshold_in_bytes``).

    JAX_PLATFORMS=cpu TPU_ACCELERATOR_TYPE=v6e-8 TPU_WORKER_HOSTNAMES=localhost ALLOW_MULTIPLE_LIBTPU_LOAD=1 \\
        PYTHONPATH=$PWD .nox/aot/bin/python benchmarks/archive/token_chunks_toy.py v6e:2x4 \\
        --async-flags --combine-below 10000000

Measured here (2026-11-27, libtpu 0.0.42.1, v6e:2x4): 2.848 ms whole; with 2 chunks 2.895 ms (the
combiner merges the chunks' all-reduces: 4 of them), 2.894 ms with the flags, 2.899 ms below the
threshold alone (8 all-reduces, still sync), 2.075 ms with both.
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from harness import targets
from harness.metrics import timeline
from harness.metrics.hlo import collective_stats, parse
from harness.run.predicted import device_coords
from ltx2 import sharding
from ltx2.layers import join_chunks, token_chunks

ASYNC_FLAGS = {
    "xla_enable_async_all_reduce": True,
    "xla_tpu_overlap_compute_collective_tc": True,
    "xla_tpu_enable_async_collective_fusion": True,
    "xla_tpu_enable_async_collective_fusion_fuse_all_reduce": True,
    "xla_tpu_enable_async_collective_fusion_multiple_steps": True,
}
D, F, L, LAYERS = 4096, 8192, 6144, 4


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("topology", nargs="?", default="v6e:2x4")
    p.add_argument("--async-flags", action="store_true")
    p.add_argument("--combine-below", type=int, default=0, help="all-reduce combiner threshold, bytes (0: libtpu's)")
    args = p.parse_args()
    mesh = sharding.build_mesh({"data": 2, "context": 2, "tensor": 2}, targets.compile_devices("tpu", args.topology))
    tokens, hidden = (
        NamedSharding(mesh, P("data", "context", None)),
        NamedSharding(mesh, P("data", "context", "tensor")),
    )

    def sub(h: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
        y = jax.lax.with_sharding_constraint(jax.nn.gelu(jnp.einsum("bld,df->blf", h, w1)), hidden)
        out = jnp.einsum("blf,fd->bld", y, w2, preferred_element_type=jnp.bfloat16)
        return jax.lax.with_sharding_constraint(h + out, tokens)

    def layers(x: jax.Array, ws: Any, chunks: int) -> jax.Array:
        parts = token_chunks(x, chunks, x.shape[1])
        for w1, w2 in ws:
            parts = [sub(part, w1, w2) for part in parts]
        return join_chunks(parts) if chunks > 1 else parts[0]

    w = (NamedSharding(mesh, P(None, "tensor")), NamedSharding(mesh, P("tensor", None)))
    args_ = (
        jax.ShapeDtypeStruct((2, L, D), jnp.bfloat16, sharding=tokens),
        [
            (
                jax.ShapeDtypeStruct((D, F), jnp.bfloat16, sharding=w[0]),
                jax.ShapeDtypeStruct((F, D), jnp.bfloat16, sharding=w[1]),
            )
        ]
        * LAYERS,
    )
    options: dict[str, Any] = dict(ASYNC_FLAGS) if args.async_flags else {}
    if args.combine_below:
        options["xla_jf_crs_combiner_threshold_in_bytes"] = args.combine_below
    spec = timeline.spec_for(args.topology, "tpu", device_coords(list(mesh.devices.flat)))
    for chunks in (1, 2):
        with jax.set_mesh(mesh):
            compiled = jax.jit(layers, static_argnums=2).lower(*args_, chunks).compile(compiler_options=options)
        module = parse(compiled.as_text())
        ar = collective_stats(module)["all-reduce"]
        step = timeline.predict(module, spec)
        mb, ms = ar.operand_bytes / 1e6, step.step_ns / 1e6
        print(f"chunks {chunks}: {ar.count} all-reduces ({mb:.0f} MB), predicted {ms:.3f} ms")


if __name__ == "__main__":
    main()
