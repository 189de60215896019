"""``transformer.token_chunks``: the video stream's per-token work after the self-attention's core
(its output projection, text cross-attention, a2v, FFN) on strided token chunks, so one chunk's
all-reduce can run under the other's matmuls. The chunks split and join back exactly; the sharded
tiny step with chunks gives the replicated numbers."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from harness.metrics.hlo import collective_stats, parse
from ltx2 import sharding
from ltx2.block import join_chunks, token_chunks
from ltx2.config import TransformerConfig
from tests.ltx2 import test_strategies as ts

OUT_FIXED = {"mlp_in": [], "mlp": ["tensor"], "qkv_in": [], "heads": ["tensor"], "mlp_out": [], "attn_out": []}


def test_chunks_split_and_join_back_exactly() -> None:
    x = jnp.arange(2 * 12 * 3, dtype=jnp.float32).reshape(2, 12, 3)
    parts = token_chunks(x, 3, 12)
    assert [p.shape for p in parts] == [(2, 4, 3)] * 3
    assert np.array_equal(np.asarray(parts[1][:, :, 0]), np.asarray(x[:, 1::3, 0]))  # tokens 1, 4, 7, 10
    assert np.array_equal(np.asarray(join_chunks(parts)), np.asarray(x))
    one = jnp.ones((2, 1, 3))  # a value shared by every token is every chunk's
    assert all(p is one for p in token_chunks(one, 3, 12))


def test_config_refuses_zero_chunks() -> None:
    with pytest.raises(ValueError, match=r"TransformerConfig.token_chunks=0: must be a positive integer"):
        TransformerConfig.tiny(token_chunks=0)


def test_chunks_that_do_not_divide_the_video_tokens_are_refused_by_name(mesh: Mesh) -> None:
    """3 chunks of the tiny step's 32 video tokens: the knob and the token count, before any reshape."""
    with pytest.raises(ValueError, match=r"transformer.token_chunks=3 does not divide the 32 video tokens"):
        ts.sharded_tiny_step("replicated", mesh, token_chunks=3)


@pytest.fixture(scope="module")
def mesh() -> Mesh:
    return sharding.build_mesh(ts.MESH)


def test_sharded_step_with_chunks_gives_the_replicated_numbers(mesh: Mesh) -> None:
    """The tiny step (32 video tokens over 4 sequence shards, 2 chunks) in the out-fixed layout."""
    strategy = sharding.register_overrides("naive", OUT_FIXED).name
    _, *reference = ts._reference_step("tiny")
    (x, a), hlo = ts.sharded_tiny_step(strategy, mesh, token_chunks=2)
    errors = (ts._error(x, reference[0]), ts._error(a, reference[1]))
    print(f"tiny step, 2 token chunks, sharded: video {errors[0]:.2e}, audio {errors[1]:.2e}")
    assert max(errors) <= ts.TOL
    # each chunk's output projections all-reduce on their own
    one = collective_stats(parse(ts.sharded_tiny_step(strategy, mesh)[1]))["all-reduce"]
    two = collective_stats(parse(hlo))["all-reduce"]
    assert two.count > one.count
