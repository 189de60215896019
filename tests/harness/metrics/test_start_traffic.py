"""Known-answer tests: an async ``*-start`` reads its operands and writes its outputs once; the
operands its result tuple holds for the op's duration are not written again."""

from __future__ import annotations

from harness.metrics.hlo import memory_traffic_bytes, parse

W8 = "bf16[48,2048,1024]{2,1,0:T(8,128)(2,1)}"
W16 = "bf16[48,2048,1024]{2,1,0:T(16,128)(2,1)}"
STACK = 48 * 2048 * 1024 * 2
CONTEXT = 4  # u32[] of the start's own state (in device memory unless its layout names another space)


def test_sparsecore_call_start_moves_the_copy_once() -> None:
    """libtpu's tpu7x weight re-tiling (``sparse-core-data-format``): read the stack, write it re-tiled;
    its u32[] state lives in memory space 8 (libtpu's sync flags), not in HBM."""
    text = f"""HloModule m, num_partitions=1

%called_computation (p: bf16[48,2048,1024]) -> bf16[48,2048,1024] {{
  %p = {W8} parameter(0)
  ROOT %copy = {W16} copy(%p)
}}

ENTRY %main (w: bf16[48,2048,1024]) -> bf16[48,2048,1024] {{
  %w = {W8} parameter(0)
  %cs = (({W8}), {W16}, u32[]{{:S(8)}}) call-start(%w), async_execution_thread="sparsecore", to_apply=%called_computation
  ROOT %cd = {W16} call-done(%cs)
}}
"""  # noqa: E501 (HLO instructions are single lines)
    assert memory_traffic_bytes(parse(text)) == STACK + STACK


def test_collective_permute_start_writes_its_output_not_its_operand_again() -> None:
    x = "bf16[1,1024]{1,0}"
    text = f"""HloModule m, num_partitions=2

ENTRY %main (x: bf16[1,1024]) -> bf16[1,1024] {{
  %x = {x} parameter(0)
  %s = ({x}, {x}, u32[], u32[]) collective-permute-start(%x), channel_id=1, source_target_pairs={{{{0,1}},{{1,0}}}}
  ROOT %d = {x} collective-permute-done(%s)
}}
"""  # noqa: E501
    assert memory_traffic_bytes(parse(text)) == 2048 + 2048 + 2 * CONTEXT


def test_all_gather_start_reads_the_shard_and_writes_the_whole() -> None:
    text = """HloModule m, num_partitions=4

ENTRY %main (x: f32[256]) -> f32[1024] {
  %x = f32[256]{0} parameter(0)
  %s = (f32[256]{0}, f32[1024]{0}) all-gather-start(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %d = f32[1024]{0} all-gather-done(%s)
}
"""
    assert memory_traffic_bytes(parse(text)) == 1024 + 4096


def test_all_reduce_start_result_is_its_output() -> None:
    """An all-reduce-start's shape is the output alone (no operand tuple): read it, write it."""
    text = """HloModule m, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[1024]) -> f32[1024] {
  %x = f32[1024]{0} parameter(0)
  %s = f32[1024]{0} all-reduce-start(%x), channel_id=1, replica_groups={{0,1,2,3}}, to_apply=%add
  ROOT %d = f32[1024]{0} all-reduce-done(%s)
}
"""
    assert memory_traffic_bytes(parse(text)) == 4096 + 4096
