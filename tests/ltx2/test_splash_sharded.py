"""The splash kernel under sharded layouts on 8 simulated devices (mesh fsdp=2 x context=2 x
tensor=2): which dims it splits inside its ``shard_map`` (the collectives and output layout of the
compiled program) and that each layout gives the unsharded numbers. Tolerance: FP32_KERNEL (one
kernel whose tiles reorder the softmax sums, as in test_attention)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.metrics.hlo import collective_stats, parse
from harness.vocabulary import Collective
from ltx2 import sharding
from ltx2.attention import dot_product_attention
from ltx2.splash_attention import splash_attention
from tests.tolerances import FP32_KERNEL

TOL = FP32_KERNEL
MESH = {"fsdp": 2, "context": 2, "tensor": 2}


@pytest.fixture(scope="module")
def mesh() -> Mesh:
    return sharding.build_mesh(MESH)


def _error(ours: jax.Array, ref: jax.Array) -> float:
    a, b = np.asarray(ours, np.float32), np.asarray(ref, np.float32)
    return float(np.abs(a - b).max() / max(1.0, np.abs(b).max()))


# (base strategy, rules over it, the mesh axes of the heads inside the kernel)
SPLASH_LAYOUTS = {
    "context": ("context", {}, ("tensor",)),
    "head-parallel": ("context", {"activation_attention_heads": ["context", "tensor"]}, ("context", "tensor")),
    # heads split only by the projections' rule (no activation rule): the kernel follows it
    "naive+heads": ("naive", {"heads": ["tensor"]}, ("tensor",)),
}


@pytest.mark.parametrize("layout", list(SPLASH_LAYOUTS))
def test_splash_keeps_the_queries_sequence_sharded(layout: str, mesh: Mesh) -> None:
    """Context parallelism in the kernel: under ``context`` (tokens over context x fsdp, heads over
    tensor) each shard attends its own queries to the gathered keys and values -- two all-gathers
    (K and V, each to the whole sequence of this shard's heads), no gather of Q. With the kernel's
    heads over context x tensor too (MaxDiffusion's layout) it runs head-parallel: the queries split
    over fsdp alone, K and V gathered over fsdp only. A layout that splits the projections' heads
    without an activation rule runs the kernel on those heads (each computed once). Every layout
    returns the output in the projections' layout (sequence-sharded, heads over tensor) and gives the
    unsharded numbers."""
    base, rules, head_axes = SPLASH_LAYOUTS[layout]
    strategy = sharding.register_overrides(base, rules).name
    B, L, N, K = 2, 512, 4, 64
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, (B, L, N, K), jnp.float32) for key in keys)
    placed = NamedSharding(mesh, P(None, ("context", "fsdp"), "tensor", None))
    with jax.set_mesh(mesh):
        run = jax.jit(functools.partial(splash_attention, strategy=strategy))
        args = [jax.device_put(t, placed) for t in (q, k, v)]
        compiled = run.lower(*args).compile()
        out = compiled(*args)
    gathers = collective_stats(parse(compiled.as_text())).by_kind[Collective.ALL_GATHER]
    head_shards = int(np.prod([MESH[a] for a in head_axes]))
    assert gathers.count == 2 and gathers.result_bytes == 2 * k.nbytes // head_shards
    # the output back in the projections' layout: tokens over context x fsdp, heads over tensor
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, P(None, ("context", "fsdp"), "tensor")), 4)
    assert _error(out, dot_product_attention(q, k, v, impl="xla")) <= TOL
