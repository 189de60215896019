"""Layout candidates of the search: normalisation to the mesh, and each reason to prune one before
compiling, on the ``tiny`` transformer (2 heads of 16, 32 wide) and its 64x64x17 workload."""

from __future__ import annotations

import functools

import pytest

from harness.plan.search_space import SearchSpace
from harness.search.analytic import Hardware
from harness.search.facts import ModelFacts, model_facts
from harness.search.space import (
    AXIS_TWICE,
    MESH_SIZE,
    NOT_DIVISIBLE,
    SAME,
    STRATEGY,
    Candidate,
    enumerate_space,
    layout_key,
    neighbours,
    normalise,
    prune_reason,
)
from harness.search.strategy import SearchResult, candidates
from ltx2 import PipelineConfig, Workload

MESH = (("data", 2), ("context", 2), ("tensor", 2))
HW = Hardware(peak_flops=1e11, link_bytes_per_s=1e10, hbm_bytes=None, hbm_bytes_per_s=2e10)


@functools.cache
def tiny_facts(base: str = "replicated") -> ModelFacts:
    wl = Workload(height=64, width=64, num_frames=17, frame_rate=24.0, batch=2, steps=2, text_tokens=16)
    return model_facts(PipelineConfig.preset("tiny"), wl, base)


def _c(mesh: tuple[tuple[str, int], ...] = MESH, attention: str = "xla", **rules: list[str]) -> Candidate:
    return normalise(mesh, attention, [(k, tuple(v)) for k, v in rules.items()])


def test_tiny_facts_list_the_layers_kernels_and_the_block_activations() -> None:
    facts = tiny_facts()
    assert facts.num_layers == 2 and facts.batch == 2 and facts.inner_dim == 32
    assert ("layers", "qkv_in", "heads") in {p.names for p in facts.params}
    heads = [a for a in facts.arrays if a.names[:2] == ("activation_batch", "activation_heads")]
    assert sorted(a.shape[1] for a in heads) == [2, 2]  # video and audio: 2 heads each
    assert facts.forward_flops > 0


def test_a_rule_naming_an_axis_the_mesh_lacks_is_cut_to_the_axes_it_has() -> None:
    c = _c((("fsdp", 2), ("tensor", 4)), activation_length=["context", "fsdp"], heads=["tensor"])
    assert dict(c.rules) == {"activation_length": ("fsdp",), "heads": ("tensor",)}


def test_points_that_normalise_alike_are_one_candidate() -> None:
    space = SearchSpace(rules=(("activation_length", (("context",), ())),), meshes=(MESH, (("data", 8),)))
    names = [c.name for c in enumerate_space(space)]
    assert names == [
        "data2xcontext2xtensor2/xla/activation_length=context",
        "data2xcontext2xtensor2/xla/activation_length=-",
        "data8/xla/activation_length=-",
    ]


def test_neighbours_change_one_rule_the_mesh_or_the_kernel() -> None:
    space = SearchSpace(
        rules=(("heads", (("tensor",), ())), ("mlp", (("tensor",), ()))),
        meshes=(MESH, (("tensor", 8),)),
        attention=("xla", "splash"),
    )
    c = _c(heads=["tensor"], mlp=["tensor"])
    got = {n.name for n in neighbours(c, space)}
    assert got == {
        "data2xcontext2xtensor2/xla/heads=-,mlp=tensor",
        "data2xcontext2xtensor2/xla/heads=tensor,mlp=-",
        "tensor8/xla/heads=tensor,mlp=tensor",
        "data2xcontext2xtensor2/splash/heads=tensor,mlp=tensor",
    }


def test_a_good_layout_is_kept() -> None:
    assert prune_reason(tiny_facts(), _c(activation_batch=["data"], heads=["tensor"], mlp=["tensor"]), 8) is None


def test_a_mesh_that_does_not_span_the_devices_is_pruned() -> None:
    reason = prune_reason(tiny_facts(), _c((("data", 2), ("tensor", 2)), heads=["tensor"]), 8)
    assert reason is not None and reason.kind == MESH_SIZE and "spans 4 devices, the target has 8" in reason.detail


def test_the_convolution_rule_prunes() -> None:
    reason = prune_reason(tiny_facts(), _c(conv_in=["tensor"], activation_frames=["context"]), 8)
    assert reason is not None and reason.kind == STRATEGY and "cannot both be sharded" in reason.detail


def test_one_mesh_axis_on_two_dims_of_an_array_is_pruned() -> None:
    reason = prune_reason(tiny_facts(), _c(activation_batch=["data"], activation_embed=["data"]), 8)
    assert reason is not None and reason.kind == AXIS_TWICE
    assert "activation_batch" in reason.detail and "activation_embed" in reason.detail


@pytest.mark.parametrize(
    ("rules", "what"),
    [
        ({"activation_heads": ["context", "tensor"]}, "activation_heads (2) does not divide over context x tensor (4)"),
        ({"activation_batch": ["data", "context"]}, "activation_batch (2) does not divide over data x context (4)"),
    ],
)
def test_a_dim_that_does_not_divide_over_its_axes_is_pruned(rules: dict[str, list[str]], what: str) -> None:
    reason = prune_reason(tiny_facts(), _c(attention="splash", **rules), 8)
    assert reason is not None and reason.kind == NOT_DIVISIBLE and what in reason.detail


def test_heads_activations_are_laid_out_only_by_the_splash_kernel() -> None:
    c = _c(activation_heads=["context", "tensor"])
    assert prune_reason(tiny_facts(), c, 8) is None  # xla attention never constrains them


def test_rules_the_step_does_not_use_give_the_same_layout() -> None:
    facts = tiny_facts()
    base = _c(heads=["tensor"], kv=[], activation_heads=[])
    unused = _c(heads=["tensor"], kv=["tensor"], activation_heads=["tensor"])
    assert layout_key(facts, base) == layout_key(facts, unused)
    assert layout_key(facts, base) != layout_key(facts, _c(heads=[], kv=[], activation_heads=[]))
    splash = _c(attention="splash", heads=["tensor"], kv=[], activation_heads=[])
    assert layout_key(facts, splash) != layout_key(
        facts, _c(attention="splash", heads=["tensor"], kv=[], activation_heads=["tensor"])
    )


def test_every_splash_impl_lays_out_the_kernels_heads() -> None:
    """The ring and input-exchange impls run the splash kernel: its heads rule matters to them as to
    "splash" (two layouts), and not to XLA's path (one)."""
    facts = tiny_facts()
    for attention, layouts in (("splash_input", 2), ("splash_ring", 2), ("xla", 1)):
        keys = {
            layout_key(facts, _c(attention=attention, heads=["tensor"], kv=[], activation_heads=h))
            for h in ([], ["tensor"])
        }
        assert len(keys) == layouts, attention


def test_the_search_compiles_one_layout_once() -> None:
    space = SearchSpace(rules=(("heads", (("tensor",), ())), ("kv", (("tensor",), ()))), meshes=(MESH,))
    result = SearchResult()
    kept = candidates(space, tiny_facts(), 8, HW, result)
    assert [c.name for c in kept] == [
        "data2xcontext2xtensor2/xla/heads=tensor,kv=tensor",
        "data2xcontext2xtensor2/xla/heads=-,kv=tensor",
    ]
    assert {k: len(v) for k, v in result.pruned.items()} == {SAME: 2}


def test_candidate_overrides_spell_every_searched_rule_the_mesh_and_the_kernel() -> None:
    c = _c(heads=["tensor"], mlp_in=[])
    assert c.overrides("naive") == {
        "transformer.sharding": "naive",
        "sharding.rules.heads": ["tensor"],
        "sharding.rules.mlp_in": [],
        "target.mesh": dict(MESH),
        "transformer.attention_impl": "xla",
    }
