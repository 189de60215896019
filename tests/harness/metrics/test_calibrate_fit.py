"""Fitting a spec to per-instruction durations: synthetic traces from known constants come back."""

from __future__ import annotations

import pytest

from harness.calibration import fit as calibrate
from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.measured.events import OpEvent
from harness.metrics.timeline.program import build_program
from harness.metrics.timeline.simulate import Simulator

TRUE = {"peak": 4e10, "hbm": 3e9, "overhead": 5e-6, "latency": 2e-5, "link": 1e9}
DEVICES = 4


def _program_text(adds: int = 12, dots: int = 10, reduces: int = 9) -> str:
    params, lines, i = [], [], 0
    for n in range(adds):
        size = 1000 * (n + 1) ** 2
        params.append(f"a{n}: f32[{size}]")
        lines += [
            f"  %a{n} = f32[{size}]{{0}} parameter({i})",
            f"  %add{n} = f32[{size}]{{0}} add(f32[{size}]{{0}} %a{n}, f32[{size}]{{0}} %a{n})",
        ]
        i += 1
    for n in range(dots):
        m, k = 16 * (n + 1), 2048 * (n + 1)  # long contractions: compute-bound on any CPU
        params.append(f"l{n}: f32[{m},{k}]")
        lines += [
            f"  %l{n} = f32[{m},{k}]{{1,0}} parameter({i})",
            f"  %r{n} = f32[{k},{m}]{{1,0}} transpose(f32[{m},{k}]{{1,0}} %l{n}), dimensions={{1,0}}",
            f"  %dot{n} = f32[{m},{m}]{{1,0}} dot(f32[{m},{k}]{{1,0}} %l{n}, f32[{k},{m}]{{1,0}} %r{n}), "
            "lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        ]
        i += 1
    for n in range(reduces):
        size = 4096 * (n + 1)
        params.append(f"c{n}: f32[{size}]")
        lines += [
            f"  %c{n} = f32[{size}]{{0}} parameter({i})",
            f"  %ar{n} = f32[{size}]{{0}} all-reduce(f32[{size}]{{0}} %c{n}), replica_groups={{{{0,1,2,3}}}}, "
            "to_apply=%sum",
        ]
        i += 1
    lines.append("  ROOT %t = () tuple()")
    reducer = "%sum (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] parameter(1)\n"
    reducer += "  ROOT %s = f32[] add(f32[] %x, f32[] %y)\n}\n\n"
    head = f"HloModule synthetic, is_scheduled=true, num_partitions={DEVICES}\n\n"
    return head + reducer + f"ENTRY %main ({', '.join(params)}) -> () {{\n" + "\n".join(lines) + "\n}\n"


def _truth() -> timeline.TimelineSpec:
    return timeline.cpu_spec(
        TRUE["peak"],
        TRUE["hbm"],
        TRUE["overhead"],
        "measured: the synthetic truth",
        devices=DEVICES,
        collective_latency_s=TRUE["latency"],
        collective_bytes_per_s=TRUE["link"],
    )


def _synthetic_durations(text: str) -> dict[str, float]:
    """Each instruction's duration as the truth spec prices it (compute: the simulator's own price;
    a collective: latency + ring wire bytes / link)."""
    program = build_program(parse(text))
    sim = Simulator(program, _truth(), record=False)
    out = {}
    for op in program.ops[program.entry]:
        if op.cls == "compute":
            out[op.name] = sim.compute_ns(op)
        elif op.cls == "sync":
            out[op.name] = sim.transfer(op)[1]
    return out


def test_synthetic_traces_recover_the_constants_within_5_percent() -> None:
    text = _program_text()
    program = build_program(parse(text))
    measured = _synthetic_durations(text)
    base = timeline.cpu_spec(1e10, 1e10, 1e-6, "measured: a wrong start", devices=DEVICES)  # all far off
    pts = calibrate.samples(program, measured, base)
    assert {c: sum(p.cls == c for p in pts) for c in calibrate.CLASSES} == {"matmul": 10, "memory": 22, "collective": 9}
    fitted = calibrate.fit(pts, base, origin="synthetic").spec
    assert fitted.value("peak_flops_per_s") == pytest.approx(TRUE["peak"], rel=0.05)
    assert fitted.value("hbm_bytes_per_s") == pytest.approx(TRUE["hbm"], rel=0.05)
    assert fitted.value("op_overhead_s") == pytest.approx(TRUE["overhead"], rel=0.05)
    assert fitted.value("link_bytes_per_s") == pytest.approx(TRUE["link"], rel=0.05)
    assert fitted.value("collective_latency_s") == pytest.approx(TRUE["latency"], rel=0.05)
    assert fitted.constants["peak_flops_per_s"].source.startswith("fitted: synthetic")


def test_a_class_with_too_few_instructions_is_refused_by_name() -> None:
    text = _program_text(dots=3)
    program = build_program(parse(text))
    base = timeline.cpu_spec(1e10, 1e10, 1e-6, "measured: start", devices=DEVICES)
    pts = calibrate.samples(program, _synthetic_durations(text), base)
    with pytest.raises(calibrate.CalibrationError, match=r"too few instructions.*matmul \(3\)"):
        calibrate.fit(pts, base)


def test_a_trace_of_another_compile_is_refused() -> None:
    program = build_program(parse(_program_text()))
    other = _synthetic_durations(_program_text(adds=14))  # add12, add13 exist only in the other program
    with pytest.raises(calibrate.CalibrationError, match="compiled differently"):
        calibrate.check_program(program, other, "other.xplane.pb")
    calibrate.check_program(program, _synthetic_durations(_program_text()), "same.xplane.pb")
    sparse = dict(list(_synthetic_durations(_program_text()).items())[:3])
    with pytest.raises(calibrate.CalibrationError, match="not a trace of this program"):
        calibrate.check_program(program, sparse, "sparse.xplane.pb")
    assert calibrate.fingerprint(program) == calibrate.fingerprint(build_program(parse(_program_text())))
    assert calibrate.fingerprint(program) != calibrate.fingerprint(build_program(parse(_program_text(adds=14))))


def test_busy_is_one_devices_op_time_per_step_over_the_median_step_window() -> None:
    """Two steps of 100 and 140 ns (median 120); device 0 runs 30 + 20 ns in the first (a while of 20
    ns whose body op of 15 ns leaves 5 ns of its own) and 40 ns, 10 of them a rendezvous wait, in the
    second; an op outside the windows and device 1's ops are not counted: (50 + 30) / 2 = 40 ns per
    step, a ratio of 1/3."""
    ev = OpEvent
    events = [
        ev(0, "m", "a", "compute", 0, 30),
        ev(0, "m", "loop", "compute", 40, 60, self_ns=5),
        ev(0, "m", "body", "compute", 42, 57),
        ev(0, "m", "ar", "all-reduce", 200, 240, rendezvous_wait_ns=10),
        ev(0, "m", "late", "compute", 400, 450),
        ev(1, "m", "a", "compute", 0, 90),
    ]
    got = calibrate.busy(events, [(0, 100), (200, 340)], device=0, source="t.xplane.pb")
    assert got is not None and (got.wall_ns, got.busy_ns, got.steps) == (120, 40, 2)
    assert got.ratio == pytest.approx(1 / 3) and got.source == "t.xplane.pb"
    assert calibrate.busy(events, [], device=0) is None  # no step annotations
    assert calibrate.busy(events, [(1000, 1100)], device=0) is None  # no ops in the windows


def _two_regimes() -> list[calibrate.Sample]:
    """20 short memory ops at 1 ns per byte (+ 500 ns each) and 4 long ones at 4 ns per byte: the
    short ones are most of the ops, the long ones 99.9% of the time (as a cache-resident op beside
    ones that stream from DRAM)."""
    short = [calibrate.Sample(f"s{i}", "memory", 100.0 * (i + 1), 500 + 100.0 * (i + 1)) for i in range(20)]
    long = [calibrate.Sample(f"l{i}", "memory", 1e6 * (i + 1), 500 + 4e6 * (i + 1)) for i in range(4)]
    return short + long


def test_weighted_median_splits_the_weight() -> None:
    assert calibrate.weighted_median([3.0, 1.0, 2.0], [1.0, 1.0, 1.0]) == 2.0
    assert calibrate.weighted_median([1.0, 2.0, 3.0], [1.0, 1.0, 10.0]) == 3.0
    assert calibrate.weighted_median([1.0, 2.0], [1.0, 1.0]) == 1.0  # an exact split: the lower


def test_the_time_weighted_slope_prices_the_long_ops_that_make_the_step() -> None:
    """Theil-Sen follows the many short ops (1 ns per byte) and prices the class's total time 3.99x
    short (40.03 ms traced, 10.03 priced); weighting each op's slope by its time gives the long ops'
    4 ns per byte, which prices the total within the short ops' share of it (their 21000 bytes at 3
    ns too many: 63 us of 40.03 ms). Both keep the short ops' 500 ns intercept."""
    pts = _two_regimes()
    count = calibrate._fit_class("memory", pts, "count")
    time = calibrate._fit_class("memory", pts, "time")
    assert count.slope_ns == pytest.approx(1.0) and count.intercept_ns == pytest.approx(500.0)
    assert time.slope_ns == pytest.approx(4.0) and time.intercept_ns == pytest.approx(500.0)
    total = sum(p.measured_ns for p in pts)

    def priced(c: calibrate.ClassFit) -> float:
        return sum(c.slope_ns * p.x + c.intercept_ns for p in pts)

    assert total / priced(count) == pytest.approx(40_033_000 / 10_033_000)
    assert priced(time) == pytest.approx(total + 3 * 21_000)


def test_an_unknown_weighting_is_refused() -> None:
    with pytest.raises(ValueError, match="weighting 'mean'"):
        calibrate.fit(_two_regimes(), timeline.cpu_spec(1e10, 1e10, 1e-6, "start"), weighting="mean")
