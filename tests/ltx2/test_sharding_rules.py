"""Logical names for the contracted dims of the FFN input and Q/K/V kernels (``mlp_in``, ``qkv_in``),
the output dims of the FFN and attention output kernels (``mlp_out``, ``attn_out``), and strategies
derived by overriding rules: a strategy that does not name the new axes places those kernels
exactly as ``embed``; a derived strategy is registered under a name spelling its rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from ltx2 import sharding
from ltx2.components import vae_configs
from ltx2.config import TransformerConfig
from ltx2.pipeline_config import PipelineConfig
from ltx2.text.connectors import LTX2TextConnectors
from ltx2.text.gemma import GEMMA_WEIGHT_AXES
from ltx2.transformer import LTX2Transformer

MESH = {"fsdp": 2, "context": 2, "tensor": 2}
NEW_AXES = ("mlp_in", "qkv_in", "mlp_out", "attn_out")


def _params(module: nnx.Module) -> list[tuple[str, tuple[int, ...], sharding.LogicalAxes]]:
    return [
        (".".join(map(str, path)), tuple(var.shape), sharding.logical_axes(var))
        for path, var in nnx.iter_graph(module)
        if isinstance(var, nnx.Variable)
    ]


def _as_embed(names: sharding.LogicalAxes) -> sharding.LogicalAxes:
    return tuple("embed" if n in NEW_AXES else n for n in names)


@pytest.fixture(scope="module")
def small_params() -> list[tuple[str, tuple[int, ...], sharding.LogicalAxes]]:
    transformer = nnx.eval_shape(lambda: LTX2Transformer(TransformerConfig.small(), rngs=nnx.Rngs(0)))
    connectors = nnx.eval_shape(lambda: LTX2TextConnectors(PipelineConfig.small().connectors, rngs=nnx.Rngs(0)))
    return _params(transformer) + [(f"connectors.{p}", s, n) for p, s, n in _params(connectors)]


def test_the_kernels_carry_the_new_names(small_params: list[Any]) -> None:
    by_path = {p: n for p, _, n in small_params}
    assert by_path["transformer_blocks.ff.proj_in.kernel"] == ("layers", "mlp_in", "mlp")
    assert by_path["transformer_blocks.audio_ff.proj_in.kernel"] == ("layers", "mlp_in", "mlp")
    for attn in ("attn1", "attn2", "audio_attn1", "audio_attn2", "audio_to_video_attn", "video_to_audio_attn"):
        for proj in ("to_q", "to_k", "to_v"):
            assert by_path[f"transformer_blocks.{attn}.{proj}.kernel"] == ("layers", "qkv_in", "heads"), (attn, proj)
        assert by_path[f"transformer_blocks.{attn}.to_out.kernel"] == ("layers", "heads", "attn_out")
    assert by_path["transformer_blocks.ff.proj_out.kernel"] == ("layers", "mlp", "mlp_out")
    assert by_path["connectors.audio_connector.transformer_blocks.ff.proj_out.kernel"] == ("layers", "mlp", "mlp_out")
    assert by_path["connectors.audio_connector.transformer_blocks.attn1.to_out.kernel"] == (
        "layers",
        "heads",
        "attn_out",
    )
    assert by_path["connectors.video_connector.transformer_blocks.ff.proj_in.kernel"] == ("layers", "mlp_in", "mlp")
    gemma = dict(GEMMA_WEIGHT_AXES)
    assert gemma["self_attn.q_proj.weight"] == ("heads", "qkv_in") and gemma["mlp.up_proj.weight"] == ("mlp", "mlp_in")
    assert gemma["self_attn.o_proj.weight"] == ("attn_out", "heads") and gemma["mlp.down_proj.weight"] == (
        "mlp_out",
        "mlp",
    )


@pytest.mark.parametrize("strategy", sharding.strategy_names())
def test_a_strategy_without_the_new_names_places_them_as_embed(strategy: str, small_params: list[Any]) -> None:
    """Every parameter of the ``small`` transformer and connectors gets the PartitionSpec it had when its
    kernels were named ``embed``: the strategies written before the names compile to the same program."""
    strat = sharding.get_strategy(strategy)
    assert not set(NEW_AXES) & set(strat.rules)
    renamed = 0
    for path, shape, names in small_params:
        ours = strat.spec(names, tuple(MESH), shape=shape, mesh_shape=MESH)
        before = strat.spec(_as_embed(names), tuple(MESH), shape=shape, mesh_shape=MESH)
        assert ours == before, (strategy, path, ours, before)
        renamed += names != _as_embed(names)
    # FFN: in kernel, out kernel + bias; attention: Q/K/V kernels, out kernel + bias. The transformer
    # has 2 FFNs and 6 attentions, each of the 2 connectors one of each.
    ffn, attention = 1 + 2, 3 + 2
    assert renamed == 2 * ffn + 6 * attention + 2 * (ffn + attention)


def test_naive_places_the_contracted_dims_over_the_sequence_axes() -> None:
    naive = sharding.get_strategy("naive")
    assert all(naive.mesh_axes(name) == ("context", "fsdp") for name in (*NEW_AXES, "embed"))


def test_derived_strategy_name_spells_the_rules_and_is_registered_once() -> None:
    ffn = sharding.register_overrides("naive", {"mlp_in": []})
    assert ffn.name == "naive+mlp_in=-" and sharding.get_strategy("naive+mlp_in=-") is ffn
    assert ffn.mesh_axes("mlp_in") == () and ffn.mesh_axes("qkv_in") == ("context", "fsdp")  # still falls back
    assert ffn.mesh_axes("embed") == ("context", "fsdp")
    both = sharding.register_overrides("naive", {"qkv_in": None, "mlp_in": ()})  # order and spelling of "none"
    assert both.name == "naive+mlp_in=-+qkv_in=-" and both.mesh_axes("qkv_in") == ()
    assert sharding.register_overrides("naive", {"mlp_in": []}) is ffn
    assert sharding.with_overrides("trillium", {"qkv_in": "fsdp"}).name == "trillium+qkv_in=fsdp"
    assert sharding.overrides_name("context", {"embed": ["fsdp", "context"]}) == "context+embed=fsdp,context"
    assert sharding.register_overrides("naive", {}) is sharding.get_strategy("naive")
    assert "naive+mlp_in=-" not in sharding.strategy_names()  # derived: listed under their base only
    assert "naive" in sharding.strategy_names()
    spec = ffn.spec(("layers", "mlp_in", "mlp"), tuple(MESH), shape=(4, 64, 256), mesh_shape=MESH)
    assert spec == P(None, None, None)
    assert sharding.get_strategy("naive").spec(("layers", "mlp_in", "mlp"), tuple(MESH)) == P(
        None, ("context", "fsdp"), None
    )


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"mlp_inn": []}, "unknown logical axis 'mlp_inn'"),
        ({"mlp_in": ["model"]}, r"unknown mesh axes \['model'\]"),
        ({"mlp_in": ["fsdp", "fsdp"]}, "repeats a mesh axis"),
        ({"mlp_in": [3]}, "expected a mesh axis name or a list of them"),
    ],
)
def test_bad_rules_are_errors_naming_them(rules: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        sharding.register_overrides("naive", rules)


def test_pipeline_config_rules_reach_every_component_of_the_strategy() -> None:
    base = PipelineConfig.tiny()
    cfg = base.replace(
        transformer=dataclasses.replace(base.transformer, sharding="naive"),
        connectors=dataclasses.replace(base.connectors, sharding="naive"),
    )
    assert cfg.with_sharding_rules({}) is cfg
    ruled = cfg.with_sharding_rules({"mlp_in": [], "qkv_in": []})
    assert ruled.transformer.sharding == ruled.connectors.sharding == "naive+mlp_in=-+qkv_in=-"
    assert ruled.text_encoder.sharding == "replicated"  # named another strategy: left as it was
    assert vae_configs(ruled).video_vae.sharding == "naive+mlp_in=-+qkv_in=-+vae-replicated"
    assert ruled.replace(transformer=cfg.transformer, connectors=cfg.connectors) == cfg


def test_a_kernel_is_named_by_the_rule_that_places_it() -> None:
    """What a collective's cause quotes: ``mlp_in`` under a strategy that leaves it to ``embed`` is the
    ``embed`` rule; once overridden it is its own."""
    trillium = sharding.get_strategy("trillium")
    assert trillium.rule_name("mlp_in") == trillium.rule_name("qkv_in") == "embed"
    assert trillium.rule_name("mlp") == "mlp" and trillium.rule_name("activation_length") == "activation_length"
    own = sharding.register_overrides("trillium", {"mlp_in": []})
    assert own.rule_name("mlp_in") == "mlp_in" and own.rule_name("qkv_in") == "embed"
