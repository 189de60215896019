"""The interval's points for two modelling choices that are assumed: a chip's ICI ports shared by its
TensorCores or each core's own (``core_links``), and how the measured scalar op is read (``scalar_ops``,
TPU only). Known answers on small programs."""

from __future__ import annotations

import dataclasses

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.timeline.groups import route
from harness.metrics.timeline.program import build_program
from harness.metrics.timeline.specs import spec_from_dict

# Two scalar copies, as jaxlib printed the real v6e profile's jit_convert_element_type; then a
# fusion on a scalar and an add over a vector, neither scalar ops.
SCALARS = """HloModule m, is_scheduled=true

%f (x: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  ROOT %n = f32[] negate(f32[] %x)
}

ENTRY %main (a: f32[], v: f32[256]) -> (f32[], f32[], f32[256]) {
  %a = f32[]{:T(128)} parameter(0)
  %v = f32[256]{0} parameter(1)
  %copy.1 = f32[]{:T(128)S(6)} copy(f32[]{:T(128)} %a)
  %copy = f32[]{:T(128)} copy(f32[]{:T(128)S(6)} %copy.1)
  %fusion = f32[] fusion(f32[] %copy), kind=kLoop, calls=%f
  %add = f32[256]{0} add(f32[256]{0} %v, f32[256]{0} %v)
  ROOT %t = (f32[], f32[], f32[256]) tuple(%copy, %fusion, %add)
}
"""

# An all-gather over two chips of a tpu7x 2x2x1 slice (devices 0 and 2: core 0 of chips 0 and 1).
GATHER = """HloModule m, is_scheduled=true, num_partitions=8

ENTRY %main (p: bf16[1048576]) -> bf16[2097152] {
  %p = bf16[1048576]{0} parameter(0)
  ROOT %ag = bf16[2097152]{0} all-gather(bf16[1048576]{0} %p), replica_groups={{0,2},{1,3},{4,6},{5,7}}, dimensions={0}
}
"""


def test_scalar_ops_are_the_non_fusion_ops_on_rank_0_values():
    ops = {op.name: op for op in build_program(parse(SCALARS)).ops["main"]}
    assert [n for n, op in ops.items() if op.scalar] == ["copy.1", "copy"]
    assert not ops["fusion"].scalar and not ops["add"].scalar and ops["fusion"].cls == "compute"


def test_a_tpu_scalar_op_costs_the_measured_scalar_op_not_a_kernels_overhead():
    spec = timeline.spec_for("v6e:2x4", "tpu")
    scalar, launch = spec.value("scalar_op_s") * 1e9, spec.value("program_launch_s") * 1e9
    assert (scalar, launch) == pytest.approx((190.0, 319.922))
    base = timeline.predict(parse(SCALARS), spec)
    ns = {e.name: e.end_ns - e.start_ns for e in base.events}
    for name in ("copy.1", "copy"):  # 4 bytes each: the fixed cost and under 0.01 ns of bandwidth
        assert scalar < ns[name] < scalar + 0.01
    assert ns["fusion"] > spec.value("op_overhead_s") * 1e9 and ns["add"] > spec.value("op_overhead_s") * 1e9
    assert min(e.start_ns for e in base.events) == pytest.approx(launch)  # the program's launch first
    other = timeline.predict(parse(SCALARS), dataclasses.replace(spec, scalar_ops="with_launch"))
    # each copy the whole gap (scalar + launch), the first from the program's start: one launch more
    assert other.step_ns - base.step_ns == pytest.approx(launch, rel=1e-9)


# jit_broadcast_in_dim of the real v6e profile, smaller: the scalar copy, then the broadcast kernel that
# the profile shows starting 509.9 ns after the program's start (the measurement both readings share).
BROADCAST = """HloModule m, is_scheduled=true

ENTRY %main (a: f32[]) -> f32[1024,256] {
  %a = f32[]{:T(128)} parameter(0)
  %copy = f32[]{:T(128)S(6)} copy(f32[]{:T(128)} %a)
  ROOT %broadcast.2 = f32[1024,256]{1,0:T(8,128)} broadcast(f32[]{:T(128)S(6)} %copy), dimensions={}
}
"""


ADD_FIRST = SCALARS.replace("%copy.1 = ", "%add0 = f32[256]{0} add(f32[256]{0} %v, f32[256]{0} %v)\n  %copy.1 = ")


@pytest.mark.parametrize("reading", ["after_launch", "with_launch"])
def test_either_reading_puts_the_kernel_where_the_profile_measured_it(reading):
    """Read either way, the scalar-op measurement gives back what it was read from: the kernel starts at
    the launch plus the scalar op (509.9 ns); ``with_launch`` used to charge the launch twice (829.8 ns)."""
    spec = dataclasses.replace(timeline.spec_for("v6e:2x4", "tpu"), scalar_ops=reading)
    start = {e.name: e.start_ns for e in timeline.predict(parse(BROADCAST), spec).events}
    gap = (spec.value("program_launch_s") + spec.value("scalar_op_s")) * 1e9
    assert start["broadcast.2"] == pytest.approx(gap, abs=0.01) and 509.9 < gap < 510.0  # + 4 bytes of bandwidth
    assert start["copy"] == pytest.approx(0.0 if reading == "with_launch" else spec.value("program_launch_s") * 1e9)
    # a program whose first op is not a scalar op starts after its launch, read either way
    first = min(timeline.predict(parse(ADD_FIRST), spec).events, key=lambda e: e.start_ns)
    assert first.name == "add0" and first.start_ns == pytest.approx(spec.value("program_launch_s") * 1e9)


def test_a_gpu_or_cpu_scalar_op_is_priced_as_any_op_and_no_program_launch_is_added():
    h100 = timeline.spec_for("h100:1x1x8", "gpu")
    ns = {e.name: (e.start_ns, e.end_ns) for e in timeline.predict(parse(SCALARS), h100).events}
    overhead = h100.value("op_overhead_s") * 1e9
    assert ns["copy.1"][0] == 0.0 and ns["copy.1"][1] == pytest.approx(overhead, rel=1e-6)


def test_the_interval_has_the_scalar_point_only_where_a_tpu_program_runs_a_scalar_op():
    spec = timeline.spec_for("v6e:2x4", "tpu")
    u = timeline.uncertainty(parse(SCALARS), spec)
    assert u["scalar_ops"] == "after_launch" and "scalar_ops:with_launch" in u["assumed"]
    other = timeline.predict(parse(SCALARS), dataclasses.replace(spec, scalar_ops="with_launch")).step_ns / 1e9
    assert u["points_s"]["scalar_ops:with_launch"] == pytest.approx(other) and other <= u["interval_s"][1]
    assert not any(k.startswith("scalar_ops") for k in timeline.uncertainty(parse(GATHER), spec)["points_s"])


def test_a_gpu_or_cpu_program_with_a_scalar_op_gets_no_scalar_point():
    """A GPU's (and a CPU's) scalar op is a kernel launch or a call like any other op: no reading of a
    TPU measurement to vary (the point used to be added on every platform)."""
    for other_spec in (timeline.spec_for("h100:1x1x8", "gpu"), _cpu()):
        points = timeline.uncertainty(parse(SCALARS), other_spec)["points_s"]
        assert not any(k.startswith("scalar_ops") for k in points), other_spec.name


def _cpu() -> timeline.TimelineSpec:
    from harness.metrics.timeline.specs import cpu_spec

    return cpu_spec(1e11, 1e10, 2e-6, "measured: test")


def test_each_core_its_own_ports_doubles_a_cross_chip_route_on_tpu7x_only():
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    shared, own = route((0, 2), spec), route((0, 2), dataclasses.replace(spec, core_links="own"))
    assert shared.queues == own.queues == ("dim0",)
    assert own.bytes_per_s == pytest.approx(2 * shared.bytes_per_s, rel=1e-12)
    assert route((0, 1), dataclasses.replace(spec, core_links="own")).queues == ("core",)  # on-chip: unchanged
    u = timeline.uncertainty(parse(GATHER), spec)
    assert u["core_links"] == "shared" and "core_links:own" in u["assumed"]
    assert u["points_s"]["core_links:own"] < u["step_s"] and u["interval_s"][0] <= u["points_s"]["core_links:own"]
    assert "core_links:own" not in timeline.uncertainty(parse(GATHER), timeline.spec_for("v6e:2x4", "tpu"))["points_s"]


def test_the_new_choices_round_trip_through_a_spec_file_and_a_bad_one_is_refused():
    spec = dataclasses.replace(timeline.spec_for("tpu7x:2x2x1", "tpu"), core_links="own", scalar_ops="with_launch")
    back = spec_from_dict(spec.to_dict())
    assert (back.core_links, back.scalar_ops) == ("own", "with_launch")
    raw = spec.to_dict()
    del raw["core_links"], raw["scalar_ops"]  # a spec file written before the fields: the defaults
    assert (spec_from_dict(raw).core_links, spec_from_dict(raw).scalar_ops) == ("shared", "after_launch")
    with pytest.raises(ValueError, match="core_links 'half'"):
        spec_from_dict({**raw, "core_links": "half"}, "cal.json")
    with pytest.raises(ValueError, match="scalar_ops 'free'"):
        spec_from_dict({**raw, "scalar_ops": "free"}, "cal.json")
