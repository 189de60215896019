"""Attribution of a compiled program's work to model scopes, and the rule behind each collective.

A two-matmul feed-forward under named scopes, compiled for 8 simulated CPU devices with the
first weight sharded (fsdp, tensor) and the second (tensor, -): per device, ``proj_in`` gathers its
weight over fsdp and ``proj_out`` all-reduces partial sums over tensor; FLOPs, bytes and causes
are checked exactly. Hand-written HLO covers what XLA leaves without metadata."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.metrics.compiled.attribution import (
    UNATTRIBUTED,
    coverage,
    instruction_scopes,
    static_by_scope,
    time_by_scope,
)
from harness.metrics.compiled.collective_cause import ParamLayout, ShardingFacts, explain, spanned_axes
from harness.metrics.hlo import parse
from harness.metrics.hlo.replica_groups import device_groups
from ltx2 import scopes

MESH = (("fsdp", 2), ("context", 2), ("tensor", 2))
FACTS = ShardingFacts(
    "test",
    MESH,
    (
        ParamLayout("ff.proj_in.kernel", (32, 128), ("embed", "mlp"), (("fsdp",), ("tensor",))),
        ParamLayout("ff.proj_out.kernel", (128, 32), ("mlp", "embed"), (("tensor",), ())),
    ),
    {"activation_length": ("context",)},
    scopes.attributes(),
)


def feed_forward(x, w, w2):  # type: ignore[no-untyped-def]
    with scopes.scope("ff"):
        with scopes.scope("proj_in"):
            h = jnp.tanh(x @ w)
        with scopes.scope("proj_out"):
            return h @ w2


@pytest.fixture(scope="module")
def hlo_text() -> str:
    mesh = jax.make_mesh((2, 2, 2), ("fsdp", "context", "tensor"), axis_types=(AxisType.Auto,) * 3)

    def sds(shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))

    def f(x, w, w2):  # type: ignore[no-untyped-def]
        return jax.lax.with_sharding_constraint(feed_forward(x, w, w2), NamedSharding(mesh, P(None, "context")))

    args = (sds((4, 64, 32), P(None, "context")), sds((32, 128), P("fsdp", "tensor")), sds((128, 32), P("tensor")))
    return jax.jit(f).lower(*args).compile().as_text()


def test_flops_bytes_and_collectives_by_scope(hlo_text: str) -> None:
    out = static_by_scope(parse(hlo_text), scopes.scope_path, FACTS)
    by = out["by_scope"]
    # per device: x [4, 32, 32] (context-split tokens) @ w [32, 64] (gathered over fsdp, tensor-split columns)
    assert by["ff/proj_in"]["flops"] == 2 * 4 * 32 * 32 * 64
    assert by["ff/proj_out"]["flops"] == 2 * 4 * 32 * 64 * 32  # h [4, 32, 64] @ w2 [64, 32]
    assert by["ff/proj_in"]["collectives"] == {"all-gather": {"count": 1, "bytes": 16 * 64 * 4}}
    assert by["ff/proj_out"]["collectives"] == {"all-reduce": {"count": 1, "bytes": 4 * 32 * 32 * 4}}
    assert out["coverage"] == {
        "flops": 1.0,
        "bytes": pytest.approx(1.0),
        "collective_bytes": 1.0,
        "inferred": {"flops": 0.0, "bytes": 0.0, "collective_bytes": 0.0},  # every op here names its scope
    }
    causes = {(s["scope"], s["kind"]): s for s in out["collective_sites"]}
    gather = causes[("ff/proj_in", "all-gather")]
    assert gather["axes"] == ["fsdp"] and gather["logical"] == "embed"
    assert gather["cause"] == (
        "weights `embed` sharded over `fsdp` (rule embed -> fsdp), gathered whole for the op "
        "(shape match: ff.proj_in.kernel)"
    )
    reduce = causes[("ff/proj_out", "all-reduce")]
    assert reduce["axes"] == ["tensor"] and reduce["logical"] == "mlp"
    assert "contract `mlp`, sharded over `tensor` (rule mlp -> tensor)" in reduce["cause"]


def test_source_lines_point_at_the_traced_code(hlo_text: str) -> None:
    names = instruction_scopes(parse(hlo_text), scopes.scope_path)
    lines, first = inspect.getsourcelines(feed_forward)
    matmul = first + next(i for i, line in enumerate(lines) if "x @ w" in line)
    dots = [n for n, s in names.scope.items() if s == "ff/proj_in" and n in names.source and "fusion" in n]
    assert dots and all(names.source[n].endswith(f"test_attribution.py:{matmul} (feed_forward)") for n in dots)


def test_loop_bodies_count_per_trip() -> None:
    def f(x, w):  # type: ignore[no-untyped-def]
        def body(c, wl):  # type: ignore[no-untyped-def]
            with scopes.scope("block"):
                return jnp.tanh(c @ wl), None

        return jax.lax.scan(body, x, w)[0]

    hlo = jax.jit(f).lower(jnp.ones((8, 16)), jnp.ones((3, 16, 16))).compile().as_text()
    assert static_by_scope(parse(hlo), scopes.scope_path)["by_scope"]["block"]["flops"] == 3 * 2 * 8 * 16 * 16
    module = parse(hlo)
    assert max(c.runs for c in module.computations.values()) == 3  # the loop body runs 3 times per call


HAND_WRITTEN = """HloModule jit_g, is_scheduled=true

%fused (p0: f32[4,8], p1: f32[8,8]) -> f32[4,8] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %p1 = f32[8,8]{1,0} parameter(1)
  ROOT %dot.9 = f32[4,8]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[4,8], w: f32[8,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %w = f32[8,8]{1,0} parameter(1)
  %copy.1 = f32[8,8]{1,0} copy(%w)
  %fusion.2 = f32[4,8]{1,0} fusion(%x, %copy.1), kind=kOutput, calls=%fused
  ROOT %tanh.3 = f32[4,8]{1,0} tanh(%fusion.2), metadata={op_name="jit(g)/block/ff/tanh"}
}
"""


def test_ops_without_metadata_take_their_neighbours_scope() -> None:
    """XLA's own ops (a copy, a fusion without metadata, the dot inside it) take their users' scope."""
    names = instruction_scopes(parse(HAND_WRITTEN), scopes.scope_path)
    assert names.of("tanh.3") == names.of("fusion.2") == names.of("copy.1") == names.of("dot.9") == "block/ff"
    assert names.of("x") == UNATTRIBUTED
    out = static_by_scope(parse(HAND_WRITTEN), scopes.scope_path)
    assert out["by_scope"]["block/ff"]["flops"] == 2 * 4 * 8 * 8
    # every byte has a scope, but only tanh.3's (256 of 1280: the copy's 512 and the fusion's 512
    # are its users') is its own; the dot's FLOPs are all its fusion's
    assert out["coverage"] == {
        "flops": 1.0,
        "bytes": 1.0,
        "collective_bytes": None,
        "inferred": {"flops": 1.0, "bytes": 1024 / 1280, "collective_bytes": None},
    }
    assert names.inferred == {"copy.1", "fusion.2", "dot.9", "p0", "p1"}  # the fused ones: their fusion's


def test_time_by_scope_and_coverage() -> None:
    names = instruction_scopes(parse(HAND_WRITTEN), scopes.scope_path)
    spans = [("fusion.2", 6.0), ("tanh.3", 2.0), ("x", 1.0), ("not-in-module", 1.0)]
    by = time_by_scope(spans, names)
    assert by == {"block/ff": 8.0, UNATTRIBUTED: 2.0}
    assert coverage(by) == pytest.approx(0.8) and coverage({}) is None
    assert time_by_scope([("tanh.3", 3.0)], {"tanh.3": "block"}) == {"block": 3.0}  # a plain table works too


@pytest.mark.parametrize(
    ("attributes", "expected", "axes"),
    [
        ("replica_groups={{0,4},{1,5},{2,6},{3,7}}, dimensions={0}", [[0, 4], [1, 5], [2, 6], [3, 7]], ("fsdp",)),
        ("replica_groups=[4,2]<=[8], use_global_device_ids=true", [[0, 1], [2, 3], [4, 5], [6, 7]], ("tensor",)),
        ("replica_groups=[2,4]<=[2,2,2]T(1,0,2)", [[0, 1, 4, 5], [2, 3, 6, 7]], ("fsdp", "tensor")),
        (
            "replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=2,'axis_3'=2], device_ids=([2,2,2]T(0,2,1)) "
            "{'axis_2'}, use_global_device_ids=true",
            [[0, 1], [2, 3], [4, 5], [6, 7]],
            ("tensor",),
        ),
        # v6e 19B trillium step: the mesh form without device_ids (devices in mesh order)
        (
            "replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, dimensions={1}",
            [[0, 4], [1, 5], [2, 6], [3, 7]],
            ("fsdp",),
        ),
        ("source_target_pairs={{0,0},{2,4},{4,2}}", [[0, 0], [2, 4], [4, 2]], ("fsdp", "context")),
        ("replica_groups={}, to_apply=%add", [[]], ("fsdp", "context", "tensor")),
    ],
)
def test_device_groups_and_the_mesh_axes_they_span(attributes: str, expected: list, axes: tuple) -> None:
    got = device_groups(attributes)
    assert got is not None and sorted(map(sorted, got)) == sorted(map(sorted, expected))
    assert spanned_axes(got, MESH) == axes


REDUCE_SCATTER_FUSION = """HloModule jit_rs, is_scheduled=true

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}

%all-reduce-scatter.1 (input: f32[64,32]) -> f32[32,32] {
  %input = f32[64,32]{1,0} parameter(0)
  %all-reduce.3 = f32[64,32]{1,0} all-reduce(%input), channel_id=1, replica_groups=[4,2]<=[8], to_apply=%add
  %c0 = s32[] constant(0)
  ROOT %ds = f32[32,32]{1,0} dynamic-slice(%all-reduce.3, %c0, %c0), dynamic_slice_sizes={32,32}
}

ENTRY %main (h: f32[64,128], w: f32[128,32]) -> f32[32,32] {
  %h = f32[64,128]{1,0} parameter(0)
  %w = f32[128,32]{1,0} parameter(1)
  %dot.1 = f32[64,32]{1,0} dot(%h, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}, metadata={op_name="jit(rs)/ff/proj_out/dot_general"}
  ROOT %fusion.5 = f32[32,32]{1,0} fusion(%dot.1), kind=kCustom, calls=%all-reduce-scatter.1, metadata={op_name="jit(rs)/ff/proj_out/dot_general"}
}
"""  # noqa: E501 (HLO instructions are single lines)


def test_a_tpu_reduce_scatter_fusion_gets_its_cause_from_the_all_reduce_it_calls() -> None:
    """TPU writes a reduce-scatter as a fusion calling %all-reduce-scatter*; the device groups
    ([4,2]<=[8]: pairs of neighbours, the mesh's last axis, tensor) are on the all-reduce inside."""
    (site,) = static_by_scope(parse(REDUCE_SCATTER_FUSION), scopes.scope_path, FACTS)["collective_sites"]
    assert (site["scope"], site["kind"], site["axes"]) == ("ff/proj_out", "reduce-scatter", ["tensor"])
    assert "mesh unknown" not in site["cause"] and "tensor" in site["cause"], site["cause"]


def test_a_gathered_layer_slice_of_stacked_weights_is_named_as_weights() -> None:
    """In a scan over stacked layers TPU gathers ``[1, embed/fsdp, mlp/tensor]`` slices of one layer
    (the v6e 19B trillium step's ff/proj_in all-gather): matched to the stacked parameter's shard."""
    facts = ShardingFacts(
        "trillium",
        (("fsdp", 2), ("tensor", 4)),
        (
            ParamLayout(
                "transformer_blocks.ff.proj_in.kernel.value",
                (48, 64, 256),
                ("layers", "embed", "mlp"),
                ((), ("fsdp",), ("tensor",)),
            ),
        ),
        {"activation_batch": ("fsdp",)},
        scopes.attributes(),
    )
    (instr,) = parse(GATHERED_SLICE).computations["main"][1:]
    cause = explain(instr, "all-gather", {"slice.1": "bf16[1,32,64]"}, facts, "transformer/block/ff/proj_in")
    assert cause.logical == "embed" and cause.text.startswith("weights `embed` sharded over `fsdp`"), cause.text


GATHERED_SLICE = """HloModule jit_s, is_scheduled=true

ENTRY %main (slice.1: bf16[1,32,64]) -> bf16[1,64,64] {
  %slice.1 = bf16[1,32,64]{2,1,0} parameter(0)
  ROOT %all-gather.2 = bf16[1,64,64]{2,1,0} all-gather(%slice.1), channel_id=1, replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, dimensions={1}, use_global_device_ids=true
}
"""  # noqa: E501 (HLO instructions are single lines)
