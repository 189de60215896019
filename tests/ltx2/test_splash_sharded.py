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


def _compiled(strategy: str, mesh: Mesh, *arrays: jax.Array, **kwargs):  # type: ignore[no-untyped-def]
    """(compiled splash under ``strategy``, its output) for sequence-sharded q, k, v (+ bias)."""
    placed = NamedSharding(mesh, P(None, ("context", "fsdp"), "tensor", None))
    with jax.set_mesh(mesh):
        run = jax.jit(functools.partial(splash_attention, strategy=strategy, **kwargs))
        args = [jax.device_put(t, placed) for t in arrays[:3]] + list(arrays[3:])
        compiled = run.lower(*args).compile()
        return compiled, compiled(*args)


def test_ring_passes_key_chunks_around_instead_of_gathering(mesh: Mesh) -> None:
    """``kv="ring"`` under ``context`` (4 sequence shards over context x fsdp, heads over tensor):
    no all-gather; K and V each passed on 3 times (one chunk per step: 6 collective-permutes of a
    chunk of L/4 tokens of this shard's N/2 heads, the head dim padded to 128 lanes); the output
    in the projections' layout and the unsharded numbers."""
    B, L, N, K = 2, 1024, 4, 64
    q, k, v = (jax.random.normal(key, (B, L, N, K), jnp.float32) for key in jax.random.split(jax.random.key(1), 3))
    compiled, out = _compiled("context", mesh, q, k, v, kv="ring")
    stats = collective_stats(parse(compiled.as_text())).by_kind
    assert stats[Collective.ALL_GATHER].count == 0
    permutes = stats[Collective.COLLECTIVE_PERMUTE]
    chunk = B * (N // 2) * (L // 4) * 128 * 4
    assert permutes.count == 6 and permutes.result_bytes == 6 * chunk
    assert out.sharding.is_equivalent_to(NamedSharding(mesh, P(None, ("context", "fsdp"), "tensor")), 4)
    assert _error(out, dot_product_attention(q, k, v, impl="xla")) <= TOL
    # through the attention entry point: the "splash_ring" impl is this exchange
    with jax.set_mesh(mesh):
        entry = jax.jit(functools.partial(dot_product_attention, impl="splash_ring", strategy="context"))
        assert _error(entry(q, k, v), out) <= TOL


def test_ring_gathers_keys_it_cannot_split_into_whole_chunks(mesh: Mesh) -> None:
    """Masked keys (a key-padding bias) or keys that do not split into 128-token chunks per shard
    are gathered as with ``kv="gather"``: two all-gathers, no collective-permute, same numbers."""
    B, L, N, K = 2, 512, 4, 64
    q, k, v = (jax.random.normal(key, (B, L, N, K), jnp.float32) for key in jax.random.split(jax.random.key(2), 3))
    bias = jnp.where(jnp.arange(L) < L - 100, 0.0, -10000.0).reshape(1, 1, 1, L)
    for extra, ref_bias in (((bias,), bias), ((), None)):
        short = k[:, :384] if not extra else k  # 384 keys: not 4 x 128-token chunks
        vs = v[:, : short.shape[1]]
        compiled, out = _compiled("context", mesh, q, short, vs, *extra, kv="ring")
        stats = collective_stats(parse(compiled.as_text())).by_kind
        assert stats[Collective.ALL_GATHER].count == 2 and stats[Collective.COLLECTIVE_PERMUTE].count == 0
        assert _error(out, dot_product_attention(q, short, vs, ref_bias, impl="xla")) <= TOL


def test_unknown_kv_exchange_is_refused() -> None:
    x = jnp.zeros((1, 128, 1, 64))
    with pytest.raises(ValueError, match="kv must be one of"):
        splash_attention(x, x, x, kv="broadcast")
