"""Known-answer tests: traffic counts device memory (HBM) only. A buffer the compiler placed in
another memory space (``S(1)``: TPU VMEM, where memory-space assignment prefetches; ``S(2)``,
``S(6)``-``S(8)``: libtpu's scalars and sync flags) is read and written on the chip; a DMA that
copies a slice reads the slice, not its whole source."""

from __future__ import annotations

from harness.metrics.hlo import memory_traffic_bytes, parse
from harness.metrics.hlo.text import DEVICE_MEMORY, shape_bytes

HBM = "{0}"
VMEM = "{0:S(1)}"


def _entry(params: str, body: str, root_shape: str) -> str:
    return f"HloModule m, num_partitions=1\n\nENTRY %main ({params}) -> {root_shape} {{\n{body}\n}}\n"


def test_shape_bytes_of_one_memory_space() -> None:
    shape = "(f32[1000]{0}, bf16[64,128]{1,0:T(8,128)(2,1)S(1)}, s32[]{:S(2)}, u32[]{:S(8)})"
    assert shape_bytes(shape) == 4000 + 64 * 128 * 2 + 4 + 4
    assert shape_bytes(shape, DEVICE_MEMORY) == 4000
    assert shape_bytes(shape, 1) == 64 * 128 * 2
    assert shape_bytes("f32[10]{0:T(128)}", DEVICE_MEMORY) == 40  # a tiling alone is no memory space


def test_an_op_on_vmem_buffers_moves_only_its_hbm_bytes() -> None:
    """add(HBM f32[1000], VMEM f32[1000]) -> VMEM: reads 4000 bytes of HBM, writes none."""
    text = _entry(
        "p: f32[1000], v: f32[1000]",
        f"""  %p = f32[1000]{HBM} parameter(0)
  %v = f32[1000]{VMEM} parameter(1)
  ROOT %a = f32[1000]{VMEM} add(f32[1000]{HBM} %p, f32[1000]{VMEM} %v)""",
        "f32[1000]",
    )
    assert memory_traffic_bytes(parse(text)) == 4000


def test_a_fusion_writing_vmem_reads_its_hbm_operands_only() -> None:
    fused = """%fused (a: f32[1000], b: f32[1000]) -> f32[1000] {
  %a = f32[1000]{0} parameter(0)
  %b = f32[1000]{0} parameter(1)
  ROOT %m = f32[1000]{0} multiply(%a, %b)
}

"""
    entry = _entry(
        "p: f32[1000], v: f32[1000]",
        f"""  %p = f32[1000]{HBM} parameter(0)
  %v = f32[1000]{VMEM} parameter(1)
  ROOT %f = f32[1000]{VMEM} fusion(f32[1000]{HBM} %p, f32[1000]{VMEM} %v), kind=kLoop, calls=%fused""",
        "f32[1000]",
    )
    header, body = entry.split("\n\n", 1)
    text = f"{header}\n\n{fused}{body}"
    assert memory_traffic_bytes(parse(text)) == 4000


def test_slice_start_prefetching_a_weight_slice_into_vmem_reads_the_slice() -> None:
    """libtpu's scan prefetch: 4 MiB of a 24 MiB s8 view of a layer's weights, copied into VMEM."""
    src, part = "s8[25165824]{0:T(1024)(128)(4,1)}", "s8[4194304]{0:T(1024)(128)(4,1)S(1)}"
    text = _entry(
        "w: s8[25165824]",
        f"""  %w = {src} parameter(0)
  %ss = (({src}), {part}, s32[]{{:S(2)}}) slice-start({src} %w), slice={{[4194304:8388608]}}
  ROOT %sd = {part} slice-done(%ss)""",
        "s8[4194304]",
    )
    assert memory_traffic_bytes(parse(text)) == 4194304


def test_copy_start_prefetch_reads_hbm_and_eviction_writes_it() -> None:
    """A copy-start's tuple is (destination, source, context), as XLA builds it and libtpu prints it
    (the real v6e profile: ``%copy-done = f32[..]{..} copy-done((f32[..]{..}, f32[..]{..S(5)}, u32[])
    %copy-start)``, the done returning element 0): a prefetch reads its HBM source once, an
    eviction writes its HBM destination once."""
    into = f"(f32[1000]{VMEM}, f32[1000]{HBM}, u32[]{{:S(2)}})"
    back = f"(f32[1000]{HBM}, f32[1000]{VMEM}, u32[]{{:S(2)}})"
    text = _entry(
        "p: f32[1000]",
        f"""  %p = f32[1000]{HBM} parameter(0)
  %cs = {into} copy-start(f32[1000]{HBM} %p)
  %cd = f32[1000]{VMEM} copy-done({into} %cs)
  %es = {back} copy-start(f32[1000]{VMEM} %cd)
  ROOT %ed = f32[1000]{HBM} copy-done({back} %es)""",
        "f32[1000]",
    )
    module = parse(text)
    assert memory_traffic_bytes(module) == 4000 + 4000
    traffic = {i.name: i.traffic for i in module.computations["main"]}
    assert (traffic["cs"], traffic["cd"], traffic["es"], traffic["ed"]) == (4000, 0, 4000, 0)


def test_a_host_copy_moves_its_hbm_side_once() -> None:
    """Host offload (``S(5)``, host memory): host -> HBM writes the HBM copy, HBM -> host reads it."""
    host = "{0:S(5)}"
    into = f"(f32[1000]{HBM}, f32[1000]{host}, u32[]{{:S(2)}})"
    back = f"(f32[1000]{host}, f32[1000]{HBM}, u32[]{{:S(2)}})"
    text = _entry(
        "p: f32[1000]",
        f"""  %p = f32[1000]{host} parameter(0)
  %cs = {into} copy-start(f32[1000]{host} %p)
  %cd = f32[1000]{HBM} copy-done({into} %cs)
  %es = {back} copy-start(f32[1000]{HBM} %cd)
  ROOT %ed = f32[1000]{host} copy-done({back} %es)""",
        "f32[1000]",
    )
    traffic = {i.name: i.traffic for i in parse(text).computations["main"]}
    assert (traffic["cs"], traffic["es"]) == (4000, 4000)
