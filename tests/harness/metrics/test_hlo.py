"""Collective counting on hand-written HLO: sync, async, while loops (CPU/GPU and TPU style)."""

from __future__ import annotations

import pytest

from harness.metrics.hlo import (
    KINDS,
    CollectiveCount,
    collective_instructions,
    collective_stats,
    matmul_flops,
    parse,
    shape_bytes,
)
from harness.metrics.hlo.parse import NoEntryError

ADD = """
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}
"""

SYNC = (
    "HloModule sync, entry_computation_layout={(f32[8,32]{1,0}, bf16[16]{0})->f32[64,32]{1,0}}\n"
    + ADD
    + """
ENTRY %main (p: f32[8,32], q: bf16[16]) -> (f32[64,32], bf16[2]) {
  %p = f32[8,32]{1,0} parameter(0)
  %q = bf16[16]{0} parameter(1)
  %ag = f32[64,32]{1,0} all-gather(%p), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}
  %ar = bf16[16]{0} all-reduce(%q), channel_id=2, replica_groups=[1,8]<=[8], to_apply=%add
  %rs = bf16[2]{0} reduce-scatter(%ar), channel_id=3, replica_groups=[1,8]<=[8], dimensions={0}, to_apply=%add
  %cp = f32[8,32]{1,0} collective-permute(%p), channel_id=4, source_target_pairs={{0,1},{1,0}}
  %a2a = f32[8,32]{1,0} all-to-all(%p), channel_id=5, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  ROOT %t = (f32[64,32]{1,0}, bf16[2]{0}) tuple(%ag, %rs)
}
"""
)

ASYNC = (
    "HloModule async\n"
    + ADD
    + """
%async_a2a (x: f32[4,16]) -> f32[4,16] {
  %x = f32[4,16]{1,0} parameter(0)
  ROOT %a2a = f32[4,16]{1,0} all-to-all(%x), replica_groups={{0,1}}, dimensions={0}
}

ENTRY %main (p: f32[4,16]) -> f32[32,16] {
  %p = f32[4,16]{1,0} parameter(0)
  %ags = (f32[4,16]{1,0}, f32[32,16]{1,0}) all-gather-start(%p), channel_id=1, dimensions={0}
  %agd = f32[32,16]{1,0} all-gather-done(%ags)
  %ars = f32[4,16]{1,0} all-reduce-start(%p), channel_id=2, to_apply=%add
  %ard = f32[4,16]{1,0} all-reduce-done(%ars)
  %cps = (f32[4,16]{1,0}, f32[4,16]{1,0}, u32[], u32[]) collective-permute-start(%p), source_target_pairs={{0,1}}
  %cpd = f32[4,16]{1,0} collective-permute-done(%cps)
  %a2as = ((f32[4,16]{1,0}), f32[4,16]{1,0}, s32[]) async-start(%p), calls=%async_a2a
  %a2ad = f32[4,16]{1,0} async-done(%a2as), calls=%async_a2a
  ROOT %out = f32[32,16]{1,0} copy(%agd)
}
"""
)

# CPU/GPU style: the while carries known_trip_count; the condition compares inside a fusion.
KNOWN_TRIP = (
    "HloModule known_trip\n"
    + ADD
    + """
%body (param: (s32[], f32[8,32])) -> (s32[], f32[8,32]) {
  %param = (s32[], f32[8,32]{1,0}) parameter(0)
  %i = s32[] get-tuple-element(%param), index=0
  %x = f32[8,32]{1,0} get-tuple-element(%param), index=1
  %ag = f32[64,32]{1,0} all-gather(%x), channel_id=1, dimensions={0}
  %ar = f32[8,32]{1,0} all-reduce(%x), channel_id=2, to_apply=%add
  ROOT %t = (s32[], f32[8,32]{1,0}) tuple(%i, %ar)
}

%cmp (c0: s32[], c1: s32[]) -> pred[] {
  %c0 = s32[] parameter(0)
  %c1 = s32[] parameter(1)
  ROOT %lt = pred[] compare(%c0, %c1), direction=LT
}

%cond (param.1: (s32[], f32[8,32])) -> pred[] {
  %param.1 = (s32[], f32[8,32]{1,0}) parameter(0)
  %limit = s32[] constant(99)
  %i.1 = s32[] get-tuple-element(%param.1), index=0
  ROOT %f = pred[] fusion(%i.1, %limit), kind=kLoop, calls=%cmp
}

ENTRY %main (p: f32[8,32]) -> f32[8,32] {
  %p = f32[8,32]{1,0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[8,32]{1,0}) tuple(%zero, %p)
  %w = (s32[], f32[8,32]{1,0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"12"}}
  %after = f32[8,32]{1,0} all-reduce(%p), channel_id=3, to_apply=%add
  ROOT %r = f32[8,32]{1,0} get-tuple-element(%w), index=1
}
"""
)

# TPU style: no known_trip_count, `i < 7` in the condition, reduce-scatter as a fusion calling
# %all-reduce-scatter*, tiled layouts and /*index=N*/ comments in operand lists.
TPU = """HloModule tpu

%add.clone (x.1: bf16[], y.1: bf16[]) -> bf16[] {
  %x.1 = bf16[]{:T(256)} parameter(0)
  %y.1 = bf16[]{:T(256)} parameter(1)
  ROOT %add.2 = bf16[]{:T(256)} add(%x.1, %y.1)
}

%all-reduce-scatter.2.clone (input_0: bf16[512,256]) -> bf16[64,256] {
  %input_0 = bf16[512,256]{1,0:T(8,128)(2,1)} parameter(0)
  %all-reduce.14 = bf16[512,256]{1,0:T(8,128)(2,1)} all-reduce(%input_0), channel_id=1, to_apply=%add.clone
  %c0 = s32[]{:T(128)} constant(0)
  ROOT %ds = bf16[64,256]{1,0:T(8,128)(2,1)} dynamic-slice(%all-reduce.14, %c0, %c0), dynamic_slice_sizes={64,256}
}

%body.tpu (wide.param: (s32[], bf16[512,256], bf16[64,256])) -> (s32[], bf16[512,256], bf16[64,256]) {
  %wide.param = (s32[]{:T(128)}, bf16[512,256]{1,0:T(8,128)(2,1)}, bf16[64,256]{1,0:T(8,128)(2,1)}) parameter(0)
  %gte.0 = s32[]{:T(128)} get-tuple-element(%wide.param), index=0
  %gte.1 = bf16[512,256]{1,0:T(8,128)(2,1)} get-tuple-element(%wide.param), index=1
  %fusion.65 = bf16[64,256]{1,0:T(8,128)(2,1)S(1)} fusion(%gte.1), kind=kCustom, calls=%all-reduce-scatter.2.clone
  ROOT %tuple = (s32[], bf16[512,256], /*index=2*/bf16[64,256]) tuple(%gte.0, %gte.1, /*index=2*/%fusion.65)
}

%cond.tpu (wide.param.1: (s32[], bf16[512,256], bf16[64,256])) -> pred[] {
  %constant.110 = s32[]{:T(128)} constant(7)
  %wide.param.1 = (s32[]{:T(128)}, bf16[512,256]{1,0:T(8,128)(2,1)}, bf16[64,256]{1,0:T(8,128)(2,1)}) parameter(0)
  %gte.2 = s32[]{:T(128)} get-tuple-element(%wide.param.1), index=0
  ROOT %lt.10 = pred[]{:T(512)} compare(%gte.2, %constant.110), direction=LT
}

ENTRY %main.tpu (p0: bf16[512,256]) -> bf16[64,256] {
  %p0 = bf16[512,256]{1,0:T(8,128)(2,1)} parameter(0)
  %z = s32[]{:T(128)} constant(0)
  %buf = bf16[64,256]{1,0:T(8,128)(2,1)} broadcast(%z), dimensions={}
  %init = (s32[]{:T(128)}, bf16[512,256]{1,0:T(8,128)(2,1)}, bf16[64,256]{1,0:T(8,128)(2,1)}) tuple(%z, %p0, %buf)
  %while.42 = (s32[], bf16[512,256], bf16[64,256]) while(%init), condition=%cond.tpu, body=%body.tpu
  ROOT %out = bf16[64,256]{1,0:T(8,128)(2,1)} get-tuple-element(%while.42), index=2
}
"""


def _nested(inner_condition: str) -> str:
    """Outer loop (known trip 3) around an inner loop whose condition is given."""
    trip_count_3 = 'backend_config={"known_trip_count":{"n":"3"}}'
    return (
        "HloModule nested\n"
        + ADD
        + f"""
%inner_body (ib: (s32[], f32[16])) -> (s32[], f32[16]) {{
  %ib = (s32[], f32[16]{{0}}) parameter(0)
  %ii = s32[] get-tuple-element(%ib), index=0
  %iv = f32[16]{{0}} get-tuple-element(%ib), index=1
  %cp = f32[16]{{0}} collective-permute(%iv), source_target_pairs={{{{0,1}},{{1,0}}}}
  ROOT %it = (s32[], f32[16]{{0}}) tuple(%ii, %cp)
}}

%inner_cond (ic: (s32[], f32[16])) -> pred[] {{
  %ic = (s32[], f32[16]{{0}}) parameter(0)
  %icnt = s32[] get-tuple-element(%ic), index=0
  %ilim = s32[] constant(4)
  %other = s32[] get-tuple-element(%ic), index=0
{inner_condition}
}}

%outer_body (ob: (s32[], f32[16])) -> (s32[], f32[16]) {{
  %ob = (s32[], f32[16]{{0}}) parameter(0)
  %inner = (s32[], f32[16]{{0}}) while(%ob), condition=%inner_cond, body=%inner_body
  %ov = f32[16]{{0}} get-tuple-element(%inner), index=1
  %oar = f32[16]{{0}} all-reduce(%ov), to_apply=%add
  %oi = s32[] get-tuple-element(%inner), index=0
  ROOT %ot = (s32[], f32[16]{{0}}) tuple(%oi, %oar)
}}

%outer_cond (oc: (s32[], f32[16])) -> pred[] {{
  %oc = (s32[], f32[16]{{0}}) parameter(0)
  ROOT %ocmp = pred[] constant(true)
}}

ENTRY %main (p: f32[16]) -> f32[16] {{
  %p = f32[16]{{0}} parameter(0)
  %z = s32[] constant(0)
  %init = (s32[], f32[16]{{0}}) tuple(%z, %p)
  %outer = (s32[], f32[16]) while(%init), condition=%outer_cond, body=%outer_body, {trip_count_3}
  ROOT %r = f32[16]{{0}} get-tuple-element(%outer), index=1
}}
"""
    )


def _zero_except(stats, present: dict[str, CollectiveCount]) -> None:
    for kind in KINDS:
        assert stats[kind] == present.get(kind, CollectiveCount()), kind


def test_shape_bytes() -> None:
    assert shape_bytes("f32[8,32]{1,0}") == 1024
    assert shape_bytes("(f32[2,3]{1,0}, bf16[4])") == 32
    assert shape_bytes("pred[]") == 1
    assert shape_bytes("s4[3]") == 2  # packed: 12 bits -> 2 bytes
    assert shape_bytes("f32[<=8]") == 32
    assert shape_bytes("bf16[4,128]{1,0:T(8,128)(2,1)S(1)}") == 1024
    assert shape_bytes("f8e4m3fn[10]") == 10
    assert shape_bytes("token[]") == 0


def test_sync_collectives() -> None:
    stats = collective_stats(parse(SYNC))
    _zero_except(
        stats,
        {
            "all-gather": CollectiveCount(1, 1024, 8192),
            "all-reduce": CollectiveCount(1, 32, 32),
            "reduce-scatter": CollectiveCount(1, 32, 4),
            "collective-permute": CollectiveCount(1, 1024, 1024),
            "all-to-all": CollectiveCount(1, 1024, 1024),
        },
    )
    assert stats.total_count == 5
    assert stats.unknown_trip_count_loops == ()


def test_async_pairs_count_once() -> None:
    stats = collective_stats(parse(ASYNC))
    _zero_except(
        stats,
        {
            "all-gather": CollectiveCount(1, 256, 2048),
            "all-reduce": CollectiveCount(1, 256, 256),
            "collective-permute": CollectiveCount(1, 256, 256),
            "all-to-all": CollectiveCount(1, 256, 256),
        },
    )


def test_known_trip_count_multiplies_body() -> None:
    stats = collective_stats(parse(KNOWN_TRIP))
    _zero_except(
        stats,
        {
            "all-gather": CollectiveCount(12, 12 * 1024, 12 * 8192),
            "all-reduce": CollectiveCount(13, 13 * 1024, 13 * 1024),
        },
    )


def test_tpu_condition_and_reduce_scatter_fusion() -> None:
    stats = collective_stats(parse(TPU))
    per_iteration = CollectiveCount(1, 512 * 256 * 2, 64 * 256 * 2)
    _zero_except(stats, {"reduce-scatter": per_iteration * 7})
    assert stats.unknown_trip_count_loops == ()


@pytest.mark.parametrize(
    ("condition", "inner_trips"),
    [
        ("  ROOT %c = pred[] compare(%icnt, %ilim), direction=LT", 4),
        ("  ROOT %c = pred[] compare(%icnt, %ilim), direction=LE", 5),
        ("  ROOT %c = pred[] compare(%ilim, %icnt), direction=GT", 4),
    ],
)
def test_nested_while_multiplies_trip_counts(condition: str, inner_trips: int) -> None:
    stats = collective_stats(parse(_nested(condition)))
    _zero_except(
        stats,
        {
            "collective-permute": CollectiveCount(1, 64, 64) * (3 * inner_trips),
            "all-reduce": CollectiveCount(3, 3 * 64, 3 * 64),
        },
    )
    assert stats.unknown_trip_count_loops == ()


def test_unknown_trip_count_counts_once_and_is_flagged() -> None:
    stats = collective_stats(parse(_nested("  ROOT %c = pred[] compare(%icnt, %other), direction=LT")))
    assert stats["collective-permute"] == CollectiveCount(3, 3 * 64, 3 * 64)
    assert stats.unknown_trip_count_loops == ("inner",)


def test_every_kind_is_listed() -> None:
    stats = collective_stats(parse(SYNC))
    assert list(stats.by_kind) == list(KINDS)
    assert stats["all-gather"] == CollectiveCount(1, 1024, 8192)
    assert stats.unknown_trip_count_loops == ()


def test_collective_instructions_names_fused_reduce_scatter() -> None:
    assert collective_instructions(parse(TPU)) == {"all-reduce.14": "all-reduce", "fusion.65": "reduce-scatter"}
    assert collective_instructions(parse(ASYNC))["ags"] == "all-gather"


def test_text_without_entry_is_an_error() -> None:
    """A text with no ENTRY (empty, cut, or a form the reader does not know) is not a module: an
    error naming what was read, not an empty module that prices and counts nothing."""
    for text in ("", "HloModule m\n", "HloModule m\n\n%f (p: f32[]) -> f32[] {\n  ROOT %p = f32[] parameter(0)\n}\n"):
        with pytest.raises(NoEntryError, match="no ENTRY computation"):
            parse(text)


# jaxlib prints a module two ways: HloModule.to_string() with computation signatures and ``%``
# names, XlaComputation.as_hlo_text() without either (``ENTRY main.10_spmd {``). Both are one module.
_SIGNED = """HloModule jit__psum, is_scheduled=true

%region_0.3.clone (Arg_0.0: f32[], Arg_1.0: f32[]) -> f32[] {
  %Arg_1.0 = f32[]{:T(128)} parameter(1)
  %Arg_0.0 = f32[]{:T(128)} parameter(0)
  ROOT %add.0 = f32[]{:T(128)} add(%Arg_0.0, %Arg_1.0)
}

ENTRY %main.10_spmd (param: f32[1,5,1024,1024,256]) -> f32[5,1024,1024,256] {
  %param = f32[1,5,1024,1024,256]{4,3,2,1,0:T(8,128)} parameter(0)
  %bitcast = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} bitcast(%param)
  ROOT %all-reduce = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} all-reduce(%bitcast), channel_id=1, replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, to_apply=%region_0.3.clone
}
"""  # noqa: E501 (HLO instructions are single lines)
_BARE = """HloModule jit__psum, is_scheduled=true

region_0.3.clone {
  Arg_1.0 = f32[]{:T(128)} parameter(1)
  Arg_0.0 = f32[]{:T(128)} parameter(0)
  ROOT add.0 = f32[]{:T(128)} add(Arg_0.0, Arg_1.0)
}

ENTRY main.10_spmd {
  param = f32[1,5,1024,1024,256]{4,3,2,1,0:T(8,128)} parameter(0)
  bitcast = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} bitcast(param)
  ROOT all-reduce = f32[5,1024,1024,256]{3,2,1,0:T(8,128)} all-reduce(bitcast), channel_id=1, replica_groups=[4,2]<=[2,4]T(1,0), use_global_device_ids=true, to_apply=region_0.3.clone
}
"""  # noqa: E501 (HLO instructions are single lines)


def test_both_forms_jaxlib_prints_are_one_module() -> None:
    signed, bare = parse(_SIGNED), parse(_BARE)
    for module in (signed, bare):
        assert module.entry == "main.10_spmd" and list(module.computations) == ["region_0.3.clone", "main.10_spmd"]
        main = module.computations["main.10_spmd"]
        reduce = next((i for i in main.instructions if i.name == main.root), None)
        assert reduce is not None and reduce.collective == "all-reduce" and reduce.callees == ("region_0.3.clone",)
        assert reduce.groups == ((0, 4), (1, 5), (2, 6), (3, 7)) and reduce.operand_bytes == 5 * 1024 * 1024 * 256 * 4

    def derived(module):  # what the analyses read (the attribute text keeps its ``%``)
        return [
            (
                c.name,
                c.root,
                c.runs,
                c.running,
                [(i.name, i.opcode, i.operands, i.callees, i.groups, i.traffic) for i in c],
            )
            for c in module.computations.values()
        ]

    assert derived(signed) == derived(bare)


# A Mosaic custom call as XLA:TPU prints it: its kernel metadata JSON sits on lines of its own,
# starting at column 0, and the instructions after it belong to the same computation.
MOSAIC = """HloModule m

ENTRY %main (p0: bf16[2,1,256,128], p1: bf16[2,1,384,128], w: f32[8,4]) -> f32[8,4] {
  %p0 = bf16[2,1,256,128]{3,2,1,0} parameter(0)
  %p1 = bf16[2,1,384,128]{3,2,1,0} parameter(1)
  %w = f32[8,4]{1,0} parameter(2)
  %m0 = s8[1,2,3]{2,1,0} constant({...})
  %splash_mha_fwd_segmented_no_residuals.6 = (f32[2,256,128]{2,1,0}, bf16[2,1,256,128]{3,2,1,0}) custom-call(%m0, %m0, %p0, %p1, %p1), custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={
"xprof_metadata":"{\\"block_q\\": 256, \\"block_kv\\": 128}"
}}, backend_config={"custom_call_config":{"body":"TUzv"}}
  %all-reduce.1 = f32[8,4]{1,0} all-reduce(%w), replica_groups={{0,1}}, to_apply=%add
  ROOT %dot.1 = f32[8,4]{1,0} dot(%all-reduce.1, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""  # noqa: E501 (HLO instructions are single lines)


def test_multi_line_custom_call_keeps_its_computation() -> None:
    stats = collective_stats(parse(MOSAIC))
    assert stats.by_kind["all-reduce"].count == 1  # the line after the kernel's JSON is still read
    # the dot (2 x 8 x 4 x 4) and the kernel: 4 x q elements (2x256x128) x 384 keys
    assert matmul_flops(parse(MOSAIC)) == 2 * 8 * 4 * 4 + 4 * (2 * 256 * 128) * 384


# A predicated conditional names its branches true_computation / false_computation (an indexed one:
# branch_computations); either way every branch is a callee that runs as ops of its own.
CONDITIONAL = (
    "HloModule cond, num_partitions=2\n"
    + ADD
    + """
%yes (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  ROOT %ar = f32[8]{0} all-reduce(%a), replica_groups={{0,1}}, to_apply=%add
}

%no (b: f32[8]) -> f32[8] {
  %b = f32[8]{0} parameter(0)
  ROOT %neg = f32[8]{0} negate(%b)
}

ENTRY %main (c: pred[], x: f32[8]) -> f32[8] {
  %c = pred[] parameter(0)
  %x = f32[8]{0} parameter(1)
  ROOT %if = f32[8]{0} conditional(%c, %x, %x), true_computation=%yes, false_computation=%no
}
"""
)


def test_every_branch_of_a_conditional_is_a_callee_that_runs() -> None:
    module = parse(CONDITIONAL)
    assert module.computations["main"][-1].callees == ("yes", "no")
    assert [(c.runs, c.running) for c in (module.computations["yes"], module.computations["no"])] == [
        (1, True),
        (1, True),
    ]
    assert collective_stats(module)["all-reduce"] == CollectiveCount(
        1, 32, 32
    )  # an upper bound: the branch may not run
    assert module.num_partitions == 2
