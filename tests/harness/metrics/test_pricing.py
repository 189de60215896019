"""Known-answer tests of the matmul pricing rules and the spec tables' topology and sources."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from harness import hardware
from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.timeline import pricing, rates, specs
from harness.metrics.timeline.specs import Constant, TimelineSpec, Topology

PEAK = 1e12


def _spec(**extra: Constant) -> TimelineSpec:
    c = {
        "peak_flops_per_s": Constant(PEAK, "FLOP/s", "test"),
        "hbm_bytes_per_s": Constant(1e15, "B/s", "test"),  # memory never binds here
        "op_overhead_s": Constant(0.0, "s", "test"),
        "collective_latency_s": Constant(0.0, "s", "test"),
        "link_bytes_per_s": Constant(1e9, "B/s", "test"),
        **extra,
    }
    return TimelineSpec("test", "tpu", c, Topology("switch", (1,)))


def _tiled(m: int, n: int, k: int) -> TimelineSpec:
    return _spec(
        tile_m=Constant(m, "elements", "test"),
        tile_n=Constant(n, "elements", "test"),
        tile_k=Constant(k, "elements", "test"),
    )


DOT = """HloModule m, is_scheduled=true, num_partitions=1

%fused_dot (a: bf16[3,100,300], b: bf16[3,300,200]) -> bf16[3,100,200] {
  %a = bf16[3,100,300]{2,1,0} parameter(0)
  %b = bf16[3,300,200]{2,1,0} parameter(1)
  ROOT %d = bf16[3,100,200]{2,1,0} dot(%a, %b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}

ENTRY %main (p: bf16[3,100,300], q: bf16[3,300,200]) -> bf16[3,100,200] {
  %p = bf16[3,100,300]{2,1,0} parameter(0)
  %q = bf16[3,300,200]{2,1,0} parameter(1)
  ROOT %f = bf16[3,100,200]{2,1,0} fusion(%p, %q), kind=kOutput, calls=%fused_dot
}
"""  # noqa: E501 (HLO instructions are single lines)
FLOPS = 2 * 3 * 100 * 200 * 300


def _dots(text: str) -> list[pricing.Matmul]:
    module = parse(text)
    shapes = {i.name: i.shape for instrs in module.computations.values() for i in instrs}
    return pricing.matmuls(module.computations["main"][-1], module, shapes)


def test_a_batched_dot_inside_a_fusion_is_read_as_batch_m_n_k() -> None:
    assert _dots(DOT) == [pricing.Matmul(3, 100, 200, 300, float(FLOPS))]


def test_a_tiled_matrix_unit_runs_the_useful_fraction_of_the_padded_work() -> None:
    # m 100 -> 104 (tile 8), n 200 -> 256, k 300 -> 512
    eff = 100 * 200 * 300 / (104 * 256 * 512)
    assert pricing.tile_efficiency(pricing.Matmul(3, 100, 200, 300, FLOPS), (8, 256, 256)) == pytest.approx(eff)
    step = timeline.predict(parse(DOT), _tiled(8, 256, 256)).step_ns
    assert step == pytest.approx(FLOPS / (PEAK * eff) * 1e9)
    assert timeline.predict(parse(DOT), _spec()).step_ns == pytest.approx(FLOPS / PEAK * 1e9)  # no tile: peak
    aligned = pricing.Matmul(1, 256, 512, 1024, 2 * 256 * 512 * 1024)
    assert pricing.tile_efficiency(aligned, (8, 256, 256)) == 1.0


def test_a_measured_curve_is_interpolated_in_log_size_and_clamped() -> None:
    spec = _spec(matmul_eff_n64=Constant(0.2, "fraction", "test"), matmul_eff_n1024=Constant(1.0, "fraction", "test"))
    assert pricing.curve(spec) == [(64.0, 0.2), (1024.0, 1.0)]
    at = {n: pricing.efficiency(pricing.Matmul(1, n, n, n, 2.0 * n**3), spec) for n in (32, 64, 256, 1024, 4096)}
    assert at[32] == 0.2 and at[64] == 0.2 and at[1024] == 1.0 and at[4096] == 1.0
    assert at[256] == pytest.approx(0.2 + 0.8 * math.log(4) / math.log(16))  # halfway in log size
    # 100 x 200 x 300: effective size (6e6)^(1/3) = 181.7
    w = (math.log(6e6) / 3 - math.log(64)) / math.log(16)
    assert pricing.efficiency(pricing.Matmul(3, 100, 200, 300, FLOPS), spec) == pytest.approx(0.2 + 0.8 * w)
    step = timeline.predict(parse(DOT), spec).step_ns
    assert step == pytest.approx(FLOPS / (PEAK * (0.2 + 0.8 * w)) * 1e9)


def test_a_convolution_is_priced_as_output_positions_by_features_by_taps() -> None:
    conv = parse("""HloModule m

ENTRY %main (x: f32[2,16,16,8], w: f32[3,3,8,32]) -> f32[2,16,16,32] {
  %x = f32[2,16,16,8]{3,2,1,0} parameter(0)
  %w = f32[3,3,8,32]{3,2,1,0} parameter(1)
  ROOT %c = f32[2,16,16,32]{3,2,1,0} convolution(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
}
""")  # noqa: E501 (HLO instructions are single lines)
    instr = conv.computations["main"][-1]
    mm = pricing.matmul_of(instr, {i.name: i.shape for i in conv.computations["main"]})
    assert mm is not None and (mm.batch, mm.m, mm.n) == (1, 2 * 16 * 16, 32)
    # padding makes border outputs see fewer taps: k is the mean taps x input features per output
    assert mm.k == round(mm.flops / (2 * 2 * 16 * 16 * 32)) and 8 * 7 <= mm.k <= 8 * 9


def test_tpu_and_gpu_specs_carry_a_tile_with_a_source() -> None:
    for target, platform, tile in (("v6e:2x4", "tpu", (8, 256, 256)), ("h100:1x1x8", "gpu", (128, 128, 64))):
        spec = timeline.spec_for(target, platform)
        assert tuple(int(spec.value(t)) for t in pricing.TILES) == tile
        assert all(spec.constants[t].source for t in pricing.TILES)


def test_tpu7x_wraps_only_as_whole_cubes() -> None:
    """A slice of whole 4x4x4 cubes is a full 3D torus; any smaller slice has no wraparound at all."""
    tpu7x, v6e = hardware.SPECS["tpu7x"], hardware.SPECS["v6e"]
    assert tpu7x.wraparound((4, 4, 4)) == (True, True, True)
    assert tpu7x.wraparound((4, 4, 8)) == (True, True, True)
    assert tpu7x.wraparound((4, 4, 2)) == (False, False, False)  # the old per-dimension rule wrapped x, y
    assert tpu7x.wraparound((2, 2, 1)) == (False, False, False)
    assert v6e.wraparound((16, 4)) == (True, False)
    assert v6e.wraparound((32, 16)) == (True, True) and v6e.wraparound((8, 8)) == (False, False)


def test_uncertainty_follows_the_kind_of_source() -> None:
    assert Constant(1.0, "s", "assumed: a guess").rel_uncertainty == specs.ASSUMED_UNCERTAINTY
    assert Constant(1.0, "s", "measured on this CPU").rel_uncertainty == specs.MEASURED_UNCERTAINTY
    assert Constant(1.0, "s", "cloud.google.com/tpu/docs/v6e").rel_uncertainty == specs.PUBLISHED_UNCERTAINTY
    assert Constant(1.0, "s", "assumed", uncertainty=0.3).rel_uncertainty == 0.3


def _all_specs() -> list[TimelineSpec]:
    out = [timeline.spec_for(t, p) for t, p in (("v6e:2x4", "tpu"), ("tpu7x:2x2x1", "tpu"), ("h100:1x1x8", "gpu"))]
    out.append(timeline.spec_for("h200:1x1x8", "gpu"))
    out.append(timeline.cpu_spec(1e11, 1e10, 5e-6, "measured: test", devices=8, curve=[(64, 0.3), (1024, 1.0)]))
    return out


def test_every_constant_states_a_source_and_none_is_fitted_to_a_published_result() -> None:
    """Constants are never taken from a published result they are later compared with (MaxDiffusion's
    LTX-2 timings): neither a spec's sources nor the text of specs.py cite it."""
    for spec in _all_specs():
        for name, c in spec.constants.items():
            assert len(c.source) > 10, (spec.name, name)
            assert "maxdiffusion" not in c.source.lower(), (spec.name, name)
            assert c.rel_uncertainty > 0, (spec.name, name)
        assert spec.topology.source or spec.topology.kind != "torus"
    text = "".join(Path(m.__file__).read_text() for m in (specs, rates, hardware))  # type: ignore[arg-type]
    assert not re.search(r"maxdiffusion", text, re.IGNORECASE)
    # the rate curves come from the microbenchmark tables only: never from the held-out real v6e profile;
    # only a TPU program's launch and scalar op are measured on it, on two modules other than the one
    # whose time they set (jit_convert_element_type: two scalar copies)
    rates_text = "".join(Path(m.__file__).read_text() for m in (specs, rates))  # type: ignore[arg-type]
    assert not re.search(r"tpu_inference|xplane|1\.27|1\.47", rates_text, re.IGNORECASE)
    for spec in _all_specs():
        cite = {n for n, c in spec.constants.items() if re.search(r"tpu_inference|xplane", c.source, re.IGNORECASE)}
        assert cite == ({"program_launch_s", "scalar_op_s"} if spec.platform == "tpu" else set()), spec.name
        for n in cite:
            assert "its jit_f and jit_broadcast_in_dim, not jit_convert_element_type" in spec.constants[n].source
    assumed = {n for s in _all_specs() for n, c in s.constants.items() if c.source.startswith("assumed")}
    assert "op_overhead_s" in assumed  # no published figure: said so, and priced wide
