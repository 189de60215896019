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


def test_vae_strategy_tables() -> None:
    """vae_replication as data: replicated weights + batch/frames activations, or sharded weights."""
    rep = sharding.vae_strategy("context", replicate=True)
    assert rep.name == "context+vae-replicated" and sharding.get_strategy(rep.name) is rep
    assert rep.mesh_axes("conv_in") == rep.mesh_axes("conv_out") == ()
    assert rep.mesh_axes("activation_batch") == ("data",)
    assert rep.mesh_axes("activation_frames") == ("fsdp", "context", "tensor")
    assert rep.mesh_axes("activation_length") == ("context", "fsdp")  # non-VAE rules kept
    shd = sharding.vae_strategy("context", replicate=False)
    assert (shd.mesh_axes("conv_out"), shd.mesh_axes("activation_channels")) == (("tensor",), ("tensor",))
    assert shd.mesh_axes("activation_frames") == ("context", "fsdp") and shd.mesh_axes("conv_in") == ()
    trillium = sharding.vae_strategy("trillium", replicate=False)
    assert trillium.mesh_axes("conv_in") == ("fsdp",) and trillium.mesh_axes("activation_frames") == ()
    assert sharding.vae_strategy("replicated", replicate=True).name == "replicated"
    assert sharding.vae_strategy("ironwood", replicate=False) is sharding.vae_strategy("ironwood", replicate=False)
    assert sharding.component_strategies("trillium", vae_replication=True) == {
        "transformer": "trillium",
        "connectors": "trillium",
        "text_encoder": "trillium",
        "video_vae": "trillium+vae-replicated",
        "audio_vae": "trillium+vae-replicated",
        "vocoder": "trillium+vae-replicated",
        "upsampler": "trillium+vae-replicated",
    }
    with pytest.raises(ValueError, match="'context' is already registered with other rules"):
        sharding.register(sharding.Strategy("context", {"mlp": ("tensor",)}))


def test_params_and_inputs_keep_only_dividing_axes() -> None:
    mesh = sharding.build_mesh({"fsdp": 2, "tensor": 4})
    conv = Linear(8, 2, axes=("conv_in", "conv_out"), rngs=nnx.Rngs(0))  # a stereo output: 2 channels
    sharding.shard_module(conv, sharding.vae_strategy("trillium", replicate=False), mesh)
    assert conv.kernel[...].sharding.spec == P("fsdp", None)
    names = ("activation_batch", "activation_frames")
    vae = sharding.vae_strategy("ironwood", replicate=True)
    assert sharding.input_sharding(names, vae, mesh, (2, 6)).spec == P(None, "fsdp")
    assert sharding.input_sharding(names, vae, mesh, (2, 8)).spec == P(None, ("fsdp", "tensor"))
