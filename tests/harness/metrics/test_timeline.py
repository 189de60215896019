"""The schedule simulator on hand-written HLO schedules with known answers.

Every expected number is derived from the spec constants below: a compute op ``add(f32[N], f32[N])``
moves 12N bytes (two operands read, one result written) and has no matmul FLOPs, so it takes
12N / HBM bandwidth; an all-gather of an f32[N] shard over a group of G devices sends 4N(G-1) bytes
(ring) over the link bandwidth plus the collective latency.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.hlo.replica_groups import device_groups
from harness.metrics.measured.accounting import device_metrics
from harness.metrics.measured.chrome import read_chrome_trace
from harness.metrics.timeline import groups
from harness.metrics.timeline.groups import all_devices, route
from harness.metrics.timeline.specs import Constant, TimelineSpec, Topology

HBM = 1e9  # B/s: 1 byte per ns
LINK = 1e9  # B/s
GROUP = 4


def _spec(latency_s: float = 0.0, overhead_s: float = 0.0) -> TimelineSpec:
    c = {
        "peak_flops_per_s": Constant(1e12, "FLOP/s", "test"),
        "hbm_bytes_per_s": Constant(HBM, "B/s", "test"),
        "op_overhead_s": Constant(overhead_s, "s", "test"),
        "collective_latency_s": Constant(latency_s, "s", "test"),
        "link_bytes_per_s": Constant(LINK, "B/s", "test"),
    }
    return TimelineSpec("test", "gpu", c, Topology("switch", (1, 1, GROUP)))


def add_ns(n: int, spec: TimelineSpec) -> float:
    return 12 * n / spec.value("hbm_bytes_per_s") * 1e9 + spec.value("op_overhead_s") * 1e9


def gather_ns(n: int, spec: TimelineSpec) -> float:
    return spec.value("collective_latency_s") * 1e9 + 4 * n * (GROUP - 1) / spec.value("link_bytes_per_s") * 1e9


HEADER = f"HloModule test, is_scheduled=true, num_partitions={GROUP}\n\n"
GROUPS = "replica_groups={{0,1,2,3}}, dimensions={0}"
AGS = "(f32[1000]{0}, f32[4000]{0})"


def _module(entry: str, *others: str) -> str:
    return HEADER + "\n\n".join(others) + ("\n\n" if others else "") + entry


SYNC = _module(f"""ENTRY %main (p: f32[1000], q: f32[500]) -> f32[500] {{
  %p = f32[1000]{{0}} parameter(0)
  %q = f32[500]{{0}} parameter(1)
  %a = f32[500]{{0}} add(f32[500]{{0}} %q, f32[500]{{0}} %q)
  %ag = f32[4000]{{0}} all-gather(f32[1000]{{0}} %p), {GROUPS}
  ROOT %b = f32[500]{{0}} add(f32[500]{{0}} %a, f32[500]{{0}} %a)
}}""")


def _async(compute_n: int) -> str:
    return _module(f"""ENTRY %main (p: f32[1000], q: f32[{compute_n}]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %q = f32[{compute_n}]{{0}} parameter(1)
  %all-gather-start = {AGS} all-gather-start(f32[1000]{{0}} %p), {GROUPS}
  %a = f32[{compute_n}]{{0}} add(f32[{compute_n}]{{0}} %q, f32[{compute_n}]{{0}} %q)
  ROOT %all-gather-done = f32[4000]{{0}} all-gather-done({AGS} %all-gather-start)
}}""")


def test_sync_all_gather_blocks_compute():
    spec = _spec(latency_s=2e-6)
    p = timeline.predict(parse(SYNC), spec)
    t = gather_ns(1000, spec)
    assert p.step_ns == pytest.approx(2 * add_ns(500, spec) + t, rel=1e-12)
    assert p.device["exposed_ns_by_kind"] == {"all-gather": pytest.approx(t, rel=1e-12)}
    assert p.device["exposed_collective_ns"] == pytest.approx(t, rel=1e-12)
    assert p.device["compute_ns"] == pytest.approx(2 * add_ns(500, spec), rel=1e-12)
    assert p.exposed_all_gather_fraction == pytest.approx(t / p.step_ns, rel=1e-12)
    assert p.to_dict()["exposed_collective_fraction"] == pytest.approx(t / p.step_ns, rel=1e-12)
    top = p.critical_path[0]
    assert (top["op"], top["category"], top["count"]) == ("ag", "all-gather", 1)


def test_async_all_gather_fully_hidden():
    spec = _spec()
    t = gather_ns(1000, spec)  # 12000 ns; the compute op: 12 x 2000 = 24000 ns
    p = timeline.predict(parse(_async(2000)), spec)
    assert add_ns(2000, spec) > t
    assert p.step_ns == pytest.approx(add_ns(2000, spec), rel=1e-12)
    assert p.device["exposed_collective_ns"] == 0.0
    assert p.device["exposed_ns_by_kind"] == {}
    assert p.device["collective_ns_by_kind"]["all-gather"] == pytest.approx(p.step_ns, rel=1e-12)


def test_async_all_gather_half_hidden():
    spec = _spec()
    t = gather_ns(1000, spec)
    assert add_ns(500, spec) == pytest.approx(t / 2)  # the compute op covers half the transfer
    p = timeline.predict(parse(_async(500)), spec)
    assert p.step_ns == pytest.approx(t, rel=1e-12)
    assert p.device["exposed_ns_by_kind"]["all-gather"] == pytest.approx(t / 2, rel=1e-12)
    assert p.device["exposed_collective_ns"] == pytest.approx(t / 2, rel=1e-12)
    assert p.device["wasted_fraction"] == pytest.approx(0.5, rel=1e-12)


ST2 = "all-gather-start.2"
TUPLE = f"(s32[], f32[1000]{{0}}, f32[250]{{0}}, f32[500]{{0}}, {AGS})"
BODY = f"""%body (bp: {TUPLE}) -> {TUPLE} {{
  %bp = {TUPLE} parameter(0)
  %i = s32[] get-tuple-element({TUPLE} %bp), index=0
  %x = f32[1000]{{0}} get-tuple-element({TUPLE} %bp), index=1
  %y = f32[250]{{0}} get-tuple-element({TUPLE} %bp), index=2
  %z = f32[500]{{0}} get-tuple-element({TUPLE} %bp), index=3
  %pend = {AGS} get-tuple-element({TUPLE} %bp), index=4
  %all-gather-done.2 = f32[4000]{{0}} all-gather-done({AGS} %pend)
  %ya = f32[250]{{0}} add(f32[250]{{0}} %y, f32[250]{{0}} %y)
  %{ST2} = {AGS} all-gather-start(f32[1000]{{0}} %x), {GROUPS}
  %zb = f32[500]{{0}} add(f32[500]{{0}} %z, f32[500]{{0}} %z)
  ROOT %out = {TUPLE} tuple(s32[] %i, f32[1000]{{0}} %x, f32[250]{{0}} %ya, f32[500]{{0}} %zb, {AGS} %{ST2})
}}"""
COND = f"""%cond (cp: {TUPLE}) -> pred[] {{
  %cp = {TUPLE} parameter(0)
  ROOT %k = pred[] constant(true)
}}"""
LOOP = _module(
    f"""ENTRY %main (p: f32[1000], y: f32[250], z: f32[500], w: f32[4000]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %y = f32[250]{{0}} parameter(1)
  %z = f32[500]{{0}} parameter(2)
  %w = f32[4000]{{0}} parameter(3)
  %all-gather-start.1 = {AGS} all-gather-start(f32[1000]{{0}} %p), {GROUPS}
  %c0 = f32[1000]{{0}} add(f32[1000]{{0}} %p, f32[1000]{{0}} %p)
  %i0 = s32[] constant(0)
  %t = {TUPLE} tuple(s32[] %i0, f32[1000]{{0}} %p, f32[250]{{0}} %y, f32[500]{{0}} %z, {AGS} %all-gather-start.1)
  %loop = {TUPLE} while({TUPLE} %t), condition=%cond, body=%body, backend_config={{"known_trip_count":{{"n":"4"}}}}
  %g = {AGS} get-tuple-element({TUPLE} %loop), index=4
  %all-gather-done.1 = f32[4000]{{0}} all-gather-done({AGS} %g)
  ROOT %r = f32[4000]{{0}} add(f32[4000]{{0}} %w, f32[4000]{{0}} %w)
}}""",
    COND,
    BODY,
)


def test_while_loop_with_collective_pipelined_across_iterations():
    """Prologue start, then in each of 4 iterations: done (of the previous start), compute A, start,
    compute B; epilogue done after the loop. The prologue transfer hides behind a compute of T; from
    then on each done ends T after the previous start (A, then the transfer of which B = T/2 hides):
    total T + 4 (A + T) + C (T transfer, A = 12 x 250 ns, C = 12 x 4000 ns); exposed T/2 at each of
    the 4 dones after the first."""
    spec = _spec()
    t, a, b, c = gather_ns(1000, spec), add_ns(250, spec), add_ns(500, spec), add_ns(4000, spec)
    assert add_ns(1000, spec) == pytest.approx(t) and b == pytest.approx(t / 2)
    p = timeline.predict(parse(LOOP), spec)
    assert p.step_ns == pytest.approx(t + 4 * (a + t) + c, rel=1e-12)
    assert p.device["exposed_ns_by_kind"]["all-gather"] == pytest.approx(4 * (t / 2), rel=1e-12)
    transfers = [e for e in p.events if e.name.endswith("(transfer)")]
    assert len(transfers) == 5  # prologue + one per iteration
    done_events = [e for e in p.events if "all-gather-done" in e.name]
    assert len(done_events) == 5


AG_BIG, AG_SMALL = "(f32[1000]{0}, f32[4000]{0})", "(f32[250]{0}, f32[1000]{0})"
TWO_TYPES = ("s32[]", "f32[1000]{0}", "f32[250]{0}", "f32[100]{0}", AG_BIG, AG_SMALL)
TWO = f"({', '.join(TWO_TYPES)})"


def _two(*names: str) -> str:
    """The operands of a tuple of ``TWO``'s element types."""
    return ", ".join(f"{ty} {name}" for ty, name in zip(TWO_TYPES, names, strict=True))


TWO_BODY = f"""%body2 (bp: {TWO}) -> {TWO} {{
  %bp = {TWO} parameter(0)
  %i = s32[] get-tuple-element({TWO} %bp), index=0
  %x = f32[1000]{{0}} get-tuple-element({TWO} %bp), index=1
  %s = f32[250]{{0}} get-tuple-element({TWO} %bp), index=2
  %c = f32[100]{{0}} get-tuple-element({TWO} %bp), index=3
  %pb = {AG_BIG} get-tuple-element({TWO} %bp), index=4
  %ps = {AG_SMALL} get-tuple-element({TWO} %bp), index=5
  %all-gather-done.s = f32[1000]{{0}} all-gather-done({AG_SMALL} %ps)
  %cc = f32[100]{{0}} add(f32[100]{{0}} %c, f32[100]{{0}} %c)
  %all-gather-done.b = f32[4000]{{0}} all-gather-done({AG_BIG} %pb)
  %all-gather-start.b = {AG_BIG} all-gather-start(f32[1000]{{0}} %x), {GROUPS}
  %all-gather-start.s = {AG_SMALL} all-gather-start(f32[250]{{0}} %s), {GROUPS}
  ROOT %out = {TWO} tuple({_two("%i", "%x", "%s", "%cc", "%all-gather-start.b", "%all-gather-start.s")})
}}"""
TWO_COND = f"""%cond2 (cp: {TWO}) -> pred[] {{
  %cp = {TWO} parameter(0)
  ROOT %k = pred[] constant(true)
}}"""
TWO_IN_FLIGHT = _module(
    f"""ENTRY %main (p: f32[1000], s: f32[250], c: f32[100]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %s = f32[250]{{0}} parameter(1)
  %c = f32[100]{{0}} parameter(2)
  %all-gather-start.b0 = {AG_BIG} all-gather-start(f32[1000]{{0}} %p), {GROUPS}
  %all-gather-start.s0 = {AG_SMALL} all-gather-start(f32[250]{{0}} %s), {GROUPS}
  %i0 = s32[] constant(0)
  %t = {TWO} tuple({_two("%i0", "%p", "%s", "%c", "%all-gather-start.b0", "%all-gather-start.s0")})
  %loop = {TWO} while({TWO} %t), condition=%cond2, body=%body2, backend_config={{"known_trip_count":{{"n":"4"}}}}
  %gb = {AG_BIG} get-tuple-element({TWO} %loop), index=4
  %gs = {AG_SMALL} get-tuple-element({TWO} %loop), index=5
  %all-gather-done.s1 = f32[1000]{{0}} all-gather-done({AG_SMALL} %gs)
  ROOT %all-gather-done.b1 = f32[4000]{{0}} all-gather-done({AG_BIG} %gb)
}}""",
    TWO_COND,
    TWO_BODY,
)


def test_loop_carried_transfer_is_matched_by_value_not_by_order():
    """Two transfers in flight through the loop tuple, done in the other order than started: each
    iteration starts a big gather (T_b) then a small one (T_s) on the same links, which they share
    (each at half speed while both run: the small one ends at 2 T_s, the big one at T_b + T_s). The
    next iteration waits for the small one first, computes C, then waits for the big one. Matched
    by value, C runs while the big one finishes: T_b + T_s per iteration. Matched by order, the
    first done would wait for the big one (the oldest) and C would run after it: T_b + T_s + C."""
    spec = _spec()
    tb, ts, c = gather_ns(1000, spec), gather_ns(250, spec), add_ns(100, spec)
    assert 2 * ts + c < tb + ts  # so that by value C hides, and the two answers differ by 4 C
    p = timeline.predict(parse(TWO_IN_FLIGHT), spec)
    assert p.step_ns == pytest.approx(5 * (tb + ts), rel=1e-12)
    assert p.device["exposed_ns_by_kind"]["all-gather"] == pytest.approx(5 * (tb + ts) - 4 * c, rel=1e-12)
    small_dones = [e for e in p.events if e.name.startswith("all-gather-done.s")]
    assert [e.end_ns - e.start_ns for e in small_dones] == pytest.approx([2 * ts] * 5, rel=1e-12)


def replica_groups(attributes: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """The groups the simulator gives a collective with these attributes."""
    found = device_groups(attributes)
    return all_devices(None if found is None else tuple(tuple(g) for g in found), num_devices)


def test_iota_replica_groups_resolve_to_groups_and_link_dims():
    assert replica_groups("replica_groups=[2,4]<=[8], dims", 8) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert replica_groups("replica_groups=[4,2]<=[2,4]T(1,0), x", 8) == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert replica_groups("replica_groups=[4,2]<=[2,2,2]T(1,0,2)", 8) == ((0, 1), (4, 5), (2, 3), (6, 7))
    assert replica_groups("replica_groups={}, dimensions={0}", 4) == ((0, 1, 2, 3),)
    assert replica_groups("replica_groups={{0,2},{1,3}}", 4) == ((0, 2), (1, 3))
    mesh = "replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}, dimensions={1}"
    assert replica_groups(mesh, 8) == ((0, 4), (1, 5), (2, 6), (3, 7))
    # v6e:2x4, devices numbered row-major (x fastest): device i at chip (i % 2, i // 2).
    spec = timeline.spec_for("v6e:2x4", "tpu")
    link = groups.link_bytes_per_s(spec)  # datasheet x the measured link efficiency
    assert spec.topology.wraparound == (False, False)  # both dims shorter than the 16-chip pod
    along_y = route((0, 4), spec)  # (0,0) and (0,2): the y dimension only, a line
    assert (along_y.queues, along_y.bytes_per_s) == (("dim1",), link)
    both = route((0, 1, 2, 3), spec)  # x in {0,1}, y in {0,1}
    assert (both.queues, both.bytes_per_s) == (("dim0", "dim1"), 2 * link)
    ring = route(tuple(range(0, 256, 16)), timeline.spec_for("v6e:16x16", "tpu"))  # a full, wrapped y ring
    assert (ring.queues, ring.bytes_per_s) == (("dim1",), 2 * link)


def test_tpu7x_group_inside_one_chip_uses_the_on_chip_link():
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    assert spec.topology.devices_per_chip == 2 and len(spec.topology.device_coords) == 8
    inside = route((0, 1), spec)  # the two cores of chip (0, 0, 0)
    assert (inside.queues, inside.bytes_per_s) == (("core",), spec.value("on_chip_bytes_per_s"))
    across = route((0, 2), spec)  # core 0 of chips (0,0,0) and (1,0,0): shares the chip's x link
    assert (across.queues, across.bytes_per_s) == (("dim0",), groups.link_bytes_per_s(spec) / 2)


def test_tpu7x_chip_ports_divided_among_the_collectives_groups_on_the_chip():
    """Devices 2c and 2c+1 are chip c's two cores (x fastest). The all-gather table's groups (one core on
    each of the 4 chips, the other cores' group at once) share each chip's ports 2 ways; MaxDiffusion's
    context groups (both cores of 2 chips) hold the x link alone; one group of all 8 uses both dims."""
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    link = groups.link_bytes_per_s(spec)
    table = groups.slowest_route(((0, 2, 4, 6), (1, 3, 5, 7)), spec)
    assert (table.queues, table.bytes_per_s) == (("dim0", "dim1"), 2 * link / 2)
    context = groups.slowest_route(((0, 1, 2, 3), (4, 5, 6, 7)), spec)
    assert (context.queues, context.bytes_per_s) == (("dim0",), link)
    assert groups.groups_sharing_chips(((0, 1, 2, 3), (4, 5, 6, 7)), spec) == [1, 1]
    assert groups.groups_sharing_chips(((0, 2), (1, 3), (4, 6), (5, 7)), spec) == [2, 2, 2, 2]
    assert groups.slowest_route(((0, 2), (1, 3)), spec).bytes_per_s == link / 2
    assert groups.slowest_route((tuple(range(8)),), spec).bytes_per_s == 2 * link
    # the slower hop sets a ring's pace: an on-chip link slower than the ICI share caps it
    slow = dataclasses.replace(
        spec,
        constants={
            **spec.constants,
            "on_chip_bytes_per_s": dataclasses.replace(spec.constants["on_chip_bytes_per_s"], value=link / 4),
        },
    )
    assert groups.slowest_route(((0, 1, 2, 3), (4, 5, 6, 7)), slow).bytes_per_s == link / 4
    assert groups.slowest_route(((0, 2, 4, 6), (1, 3, 5, 7)), slow).bytes_per_s == link  # no on-chip hop
    # the interval's other readings: per_core (the rule before) halves the context group, own halves nothing
    per_core, own = (dataclasses.replace(spec, core_links=use) for use in ("per_core", "own"))
    assert groups.slowest_route(((0, 1, 2, 3), (4, 5, 6, 7)), per_core).bytes_per_s == link / 2
    assert groups.slowest_route(((0, 2, 4, 6), (1, 3, 5, 7)), per_core).bytes_per_s == link
    assert groups.slowest_route(((0, 2, 4, 6), (1, 3, 5, 7)), own).bytes_per_s == 2 * link
    assert "core_links:per_core" in timeline.bound_specs(spec)


def test_chrome_json_round_trip_gives_the_same_accounting():
    p = timeline.predict(parse(LOOP), _spec())
    table = read_chrome_trace(json.dumps(p.chrome_trace()))
    (back,) = device_metrics(table.events)
    for key in (
        "window_ns",
        "busy_ns",
        "compute_ns",
        "collective_ns",
        "exposed_collective_ns",
        "idle_ns",
        "wasted_ns",
        "wasted_fraction",
    ):
        assert getattr(back, key) == pytest.approx(p.device[key], rel=1e-9, abs=1e-6), key
    assert back.collective_ns_by_kind == pytest.approx(p.device["collective_ns_by_kind"], rel=1e-9)
    lanes = {e["args"]["name"] for e in p.chrome_trace()["traceEvents"] if e.get("name") == "thread_name"}
    assert lanes == {"compute", "all-gather"}


@pytest.mark.parametrize(
    "topology, platform", [("v6e:2x4", "tpu"), ("tpu7x:2x2x1", "tpu"), ("h100:1x1x8", "gpu"), ("h200:1x1x8", "gpu")]
)
def test_spec_table_constants_have_unit_and_source(topology, platform):
    spec = timeline.spec_for(topology, platform)
    assert {"peak_flops_per_s", "hbm_bytes_per_s", "op_overhead_s", "collective_latency_s", "link_bytes_per_s"} <= set(
        spec.constants
    )
    for name, c in spec.constants.items():
        assert c.unit and c.source and math.isfinite(c.value) and c.value > 0, name
    assert spec.topology.source
    json.dumps(spec.to_dict())
    scaled = spec.scaled("link_bytes_per_s", 1.2)
    assert scaled.value("link_bytes_per_s") == pytest.approx(1.2 * spec.value("link_bytes_per_s"))
    assert scaled.value("hbm_bytes_per_s") == spec.value("hbm_bytes_per_s")


def test_cpu_spec_and_errors():
    spec = timeline.cpu_spec(1e11, 1e10, 5e-6, "measured: test", devices=8)
    assert all(c.source.startswith("measured: test") for c in spec.constants.values())
    assert len(spec.topology.device_coords) == 8
    with pytest.raises(ValueError, match="copy_bytes_per_s"):
        timeline.cpu_spec(1e11, 0.0, 5e-6, "measured: test")
    with pytest.raises(ValueError, match="cpu_spec"):
        timeline.spec_for(None, "cpu")
    with pytest.raises(KeyError, match="no constant 'nope'"):
        spec.scaled("nope", 1.2)


def test_sensitivity_names_the_constant_that_moves_the_step_most():
    spec = _spec(latency_s=1e-6)
    out = timeline.sensitivity(parse(SYNC), spec)
    assert out["most"] == "link_bytes_per_s"  # the 12000 ns transfer outweighs 12000 ns of compute + 1 us
    low, high = out["constants"]["link_bytes_per_s"]["low_step_s"], out["constants"]["link_bytes_per_s"]["high_step_s"]
    wire_s = 4 * 1000 * (GROUP - 1) / LINK
    assert low - high == pytest.approx(wire_s / 0.8 - wire_s / 1.2, rel=1e-9)
    assert out["step_s"] == pytest.approx(timeline.predict(parse(SYNC), spec).step_ns / 1e9, rel=1e-12)


def test_prediction_to_dict_is_json():
    p = timeline.predict(parse(LOOP), _spec(), scope_of=lambda op_name: "")
    out = json.loads(json.dumps(p.to_dict()))
    assert out["step_s"] == pytest.approx(p.step_ns / 1e9)
    assert {
        "exposed_all_gather_fraction",
        "wasted_fraction",
        "critical_path",
        "block_gantt",
        "spec",
        "notes",
        "simulate_s",
        "device",
    } <= set(out)
    # Without scopes the loop's middle iteration is the block Gantt: a done, A, a start, B.
    names = [e["name"] for e in out["block_gantt"] if not e["name"].endswith("(transfer)")]
    assert names == ["all-gather-done.2", "ya", "all-gather-start.2", "zb"]


def test_timeline_and_chrome_reader_import_no_jax():
    import subprocess
    import sys

    code = (
        "import sys, harness.metrics.timeline, harness.metrics.measured.chrome, harness.metrics.measured.accounting; "
        "print(sorted(m for m in ('jax', 'jaxlib', 'flax', 'ltx2') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# libtpu 0.0.42.1's tpu7x step: collectives offloaded to the SparseCore as call-start/call-done of a
# computation holding the collective (async_execution_thread="sparsecore"), copies offloaded the same way.
SC = 'async_execution_thread="sparsecore"'
AGC = "((f32[1000]{0}, token[]), f32[4000]{0})"


def _sparsecore(copy_n: int) -> str:
    """An offloaded all-gather of f32[1000] and an offloaded copy of f32[copy_n], an add between."""
    cpc, arr = f"((f32[{copy_n}]{{0}}), f32[{copy_n}]{{0}})", f"f32[{copy_n}]{{0}}"
    return _module(
        f"ENTRY %main (p: f32[1000], q: f32[500], c: {arr}) -> f32[4000] {{\n"
        "  %p = f32[1000]{0} parameter(0)\n"
        "  %q = f32[500]{0} parameter(1)\n"
        f"  %c = {arr} parameter(2)\n"
        "  %tok = token[] after-all()\n"
        f"  %ag.call-start = {AGC} call-start(f32[1000]{{0}} %p, token[] %tok), {SC}, to_apply=%sc_gather\n"
        f"  %cp.call-start = {cpc} call-start({arr} %c), {SC}, to_apply=%sc_copy\n"
        "  %a = f32[500]{0} add(f32[500]{0} %q, f32[500]{0} %q)\n"
        f"  %cp.call-done = {arr} call-done({cpc} %cp.call-start)\n"
        f"  ROOT %ag.call-done = f32[4000]{{0}} call-done({AGC} %ag.call-start)\n"
        "}",
        """%sc_gather (x: f32[1000], t: token[]) -> f32[4000] {
  %x = f32[1000]{0} parameter(0)
  %t = token[] parameter(1)
  ROOT %ag = f32[4000]{0} all-gather(f32[1000]{0} %x), replica_groups={{0,1,2,3}}, dimensions={0}
}, execution_thread="sparsecore\"""",
        f"""%sc_copy (y: {arr}) -> {arr} {{
  %y = {arr} parameter(0)
  ROOT %yc = {arr} copy({arr} %y)
}}, execution_thread="sparsecore\"""",
    )


def test_a_collective_offloaded_by_call_start_runs_beside_compute_and_so_does_a_small_copy():
    spec = _spec()
    t = gather_ns(1000, spec)
    assert add_ns(500, spec) == pytest.approx(t / 2)
    p = timeline.predict(parse(_sparsecore(250)), spec)
    # the all-gather runs from its call-start to its call-done, half hidden by the add; the copy
    # (8000 bytes at 1 B/ns) ends under the add, so its call-done waits for nothing
    assert p.step_ns == pytest.approx(t, rel=1e-12)
    assert p.device["collective_ns_by_kind"] == {"all-gather": pytest.approx(t, rel=1e-12)}
    assert p.device["exposed_ns_by_kind"] == {"all-gather": pytest.approx(t / 2, rel=1e-12)}


def test_an_offloaded_copy_moves_its_bytes_at_hbm_bandwidth_and_its_done_waits():
    """A copy of f32[8000] (32000 bytes read, 32000 written: 64000 ns at 1 B/ns) started at 0: its
    call-done, after the add (T/2), waits until 64000 ns. The wait is the stream idling (no
    collective exposed: the gather ended at T = 12000 ns, before the copy's done), on the critical
    path as ``offload``."""
    spec = _spec()
    t, a = gather_ns(1000, spec), add_ns(500, spec)
    p = timeline.predict(parse(_sparsecore(8000)), spec)
    assert p.step_ns == pytest.approx(64000.0, rel=1e-12)
    assert p.device["exposed_ns_by_kind"] == {}
    waited = {c["op"]: (c["category"], c["ns"]) for c in p.critical_path}
    assert waited["cp.call-start"] == ("offload", pytest.approx(64000.0 - a, rel=1e-12))
    assert t < 64000.0


def test_a_slice_prefetch_into_vmem_is_an_offload_and_its_reader_moves_no_hbm_bytes():
    """slice-start copies f32[8000] (32000 bytes) of an HBM f32[16000] into VMEM, beside an add of
    f32[500] (6000 ns); its slice-done waits until 32000 ns; the add reading the VMEM slice moves no
    HBM bytes (0 ns without overhead). The wait is on the critical path as ``offload``."""
    spec = _spec()
    ss = "((f32[16000]{0}), f32[8000]{0:S(1)}, s32[]{:S(2)})"
    text = _module(f"""ENTRY %main (c: f32[16000], q: f32[500]) -> f32[8000] {{
  %c = f32[16000]{{0}} parameter(0)
  %q = f32[500]{{0}} parameter(1)
  %ss = {ss} slice-start(f32[16000]{{0}} %c), slice={{[0:8000]}}
  %a = f32[500]{{0}} add(f32[500]{{0}} %q, f32[500]{{0}} %q)
  %sd = f32[8000]{{0:S(1)}} slice-done({ss} %ss)
  ROOT %b = f32[8000]{{0:S(1)}} add(f32[8000]{{0:S(1)}} %sd, f32[8000]{{0:S(1)}} %sd)
}}""")
    p = timeline.predict(parse(text), spec)
    assert p.step_ns == pytest.approx(32000.0, rel=1e-12)
    waited = {c["op"]: (c["category"], c["ns"]) for c in p.critical_path}
    assert waited["ss"] == ("offload", pytest.approx(32000.0 - add_ns(500, spec), rel=1e-12))
