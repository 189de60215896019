"""``attention_impl = "splash_input"``: the self-attention's input all-gathered and each chunk's keys
and values projected where it arrives (ltx2/input_exchange.py), on 8 simulated devices (fsdp 2 x context 2 x
tensor 2; the "context" strategy puts the tokens over context x fsdp = 4 shards, heads over tensor).
It gives the replicated XLA attention's numbers and moves the input's bytes instead of the keys'
and values'. Tolerance: FP32_KERNEL (one splash kernel per chunk whose partial softmaxes merge by
log-sum-exp, as in test_splash_sharded; the RMS norm's sum of squares added across the two head
shards in another order)."""

from __future__ import annotations

from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.metrics.hlo import collective_stats, parse
from harness.vocabulary import Collective
from ltx2 import input_exchange, sharding
from ltx2.attention import Attention
from ltx2.config import TransformerConfig
from ltx2.input_exchange import ChunkTables, chunk_tables
from ltx2.rope import rope_tables
from ltx2.transformer import LTX2Transformer
from tests.ltx2 import test_strategies as ts
from tests.tolerances import FP32_KERNEL

MESH = {"fsdp": 2, "context": 2, "tensor": 2}
B, L, D, N, K = 2, 1024, 64, 4, 16  # 4 token shards of 256 (two 128-token tiles each)


@pytest.fixture(scope="module")
def mesh() -> Mesh:
    return sharding.build_mesh(MESH)


def _attention(impl: str, strategy: str, rope_form: str) -> Attention:
    return Attention(D, D, N, K, impl=impl, strategy=strategy, rope_form=rope_form, rngs=nnx.Rngs(3))


def _tables(rope_form: str):  # type: ignore[no-untyped-def]
    coords = np.stack(np.meshgrid(np.arange(4), np.arange(16), np.arange(16), indexing="ij")).reshape(1, 3, L)
    return rope_tables(
        coords.astype(np.float32),
        dim=D,
        max_positions=(4, 16, 16),
        theta=10000.0,
        double_precision=True,
        rope_type="split",
        num_heads=N,
        heads_major=rope_form == "fused",
    )


def _run(mesh: Mesh, impl: str, rope_form: str, x: jax.Array) -> tuple[jax.Array, str]:
    module = _attention(impl, "context", rope_form)
    module.to_k.bias[...] = jax.random.normal(jax.random.key(5), (N * K,)) * 0.1  # a bias that matters
    sharding.shard_module(module, "context", mesh)
    graphdef, state = nnx.split(module)
    x = jax.device_put(x, NamedSharding(mesh, P(None, ("context", "fsdp"), None)))

    def call(state, x, rope):  # type: ignore[no-untyped-def]
        return nnx.merge(graphdef, state)(x, q_rope=rope)

    # computed outside the program (as the transformer does, once per forward): no collectives here
    rope = _tables(rope_form)
    with jax.set_mesh(mesh):
        if impl == "splash_input":
            kw = dict(chunks=4, tokens=L, rope_type="split", rope_form=rope_form, strategy="context")
            rope = jax.jit(lambda r: chunk_tables(r, **kw))(rope)
        compiled = jax.jit(call).lower(state, x, rope).compile()
        return compiled(state, x, rope), compiled.as_text()


# (all-gathers, their result bytes, collective-permutes), bytes in units of one shard's piece of the
# input, [B, 256 tokens, D/2 features] float32 (each tensor shard sends half its features): one
# all-gather of every shard's piece over the 4 token shards, then each of the 3 other chunks' two
# halves gathered across tensor; nothing passed around.
PIECE = B * (L // 4) * (D // 2) * 4
EXPECTED = (1 + 3, 4 + 3 * 2, 0)


@pytest.mark.parametrize("rope_form", ["concat", "fused"])
def test_input_exchange_gives_the_replicated_numbers_and_moves_the_input(mesh: Mesh, rope_form: str) -> None:
    """Against the replicated XLA path with the same weights; the collectives move the input's
    pieces, never the keys and values (:data:`EXPECTED`). The RoPE tables make the chunk order
    matter: a chunk rotated by another chunk's rows fails the tolerance by far (0.18, seen)."""
    x = jax.random.normal(jax.random.key(1), (B, L, D), jnp.float32)
    reference = _attention("xla", "replicated", rope_form)
    reference.to_k.bias[...] = jax.random.normal(jax.random.key(5), (N * K,)) * 0.1
    expected = reference(x, q_rope=_tables(rope_form))
    out, hlo = _run(mesh, "splash_input", rope_form, x)
    error = ts._error(out, expected)
    print(f"splash_input ({rope_form} RoPE) against replicated: {error:.2e}")
    assert error <= FP32_KERNEL
    stats = collective_stats(parse(hlo)).by_kind
    gathers, permutes = stats[Collective.ALL_GATHER], stats[Collective.COLLECTIVE_PERMUTE]
    assert (gathers.count, gathers.result_bytes / PIECE, permutes.count) == EXPECTED


def test_chunk_tables_hold_each_chunks_rows_where_its_offset_says() -> None:
    """Entry j of the chunk tables is the table rolled by j chunks of L/4 tokens: token t of entry j
    is token (t + j L/4) mod L of the table (no mesh: the rolls alone)."""
    mesh = sharding.build_mesh(MESH)
    rope = _tables("concat")
    with jax.set_mesh(mesh):
        kw = dict(chunks=4, tokens=L, rope_type="split", rope_form="concat", strategy="context")
        per = chunk_tables(rope, **kw)
    assert isinstance(per, ChunkTables) and len(per.cos) == 4 and per.cos[1].shape == rope.cos.shape
    for j in range(4):
        assert np.array_equal(np.asarray(per.at(j).sin), np.roll(np.asarray(rope.sin), -j * (L // 4), axis=1))


def test_the_ring_of_keys_and_values_moves_more(mesh: Mesh) -> None:
    """The same attention with "splash_ring": K and V (this shard's N/2 heads, the head dim padded to
    the kernel's 128 lanes) passed on 3 times each: 6 permutes of 4x the input ring's piece here."""
    x = jax.random.normal(jax.random.key(1), (B, L, D), jnp.float32)
    _, hlo = _run(mesh, "splash_ring", "concat", x)
    permutes = collective_stats(parse(hlo)).by_kind[Collective.COLLECTIVE_PERMUTE]
    assert permutes.count == 6 and permutes.result_bytes == 6 * B * (N // 2) * (L // 4) * 128 * 4


def test_the_transformer_step_with_the_input_exchange_gives_the_replicated_numbers(mesh: Mesh) -> None:
    """The tiny denoising step at 2x16x16 latents (512 video tokens: 4 token shards of one 128-token
    tile) under "context", the video self-attention on "splash_input" (the others below its
    min_tokens on XLA's path): the replicated step's numbers (tolerance: test_strategies' step TOL),
    with the exchange traced for the video self-attention, its tables rolled once by the transformer."""
    grid = dict(batch=2, frames=2, height=16, width=16, audio=8, text=16)
    ref_cfg = TransformerConfig.tiny()
    graphdef, weights = ts._place(ts._build(lambda: LTX2Transformer(ref_cfg, rngs=nnx.Rngs(0))), "replicated", None)
    host = ts._step_inputs(ref_cfg, grid)
    expected = ts._compile_and_run(ts._denoise_step(graphdef, grid), weights, host)
    cfg = TransformerConfig.tiny(sharding="context", attention_impl="splash_input", attention_impl_min_tokens=512)
    graphdef, state = ts._place(ts._build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights), "context", mesh)
    place = lambda k, v: jax.device_put(v, sharding.input_sharding(ts._INPUT_AXES[k], "context", mesh))  # noqa: E731
    inputs = {k: place(k, v) for k, v in host.items()}
    attend = input_exchange.input_exchange_attention
    with (
        mock.patch.object(input_exchange, "chunk_tables", wraps=input_exchange.chunk_tables) as tables,
        mock.patch.object(input_exchange, "input_exchange_attention", wraps=attend) as spy,
        jax.set_mesh(mesh),
    ):
        (x, a), _ = ts._compiled_and_run(ts._denoise_step(graphdef, grid), state, inputs)
    errors = (ts._error(x, expected[0]), ts._error(a, expected[1]))
    print(f"tiny step, 512 video tokens, splash_input under context: video {errors[0]:.2e}, audio {errors[1]:.2e}")
    assert max(errors) <= ts.TOL
    assert spy.call_count >= 1  # the video self-attention exchanged its input
    assert tables.call_count == 1  # its tables rolled once, by the transformer


def test_chunk_count_says_where_the_exchange_runs(mesh: Mesh) -> None:
    """4 chunks for the test's self-attention under "context" (1024 tokens over 4 token shards, two
    128-token tiles each); 0 for another impl, fewer tokens than min_tokens, a mask, chunks that are
    not whole tiles (32 tokens), a strategy that does not split the tokens, or no mesh."""
    kw = dict(batch=B, heads=N, tokens=L)
    assert input_exchange.chunk_count("splash_input", "context", **kw) == 0  # no mesh
    with jax.set_mesh(mesh):
        assert input_exchange.chunk_count("splash_input", "context", **kw) == 4
        assert input_exchange.chunk_count("splash", "context", **kw) == 0
        assert input_exchange.chunk_count("splash_input", "context", **kw, min_tokens=2 * L) == 0
        assert input_exchange.chunk_count("splash_input", "context", **kw, bias=jnp.zeros((1, 1, 1, L))) == 0
        assert input_exchange.chunk_count("splash_input", "context", batch=B, heads=N, tokens=32) == 0
        assert input_exchange.chunk_count("splash_input", "replicated", **kw) == 0
