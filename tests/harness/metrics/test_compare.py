"""The simulator's per-instruction prices against libtpu's estimated_cycles, on a hand-written program."""

from __future__ import annotations

import math

import pytest

from harness.metrics.hlo import parse
from harness.metrics.timeline import compare
from harness.metrics.timeline.program import build_program
from harness.metrics.timeline.specs import Constant, TimelineSpec, Topology

HBM = 1e9  # 1 byte per ns


def _spec() -> TimelineSpec:
    c = {
        "peak_flops_per_s": Constant(1e12, "FLOP/s", "test"),
        "hbm_bytes_per_s": Constant(HBM, "B/s", "test"),
        "op_overhead_s": Constant(0.0, "s", "test"),
        "collective_latency_s": Constant(0.0, "s", "test"),
        "link_bytes_per_s": Constant(1e9, "B/s", "test"),
    }
    return TimelineSpec("test", "tpu", c, Topology("switch", (1,)))


def _op(name: str, n: int, cycles: int) -> str:
    """An elementwise add over n f32 (12 n bytes: 12 n ns on this spec) with libtpu's estimate."""
    return (
        f"  %{name} = f32[{n}]{{0}} add(f32[{n}]{{0}} %p{n}, f32[{n}]{{0}} %p{n}), "
        f'backend_config={{"flag_configs":[],"estimated_cycles":"{cycles}"}}'
    )


def _module(ops: list[tuple[str, int, int]]) -> str:
    sizes = sorted({n for _, n, _ in ops})
    params = ", ".join(f"p{n}: f32[{n}]" for n in sizes)
    lines = [f"  %p{n} = f32[{n}]{{0}} parameter({i})" for i, n in enumerate(sizes)]
    lines += [_op(*o) for o in ops]
    lines[-1] = lines[-1].replace(f"  %{ops[-1][0]}", f"  ROOT %{ops[-1][0]}")
    return "HloModule m, is_scheduled=true\n\nENTRY %main (" + params + ") -> f32[1] {\n" + "\n".join(lines) + "\n}\n"


def test_estimates_are_read_and_compared_per_instruction() -> None:
    # a: 1200 ns / 1000 cycles, b: 2400 / 2000, c: 4800 / 4000 (ratio 1.2 each), d: 12000 ns / 1000 cycles (x10)
    text = _module([("a", 100, 1000), ("b", 200, 2000), ("c", 400, 4000), ("d", 1000, 1000)])
    program = build_program(parse(text))
    assert compare.compiler_estimates(program) == {"a": 1000.0, "b": 2000.0, "c": 4000.0, "d": 1000.0}
    prices = compare.op_prices(program, _spec())
    assert prices == pytest.approx({"a": 1200.0, "b": 2400.0, "c": 4800.0, "d": 12000.0})
    got = compare.compare_program(parse(text), _spec())
    assert got is not None and got.n == 4
    ratios = sorted([1.2, 1.2, 1.2, 12.0])
    assert got.median_ratio == pytest.approx((ratios[1] + ratios[2]) / 2)  # 1.2: ns per cycle
    assert got.unit == "predicted ns per compiler cycle"
    assert got.worst[0][0] == "d" and got.worst[0][3] == pytest.approx(10.0)  # the outlier first
    # price ranks a, b, c, d = 1, 2, 3, 4; cycle ranks 1.5, 3, 4, 1.5 (a and d tie): Pearson of the ranks
    assert got.spearman == pytest.approx(0.5 / math.sqrt(5 * 4.5))


def test_a_clock_turns_cycles_into_ns() -> None:
    text = _module([("a", 100, 1000), ("b", 200, 2000), ("c", 400, 4000)])
    got = compare.compare_program(parse(text), _spec(), clock_hz=1e9)  # 1 cycle = 1 ns
    assert got is not None and got.median_ratio == pytest.approx(1.2) and got.spearman == pytest.approx(1.0)
    assert got.unit == "predicted ns / compiler ns" and all(math.isclose(w[3], 1.0) for w in got.worst)
    assert got.to_dict()["worst"][0]["compiler_cycles"] in (1000.0, 2000.0, 4000.0)


def test_no_estimates_no_comparison() -> None:
    text = _module([("a", 100, 1000)]).replace(',"estimated_cycles":"1000"', "")
    assert compare.compare_program(parse(text), _spec()) is None
