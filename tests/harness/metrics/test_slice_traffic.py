"""Known-answer tests: a fusion that slices, or updates in place, moves the bytes of the slice."""

from __future__ import annotations

from harness.metrics.hlo import memory_traffic_bytes, parse

T = "{2,1,0:T(8,128)(2,1)}"
W = f"bf16[48,4096,4096]{T}"  # 48 stacked layers, 32 MiB each
SLICE = 4096 * 4096 * 2
INDEX = 4


def _module(fused: str, root_shape: str, operands: str, params: str) -> str:
    return f"""HloModule m, num_partitions=1

{fused}

ENTRY %main ({params}) -> {root_shape} {{
  %p0 = {W} parameter(0)
  %p1 = s32[] parameter(1)
  ROOT %dynamic-slice_bitcast_fusion = {root_shape} fusion({operands}), kind=kLoop, calls=%fused
}}
"""


def test_slice_of_a_bitcast_parameter_reads_the_slice() -> None:
    """The layer scan's weight fusion on TPU: the stacked weights viewed through a bitcast, then sliced."""
    fused = f"""%fused (param_0.1: bf16[48,4096,4096], param_1.2: s32[]) -> bf16[4096,4096] {{
  %param_0.1 = {W} parameter(0)
  %param_1.2 = s32[] parameter(1)
  %constant.3 = s32[] constant(0)
  %bitcast.1 = bf16[48,16,256,4096]{{3,2,1,0}} bitcast({W} %param_0.1)
  %dynamic-slice.1 = bf16[1,16,256,4096]{{3,2,1,0}} dynamic-slice(%bitcast.1, %param_1.2, %constant.3, %constant.3, %constant.3), dynamic_slice_sizes={{1,16,256,4096}}
  ROOT %bitcast.5 = bf16[4096,4096]{{1,0}} bitcast(%dynamic-slice.1)
}}"""  # noqa: E501 (HLO instructions are single lines)
    text = _module(fused, "bf16[4096,4096]{1,0}", f"{W} %p0, s32[] %p1", "p0: bf16[48,4096,4096], p1: s32[]")
    assert memory_traffic_bytes(parse(text)) == SLICE + SLICE + INDEX  # read the slice, write it, read the index


def test_slice_inside_a_nested_fusion_reads_the_slice() -> None:
    fused = f"""%inner (q0: bf16[48,4096,4096], q1: s32[]) -> bf16[1,4096,4096] {{
  %q0 = {W} parameter(0)
  %q1 = s32[] parameter(1)
  %c = s32[] constant(0)
  ROOT %ds = bf16[1,4096,4096]{{2,1,0}} dynamic-slice(%q0, %q1, %c, %c), dynamic_slice_sizes={{1,4096,4096}}
}}

%fused (param_0.1: bf16[48,4096,4096], param_1.2: s32[]) -> bf16[4096,4096] {{
  %param_0.1 = {W} parameter(0)
  %param_1.2 = s32[] parameter(1)
  %nested = bf16[1,4096,4096]{{2,1,0}} fusion(%param_0.1, %param_1.2), kind=kLoop, calls=%inner
  ROOT %bitcast.5 = bf16[4096,4096]{{1,0}} bitcast(%nested)
}}"""
    text = _module(fused, "bf16[4096,4096]{1,0}", f"{W} %p0, s32[] %p1", "p0: bf16[48,4096,4096], p1: s32[]")
    assert memory_traffic_bytes(parse(text)) == 2 * SLICE + INDEX


def test_an_operand_also_read_whole_counts_whole() -> None:
    """Sliced and also reduced over: the whole operand is read."""
    fused = f"""%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}}

%fused (param_0.1: bf16[48,4096,4096], param_1.2: s32[]) -> bf16[4096,4096] {{
  %param_0.1 = {W} parameter(0)
  %param_1.2 = s32[] parameter(1)
  %c = s32[] constant(0)
  %ds = bf16[1,4096,4096]{{2,1,0}} dynamic-slice(%param_0.1, %param_1.2, %c, %c), dynamic_slice_sizes={{1,4096,4096}}
  %z = bf16[] constant(0)
  %r = bf16[4096,4096]{{1,0}} reduce(%param_0.1, %z), dimensions={{0}}, to_apply=%add
  %b = bf16[4096,4096]{{1,0}} bitcast(%ds)
  ROOT %m = bf16[4096,4096]{{1,0}} add(%b, %r)
}}"""
    text = _module(fused, "bf16[4096,4096]{1,0}", f"{W} %p0, s32[] %p1", "p0: bf16[48,4096,4096], p1: s32[]")
    assert memory_traffic_bytes(parse(text)) == 48 * SLICE + SLICE + INDEX


def test_in_place_update_under_a_bitcast_root_writes_the_update() -> None:
    """A scan writing layer i of its stacked outputs: the root is a bitcast of the update."""
    fused = f"""%fused (param_0.1: bf16[48,4096,4096], param_1.2: s32[], param_2.3: bf16[4096,4096]) -> bf16[48,4096,4096] {{
  %param_0.1 = {W} parameter(0)
  %param_1.2 = s32[] parameter(1)
  %param_2.3 = bf16[4096,4096]{{1,0}} parameter(2)
  %c = s32[] constant(0)
  %u = bf16[1,4096,4096]{{2,1,0}} bitcast(%param_2.3)
  %b0 = bf16[48,4096,4096]{{2,1,0}} bitcast(%param_0.1)
  %dus = bf16[48,4096,4096]{{2,1,0}} dynamic-update-slice(%b0, %u, %param_1.2, %c, %c)
  ROOT %out = {W} bitcast(%dus)
}}"""  # noqa: E501 (HLO instructions are single lines)
    text = f"""HloModule m, num_partitions=1

{fused}

ENTRY %main (p0: bf16[48,4096,4096], p1: s32[], p2: bf16[4096,4096]) -> bf16[48,4096,4096] {{
  %p0 = {W} parameter(0)
  %p1 = s32[] parameter(1)
  %p2 = bf16[4096,4096]{{1,0}} parameter(2)
  ROOT %dynamic-update-slice_fusion = {W} fusion({W} %p0, s32[] %p1, bf16[4096,4096]{{1,0}} %p2), kind=kLoop, calls=%fused
}}
"""  # noqa: E501 (HLO instructions are single lines)
    assert memory_traffic_bytes(parse(text)) == SLICE + INDEX + SLICE  # write the update, read the index and the update


def test_slice_after_a_nested_layout_copy_reads_the_slice() -> None:
    """libtpu's layer-scan weight fusion as compiled: the stacked weights re-tiled by a nested copy
    fusion (T(16,128) -> T(8,128)), then sliced, then copied out; a loop fusion computes only the
    output's elements, so it reads one layer, not the 48-layer stack the old rule priced."""
    fused = f"""%copy_fusion (c0: bf16[48,4096,4096]) -> bf16[48,4096,4096] {{
  %c0 = {W} parameter(0)
  ROOT %c = bf16[48,4096,4096]{{2,1,0:T(8,128)(2,1)}} copy(%c0)
}}

%fused (param_0.1: bf16[48,4096,4096], param_1.2: s32[]) -> bf16[1,4096,4096] {{
  %param_0.1 = {W} parameter(0)
  %retiled = bf16[48,4096,4096]{{2,1,0:T(8,128)(2,1)}} fusion(%param_0.1), kind=kLoop, calls=%copy_fusion
  %param_1.2 = s32[] parameter(1)
  %c = s32[] constant(0)
  %ds = bf16[1,4096,4096]{{2,1,0:T(8,128)(2,1)}} dynamic-slice(%retiled, %param_1.2, %c, %c), dynamic_slice_sizes={{1,4096,4096}}
  ROOT %out = bf16[1,4096,4096]{T} copy(%ds)
}}"""  # noqa: E501 (HLO instructions are single lines)
    text = _module(fused, f"bf16[1,4096,4096]{T}", f"{W} %p0, s32[] %p1", "p0: bf16[48,4096,4096], p1: s32[]")
    assert memory_traffic_bytes(parse(text)) == 2 * SLICE + INDEX
