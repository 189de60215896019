"""Sequence parallelism through ``activation_residual_length``: the residual stream's tokens over
the axis the heads and the FFN hidden dim are on too (fsdp=2 x context=2 x tensor=2, 8 CPU devices).
The denoising step gives the replicated numbers; the output projections stop all-reducing whole
activations; a strategy without the rule compiles the block as before (no new constraint)."""

from __future__ import annotations

import pytest
from jax.sharding import Mesh

from harness.metrics.hlo import collective_stats, parse
from ltx2 import sharding
from tests.ltx2 import test_strategies as ts

# The ladder's last layout on this mesh (heads / mlp over tensor, every kernel whole on its model
# width), then the same with the residual stream's tokens over the sequence axes and tensor.
OUT_FIXED = {"mlp_in": [], "mlp": ["tensor"], "qkv_in": [], "heads": ["tensor"], "mlp_out": [], "attn_out": []}
SEQUENCE_PARALLEL = {**OUT_FIXED, "activation_residual_length": ["context", "fsdp", "tensor"]}


@pytest.fixture(scope="module")
def mesh() -> Mesh:
    return sharding.build_mesh(ts.MESH)


def _names() -> tuple[str, str]:
    return tuple(sharding.register_overrides("naive", o).name for o in (OUT_FIXED, SEQUENCE_PARALLEL))  # type: ignore[return-value]


def test_sequence_parallel_step_equals_replicated(mesh: Mesh) -> None:
    """The tiny step (video tokens 32 over 8 shards, audio 8) within the strategies' tolerance."""
    _, parallel = _names()
    _, *reference = ts._reference_step("tiny")
    (x, a), _ = ts.sharded_tiny_step(parallel, mesh)
    assert max(ts._error(x, reference[0]), ts._error(a, reference[1])) <= ts.TOL


def test_block_all_reduces_fewer_bytes(mesh: Mesh) -> None:
    """One ``small`` block: with the residual stream split over tensor too, the sub-layer outputs
    arrive reduce-scattered (XLA:CPU has no reduce-scatter: fewer and smaller all-reduces, and
    all-gathers of the token shards before the next projections)."""
    out_fixed, parallel = _names()
    before, after = (collective_stats(parse(ts._block_hlo("small", s, mesh))) for s in (out_fixed, parallel))
    assert after["all-reduce"].operand_bytes < before["all-reduce"].operand_bytes
    assert after["all-reduce"].count < before["all-reduce"].count
    assert after["all-gather"].count > before["all-gather"].count


def test_the_rule_is_the_only_switch() -> None:
    """Without a rule of its own the residual tokens fall back to every activation's."""
    for name in ("naive", "context", "trillium", "ironwood"):
        strategy = sharding.get_strategy(name)
        assert strategy.mesh_axes("activation_residual_length") == strategy.mesh_axes("activation_length")
    _, parallel = _names()
    assert sharding.get_strategy(parallel).mesh_axes("activation_residual_length") == ("context", "fsdp", "tensor")
    assert sharding.get_strategy(parallel).mesh_axes("activation_length") == ("context", "fsdp")
