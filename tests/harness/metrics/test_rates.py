"""The rates the hardware reaches (harness/metrics/timeline/rates.py): each spec prices the published
tables' own points back at their measured rates, carries a curve to a generation without a table as
an assumption, and puts the curves and the assumptions in the interval."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.timeline import groups, pricing, rates
from harness.metrics.timeline.pricing import Matmul


def _cubic(n: int) -> Matmul:
    return Matmul(1, n, n, n, 2.0 * n**3)


def _net(rows: tuple[rates.Row, ...], work: Callable[[float], float]) -> dict[float, float]:
    """Each row's rate less tpu7x's 1 us per op (the simulator adds it on its own)."""
    return {r.size: work(r.size) / (work(r.size) / r.value - 1e-6) for r in rows}


@pytest.mark.parametrize("row", rates.TPU7X_GEMM, ids=lambda r: r.row)
def test_tpu7x_prices_each_gemm_row_at_its_measured_time(row: rates.Row) -> None:
    """The table times each op on the device, its fixed cost included: the row's time, not that plus
    ``op_overhead_s`` again (128^3: 1.62 us, was 2.62)."""
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    mm = _cubic(int(row.size))
    assert spec.value("op_overhead_s") == 1e-6
    seconds = pricing.compute_seconds(mm.flops, 0.0, [mm], spec)  # sizes are multiples of the 256 tile
    assert seconds == pytest.approx(mm.flops / row.value, rel=1e-9)


def test_a_non_cubic_dot_takes_the_curve_at_its_geometric_mean_size() -> None:
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    mm = Matmul(8, 4096, 4096, 1024, 2.0 * 8 * 4096 * 4096 * 1024)  # per product: (4096*4096*1024)^(1/3) = 2580
    size = (4096 * 4096 * 1024) ** (1 / 3)
    w = math.log(size / 2048) / math.log(2)
    peak = spec.value("peak_flops_per_s")
    net = _net(rates.TPU7X_GEMM, rates.gemm_flops)
    expected = (net[2048] + w * (net[4096] - net[2048])) / peak
    assert pricing.efficiency(mm, spec) == pytest.approx(expected, rel=1e-9)
    # a dot the tile pads (m = 4 on an 8-row tile) loses the padding on top of the curve
    thin = Matmul(1, 4, 4096, 4096, 2.0 * 4 * 4096 * 4096)
    assert pricing.efficiency(thin, spec) == pytest.approx(0.5 * pricing.curve_efficiency(thin, pricing.curve(spec)))
    # opaque FLOPs (a splash kernel) at the best measured GEMM rate, net of its op's 1 us: 956.4 TFLOP/s
    assert 1e15 / pricing.matmul_seconds(1e15, [], spec) == pytest.approx(net[32768], rel=1e-12)
    assert net[32768] == pytest.approx(956.3824592e12, rel=2e-5)


@pytest.mark.parametrize("row", rates.TPU7X_HBM, ids=lambda r: r.row)
def test_tpu7x_prices_each_copy_row_at_its_measured_time(row: rates.Row) -> None:
    """A copy op of the row's size takes the row's time (2 MiB: 3.04 us, was 4.04 with the overhead
    counted twice); its bandwidth curve is the row's net of that overhead."""
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    assert pricing.compute_seconds(0.0, row.size, [], spec) == pytest.approx(row.size / row.value, rel=1e-9)
    assert pricing.hbm_bytes_per_s(row.size, spec) == pytest.approx(_net(rates.TPU7X_HBM, float)[row.size], rel=1e-9)


def test_a_row_no_longer_than_the_fixed_cost_is_refused() -> None:
    with pytest.raises(ValueError, match="row 7.*not above the fixed cost"):
        rates.net_of_fixed([rates.Row(1e3, 1e12, "row 7")], 1e-6, float)  # 1 ns of work


def test_tpu7x_all_gather_rows_are_reproduced_by_the_fitted_latency_and_link_efficiency() -> None:
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    route = groups.route((0, 2, 4, 6), spec)  # core 0 of each of the 4 chips: the group the fit assumes
    assert route.queues == ("dim0", "dim1")
    latency = spec.value("collective_latency_s")
    miss = spec.constants["collective_latency_s"].rel_uncertainty
    assert 0 < miss < 0.07  # the fit's largest miss on its own rows, stated as the uncertainty
    for row in rates.TPU7X_ALL_GATHER:
        predicted = latency + row.size / route.bytes_per_s
        assert predicted == pytest.approx(row.value, rel=miss + 1e-9), row.row
    # the datasheet stays as the upper bound: the efficiency is a fraction of it
    assert 0.85 < spec.value("link_efficiency") < 0.95 and spec.value("link_bytes_per_s") == pytest.approx(1e11)


def test_h100_comes_from_xla_tables_and_h200_carries_them_as_an_assumption() -> None:
    h100, h200 = timeline.spec_for("h100:1x1x8", "gpu"), timeline.spec_for("h200:1x1x8", "gpu")
    mm = _cubic(4096)
    assert mm.flops / pricing.matmul_seconds(mm.flops, [mm], h100) == pytest.approx(786048187408492, rel=1e-9)
    assert len(rates.H100_ALL_GATHER) == 22  # every sm_90 all-gather size of one group of 8
    latency, eff = h100.value("collective_latency_s"), h100.value("link_efficiency")
    lat_u, eff_u = (
        h100.constants["collective_latency_s"].rel_uncertainty,
        h100.constants["link_efficiency"].rel_uncertainty,
    )
    for row in rates.H100_ALL_GATHER:  # each row priced back within its dominant term's stated miss
        wire_s = row.size / (eff * 450e9 * 8 / 7)
        assert latency + wire_s == pytest.approx(row.value, rel=(lat_u if latency >= wire_s else eff_u) + 1e-9), row.row
    assert 0.06 < eff_u < 0.07 < lat_u  # large messages pin the bandwidth; XLA's small ones scatter 18-50 us
    largest = rates.H100_ALL_GATHER[-1]
    assert 7 / 8 * largest.size / largest.value / 450e9 == pytest.approx(eff, rel=eff_u)
    assert not h100.constants["matmul_eff_n4096"].source.startswith("assumed")
    assert h100.constants["hbm_eff_b4194304"].source.startswith("assumed: tpu7x")  # no GPU HBM table exists
    assert h100.value("hbm_eff_b4194304") == timeline.spec_for("tpu7x:2x2x1", "tpu").value("hbm_eff_b4194304")
    assert "curves:datasheet" in timeline.bound_specs(h100)  # a carried curve puts the datasheet in the interval
    assert h200.constants["matmul_eff_n4096"].source.startswith("assumed: H100")
    assert h200.value("matmul_eff_n4096") == h100.value("matmul_eff_n4096")


def test_v6e_carries_tpu7x_efficiencies_to_its_own_datasheet_and_says_so() -> None:
    v6e, tpu7x = timeline.spec_for("v6e:2x4", "tpu"), timeline.spec_for("tpu7x:2x2x1", "tpu")
    for family in rates.CURVE_FAMILIES:
        names = v6e.curve_names(family)
        assert names and names == tpu7x.curve_names(family)
        for n in names:
            assert v6e.value(n) == tpu7x.value(n)
            assert v6e.constants[n].source.startswith("assumed: tpu7x")
    big = 2 * 536870912
    assert pricing.hbm_bytes_per_s(big, v6e) == pytest.approx(1.64e12 * _net(rates.TPU7X_HBM, float)[big] / 3685e9)
    # the datasheet rates are the same spec without the curves: the old prices, the upper bound
    sheet = v6e.datasheet()
    assert not any(sheet.curve_names(f) for f in rates.CURVE_FAMILIES)
    assert pricing.hbm_bytes_per_s(big, sheet) == pytest.approx(1.64e12)
    assert groups.link_bytes_per_s(sheet) == sheet.value("link_bytes_per_s")


_PROGRAM = """HloModule m, entry_computation_layout={(f32[4096,4096]{1,0})->f32[4096,4096]{1,0}}

ENTRY %main (p: f32[4096,4096]) -> f32[4096,4096] {
  %p = f32[4096,4096]{1,0} parameter(0)
  %d = f32[4096,4096]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %a = f32[4096,4096]{1,0} add(%d, %d)
}
"""


def test_the_interval_moves_the_curves_and_names_what_is_assumed() -> None:
    program = timeline.build_program(parse(_PROGRAM))
    v6e, tpu7x = timeline.spec_for("v6e:2x4", "tpu"), timeline.spec_for("tpu7x:2x2x1", "tpu")
    measured = timeline.uncertainty(program, tpu7x)
    carried = timeline.uncertainty(program, v6e)
    for u in (measured, carried):
        assert {"matmul_eff_n:fast", "matmul_eff_n:slow", "hbm_eff_b:fast", "hbm_eff_b:slow"} <= set(u["points_s"])
        lo, hi = u["interval_s"]
        assert lo <= u["points_s"]["matmul_eff_n:fast"] < u["step_s"] < u["points_s"]["matmul_eff_n:slow"] <= hi
        assert "link_sharing:fifo" in u["assumed"] and "op_overhead_s:slow" in u["assumed"]
    # tpu7x's curves are its own tables (published, +-5%); v6e's are carried: assumed, and the datasheet in
    assert measured["curves"]["matmul_eff_n"] == pytest.approx(0.05) and "curves:datasheet" not in measured["points_s"]
    assert carried["curves"]["matmul_eff_n"] == pytest.approx(0.5) and "curves:datasheet" in carried["assumed"]
    assert carried["interval_s"][0] <= carried["points_s"]["curves:datasheet"] < carried["step_s"]
    assert timeline.step_ns(program, v6e.datasheet()) / 1e9 == pytest.approx(carried["points_s"]["curves:datasheet"])


_GATHER = """HloModule g, is_scheduled=true, num_partitions=8

ENTRY %main (p: bf16[1048576], q: bf16[2048,2048]) -> bf16[2048,2048] {
  %p = bf16[1048576]{0} parameter(0)
  %q = bf16[2048,2048]{1,0} parameter(1)
  %ags = (bf16[1048576]{0}, bf16[8388608]{0}) all-gather-start(bf16[1048576]{0} %p), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  %d = bf16[2048,2048]{1,0} dot(%q, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %agd = bf16[8388608]{0} all-gather-done((bf16[1048576]{0}, bf16[8388608]{0}) %ags)
  ROOT %e = bf16[2048,2048]{1,0} add(%d, %d)
}
"""  # noqa: E501 (HLO instructions are single lines)


def test_the_xprof_shares_get_an_interval_from_the_same_bounds() -> None:
    from harness.metrics.xprof.predicted import program_costs, xprof_entry
    from harness.run.predicted import xprof_interval

    spec = timeline.spec_for("v6e:2x4", "tpu")
    program = timeline.build_program(parse(_GATHER))
    costs, opcodes = program_costs(program.ops)
    peaks = {"peak_flops_per_s": spec.value("peak_flops_per_s"), "hbm_bytes_per_s": spec.value("hbm_bytes_per_s")}
    base = xprof_entry(timeline.simulate(program, spec).events, costs, opcodes, **peaks)
    out = xprof_interval(program, spec, base, costs, opcodes, peaks)
    assert set(out["points"]) == {
        "base",
        "fast",
        "slow",
        "curves:datasheet",
        "link_sharing:fifo",
        "links:slow",
        "links:fast",
    }
    lo, hi = out["all_gather_wasted_fraction"]
    values = [p["all_gather_wasted_fraction"] for p in out["points"].values()]
    assert lo == min(values) <= base["all_gather_wasted_fraction"] <= hi == max(values)
    assert lo < hi  # the gather outlasts the dot at the slow bound more than at the fast one
    crossed = out["points"]["links:slow"]["all_gather_wasted_fraction"]
    assert crossed > out["points"]["slow"]["all_gather_wasted_fraction"]  # slow links beside a fast dot: more waits


def test_the_crossed_bounds_move_the_links_against_everything_else() -> None:
    spec = timeline.spec_for("tpu7x:2x2x1", "tpu")
    bounds = timeline.share_bound_specs(spec)
    slow_links, fast_links = bounds["links:slow"], bounds["links:fast"]
    lat, link = spec.constants["collective_latency_s"], spec.constants["link_bytes_per_s"]
    assert slow_links.value("collective_latency_s") == pytest.approx(lat.value * (1 + lat.rel_uncertainty))
    assert slow_links.value("link_bytes_per_s") == pytest.approx(link.value / (1 + link.rel_uncertainty))
    assert slow_links.value("peak_flops_per_s") > spec.value("peak_flops_per_s") > fast_links.value("peak_flops_per_s")
    assert slow_links.value("link_efficiency") < spec.value("link_efficiency") < fast_links.value("link_efficiency")
    assert slow_links.value("matmul_eff_n4096") > spec.value("matmul_eff_n4096") > fast_links.value("matmul_eff_n4096")


def test_the_matmul_floor_divides_by_the_best_measured_gemm_rate_beside_the_datasheet() -> None:
    tpu7x, v6e, h200 = rates.matmul_rates("tpu7x"), rates.matmul_rates("v6e"), rates.matmul_rates("h200")
    assert tpu7x is not None and v6e is not None and h200 is not None
    assert tpu7x["achievable_flops_per_s"] == pytest.approx(956.3824592e12) and "row 32768" in tpu7x["source"]
    assert tpu7x["datasheet_flops_per_s"] == pytest.approx(1153.5e12)
    assert v6e["achievable_flops_per_s"] == pytest.approx(918e12 * 956.3824592 / 1153.5)
    assert v6e["source"].startswith("assumed: tpu7x")
    assert h200["achievable_flops_per_s"] == pytest.approx(786048187408492) and h200["source"].startswith("assumed")
    assert rates.matmul_rates("cpu") is None
