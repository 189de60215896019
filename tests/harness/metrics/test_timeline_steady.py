"""The simulator's steady-state skip: where two iterations of a loop start in the same state relative
to the clock (link backlogs, transfers in flight, the loop value's tokens), the rest of the loop is
added in one step. Only the step time is kept then (``record=False``: sensitivity, intervals), and it
must equal the full simulation's, as must the exposed and critical-path totals. Expected values are
closed forms from ``test_timeline``'s constants (an ``add`` of f32[N]: 12N ns; a gather of f32[N]
over 4 devices: 12N ns)."""

from __future__ import annotations

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.timeline.program import build_program
from harness.metrics.timeline.simulate import Simulator
from tests.harness.metrics.test_timeline import (
    GROUPS,
    LOOP,
    TWO_IN_FLIGHT,
    _module,
    _spec,
    add_ns,
    gather_ns,
)

TRIPS = 50


def _trips(text: str, n: int) -> str:
    return text.replace('"known_trip_count":{"n":"4"}', f'"known_trip_count":{{"n":"{n}"}}')


class _Counting(Simulator):
    """Counts the runs of each computation."""

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.runs: dict[str, int] = {}

    def run(self, computation, args=()):  # type: ignore[no-untyped-def]
        self.runs[computation] = self.runs.get(computation, 0) + 1
        return super().run(computation, args)


def _both(text: str) -> tuple[_Counting, _Counting]:
    """(the no-record simulation, the full one) of ``text``, each finished."""
    program, spec = build_program(parse(text)), _spec()
    fast, full = _Counting(program, spec, record=False), _Counting(program, spec, record=True)
    fast.finish(), full.finish()
    return fast, full


def _same_totals(fast: Simulator, full: Simulator) -> None:
    assert fast.state.exposed == pytest.approx(full.state.exposed, rel=1e-12)
    assert fast.state.critical.keys() == full.state.critical.keys()
    for key, (ns, count) in full.state.critical.items():
        assert fast.state.critical[key][0] == pytest.approx(ns, rel=1e-12), key
        assert fast.state.critical[key][1] == count, key


def test_pipelined_loop_reaches_a_steady_state_and_skips_to_its_end():
    """``test_timeline``'s pipelined gather, 50 iterations: T + 50 (A + T) + C either way; after the
    prologue's transfer is waited for, every iteration starts alike, so the no-record run executes
    only the first few bodies."""
    spec = _spec()
    t, a, c = gather_ns(1000, spec), add_ns(250, spec), add_ns(4000, spec)
    fast, full = _both(_trips(LOOP, TRIPS))
    expected = t + TRIPS * (a + t) + c
    assert fast.state.t == pytest.approx(expected, rel=1e-12)
    assert full.state.t == pytest.approx(expected, rel=1e-12)
    assert full.runs["body"] == TRIPS
    assert fast.runs["body"] <= 3
    _same_totals(fast, full)
    assert timeline.step_ns(build_program(parse(_trips(LOOP, TRIPS))), spec) == pytest.approx(expected, rel=1e-12)


def test_tokens_carried_through_the_loop_are_matched_after_the_skip():
    """Two transfers in flight through the loop tuple, waited for in the other order than started
    (``test_timeline``): 31 (T_b + T_s) over 30 iterations, with the skip too (matched by order
    instead, 30 C more)."""
    spec = _spec()
    tb, ts = gather_ns(1000, spec), gather_ns(250, spec)
    fast, full = _both(_trips(TWO_IN_FLIGHT, 30))
    assert fast.state.t == pytest.approx(31 * (tb + ts), rel=1e-12)
    assert full.runs["body2"] == 30
    assert fast.runs["body2"] <= 3
    _same_totals(fast, full)


def _condition(name: str, state: str) -> str:
    """A loop condition over ``state`` (the simulator runs a loop its known trip count times)."""
    return f"%{name} (cp: {state}) -> pred[] {{\n  %cp = {state} parameter(0)\n  ROOT %k = pred[] constant(true)\n}}"


AGS = "(f32[1000]{0}, f32[4000]{0})"
KNOWN_TRIPS = f'backend_config={{"known_trip_count":{{"n":"{TRIPS}"}}}}'
PAIR = f"(s32[], f32[1000]{{0}}, f32[100]{{0}}, {AGS})"
GROWING = _module(
    f"""ENTRY %main (p: f32[1000], c: f32[100]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %c = f32[100]{{0}} parameter(1)
  %all-gather-start.0 = {AGS} all-gather-start(f32[1000]{{0}} %p), {GROUPS}
  %i0 = s32[] constant(0)
  %t = {PAIR} tuple(s32[] %i0, f32[1000]{{0}} %p, f32[100]{{0}} %c, {AGS} %all-gather-start.0)
  %loop = {PAIR} while({PAIR} %t), condition=%gcond, body=%gbody, {KNOWN_TRIPS}
  %g = {AGS} get-tuple-element({PAIR} %loop), index=3
  ROOT %all-gather-done.9 = f32[4000]{{0}} all-gather-done({AGS} %g)
}}""",
    _condition("gcond", PAIR),
    f"""%gbody (bp: {PAIR}) -> {PAIR} {{
  %bp = {PAIR} parameter(0)
  %i = s32[] get-tuple-element({PAIR} %bp), index=0
  %x = f32[1000]{{0}} get-tuple-element({PAIR} %bp), index=1
  %c = f32[100]{{0}} get-tuple-element({PAIR} %bp), index=2
  %all-gather-start.1 = {AGS} all-gather-start(f32[1000]{{0}} %x), {GROUPS}
  %cc = f32[100]{{0}} add(f32[100]{{0}} %c, f32[100]{{0}} %c)
  ROOT %out = {PAIR} tuple(s32[] %i, f32[1000]{{0}} %x, f32[100]{{0}} %cc, {AGS} %all-gather-start.1)
}}""",
)


def test_a_loop_whose_backlog_grows_is_simulated_to_the_end():
    """Each iteration queues a gather (T) on the same links and computes C < T, and no iteration
    waits: the links' backlog grows by T - C per iteration, no two iterations start alike, and
    every body runs. The transfers end one after another: the step is 51 T (the prologue's and 50)."""
    spec = _spec()
    t, c = gather_ns(1000, spec), add_ns(100, spec)
    assert c < t
    fast, full = _both(GROWING)
    assert fast.runs["gbody"] == full.runs["gbody"] == TRIPS
    step = timeline.step_ns(build_program(parse(GROWING)), spec)
    assert step == pytest.approx((TRIPS + 1) * t, rel=1e-12)
    _same_totals(fast, full)


BIG = "(f32[4000]{0}, f32[16000]{0})"
ONE = "(s32[], f32[100]{0})"
LONG = _module(
    f"""ENTRY %main (p: f32[4000], c: f32[100]) -> f32[16000] {{
  %p = f32[4000]{{0}} parameter(0)
  %c = f32[100]{{0}} parameter(1)
  %all-gather-start.0 = {BIG} all-gather-start(f32[4000]{{0}} %p), {GROUPS}
  %i0 = s32[] constant(0)
  %t = {ONE} tuple(s32[] %i0, f32[100]{{0}} %c)
  %loop = {ONE} while({ONE} %t), condition=%lcond, body=%lbody, {KNOWN_TRIPS}
  ROOT %all-gather-done.0 = f32[16000]{{0}} all-gather-done({BIG} %all-gather-start.0)
}}""",
    _condition("lcond", ONE),
    f"""%lbody (bp: {ONE}) -> {ONE} {{
  %bp = {ONE} parameter(0)
  %i = s32[] get-tuple-element({ONE} %bp), index=0
  %c = f32[100]{{0}} get-tuple-element({ONE} %bp), index=1
  %cc = f32[100]{{0}} add(f32[100]{{0}} %c, f32[100]{{0}} %c)
  ROOT %out = {ONE} tuple(s32[] %i, f32[100]{{0}} %cc)
}}""",
)


def test_no_skip_while_a_transfer_from_before_the_loop_is_still_running():
    """A gather started before the loop (T = 40 iterations' compute) runs under its first 40
    iterations: those start in different states (less of it left each time), so the skip comes
    only once it has ended, and the step is 50 C, the gather hidden. Skipping earlier would move
    its end by the skipped iterations: 50 C + T - 2 C or so."""
    spec = _spec()
    t, c = gather_ns(4000, spec), add_ns(100, spec)
    assert t == pytest.approx(40 * c)
    fast, full = _both(LONG)
    assert full.state.t == pytest.approx(TRIPS * c, rel=1e-12)
    assert fast.state.t == pytest.approx(TRIPS * c, rel=1e-12)
    assert 40 <= fast.runs["lbody"] < TRIPS
    _same_totals(fast, full)


@pytest.mark.parametrize("text", [_trips(LOOP, TRIPS), _trips(TWO_IN_FLIGHT, 30)], ids=["pipelined", "two-in-flight"])
def test_op_totals_with_the_skip_equal_the_recorded_events_sums(text: str):
    """``op_totals`` (no events; the skip adds a steady loop's later iterations at once) gives each op
    the category, summed time and count that the full simulation's events give it, and the XProf op
    profile of either is the same: what the XProf shares' interval reads at each of its points."""
    from harness.metrics.xprof.predicted import program_costs, xprof_entry, xprof_totals

    program, spec = build_program(parse(text)), _spec()
    full = _Counting(program, spec, record=True)
    full.finish()
    expected: dict[str, list] = {}
    for e in full.state.events:
        if e.name.endswith(" (transfer)"):
            continue
        entry = expected.setdefault(e.name, [e.category, 0.0, 0])
        entry[1] += e.end_ns - e.start_ns
        entry[2] += 1
    totals = timeline.op_totals(program, spec)
    assert totals.keys() == expected.keys()
    for name, (category, ns, count) in expected.items():
        assert totals[name][0] == category, name
        assert totals[name][1] == pytest.approx(ns, rel=1e-12, abs=1e-9), name
        assert totals[name][2] == count, name
    assert sum(n for _, _, n in totals.values()) > 30  # the loop's ops counted over every iteration
    costs, opcodes = program_costs(program.ops)
    peaks = {"peak_flops_per_s": 1e12, "hbm_bytes_per_s": 1e11}
    a = xprof_entry(full.state.events, costs, opcodes, **peaks)
    b = xprof_totals(totals, costs, opcodes, **peaks)
    assert b.all_gather_wasted_fraction == pytest.approx(a.all_gather_wasted_fraction, rel=1e-12)
    assert a.all_gather_wasted_fraction > 0
    assert b.categories.keys() == a.categories.keys()
    offloaded = {**opcodes, next(iter(totals)): "call-done"}  # a SparseCore op: XProf's async-done, either way
    a = xprof_entry(full.state.events, costs, offloaded, **peaks)
    b = xprof_totals(totals, costs, offloaded, **peaks)
    assert "async-done" in a.categories and b.categories.keys() == a.categories.keys()
