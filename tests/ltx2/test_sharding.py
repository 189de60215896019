"""Meshes from specs, strategy tables, overrides: errors name the offending value."""

from __future__ import annotations

import jax
import pytest
from flax import nnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from ltx2 import sharding
from ltx2.layers import Linear, stack_layers


def test_mesh_fills_rest_and_uses_auto_axes() -> None:
    mesh = sharding.build_mesh({"data": 2, "context": -1})
    assert dict(mesh.shape) == {"data": 2, "context": 4}
    assert mesh.axis_types == (AxisType.Auto, AxisType.Auto)


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ({"data": 3, "context": -1}, "not divisible by the fixed axes' product 3"),
        ({"data": 2, "context": 2}, "multiply to 4, but 8 devices"),
        ({"model": 8}, r"unknown axis names \['model'\]"),
        ({"data": -1, "context": -1}, "only one axis may be -1"),
        ({"data": 0, "context": 8}, "must be positive or -1"),
    ],
)
def test_impossible_meshes_say_why(axes: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sharding.build_mesh(axes)


def test_registry_has_the_seed_strategies() -> None:
    assert {"replicated", "naive", "context", "trillium", "ironwood"} <= set(sharding.strategy_names())
    with pytest.raises(ValueError, match="unknown sharding strategy 'zigzag'"):
        sharding.get_strategy("zigzag")


def test_spec_drops_absent_axes_and_reuses_no_axis() -> None:
    naive = sharding.get_strategy("naive")
    assert naive.spec(("activation_batch", "activation_length", "embed"), ("data", "context")) == P(
        "data", "context", None
    )
    trillium = sharding.get_strategy("trillium")
    assert trillium.spec(("embed", "heads"), ("fsdp", "tensor")) == P("fsdp", "tensor")
    assert trillium.spec(("embed", "heads"), ("context",)) == P(None, None)


def test_overrides_are_validated() -> None:
    strat = sharding.with_overrides("context", {"mlp": None, "embed": ["fsdp"]})
    assert strat.mesh_axes("mlp") == () and strat.mesh_axes("embed") == ("fsdp",)
    with pytest.raises(ValueError, match="unknown logical axis 'embedding'"):
        sharding.with_overrides("context", {"embedding": ["fsdp"]})
    with pytest.raises(ValueError, match=r"unknown mesh axes \['model'\]"):
        sharding.with_overrides("context", {"embed": "model"})


def test_shard_module_places_stacked_params_by_logical_names() -> None:
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    model = stack_layers(lambda r: Linear(8, 16, axes=("embed", "heads"), rngs=r), 2, nnx.Rngs(0))
    sharding.shard_module(model, "trillium", mesh)
    assert model.kernel[...].sharding.spec == P(None, "fsdp", "tensor")
    assert model.bias[...].sharding.spec == P(None, "tensor")


def test_constrain_is_a_noop_without_mesh_and_applies_with_one() -> None:
    x = jax.numpy.ones((2, 8, 4))
    names = ("activation_batch", "activation_length", "activation_embed")
    assert sharding.constrain(x, names, "context") is x
    mesh = sharding.build_mesh({"data": 2, "context": 4})
    with jax.set_mesh(mesh):
        y = jax.jit(lambda a: sharding.constrain(a * 2, names, "context"))(x)
    assert y.sharding.spec == P("data", "context")
