"""Transfers sharing links (:mod:`harness.metrics.timeline.links`): closed forms of equal shares,
and the simulator's small synchronous collective beside a large asynchronous one. Times in ns;
a transfer's ``work`` is its time alone on its links."""

from __future__ import annotations

import dataclasses
import math

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.timeline.links import Links, Transfer, drain, shares
from harness.metrics.timeline.specs import spec_from_dict
from tests.harness.metrics.test_timeline import AGS, GROUPS, TWO_IN_FLIGHT, _module, _spec, add_ns, gather_ns


def _t(name: str, work: float, *queues: str) -> Transfer:
    return Transfer("all-gather", name, 0.0, 0.0, queues, work)


def test_shares_follow_the_most_crowded_link_set():
    flows = [_t("a", 1, "dim0"), _t("b", 1, "dim0", "dim1"), _t("c", 1, "dim1"), _t("d", 1, "dim1"), _t("e", 1, "x")]
    # dim0 carries 2, dim1 carries 3: b goes at a third, a at a half, c and d at a third, e alone
    assert shares(flows) == pytest.approx([1 / 2, 1 / 3, 1 / 3, 1 / 3, 1.0])


def test_two_transfers_starting_together_share_then_the_longer_runs_alone():
    """Works a < b on one link set: both at half speed until a ends at 2a, then b alone: a + b."""
    t, left, ends = drain([_t("a", 10.0, "dim0"), _t("b", 30.0, "dim0")], [10.0, 30.0], 100.0, math.inf)
    assert ends == pytest.approx([120.0, 140.0])
    assert t == pytest.approx(140.0) and left == [0.0, 0.0]


def test_drain_stops_at_until_with_the_work_left():
    t, left, ends = drain([_t("a", 10.0, "dim0"), _t("b", 30.0, "dim0")], [10.0, 30.0], 0.0, 8.0)
    assert (t, ends) == (8.0, [None, None])
    assert left == pytest.approx([6.0, 26.0])  # each at half speed for 8 ns


def test_a_late_transfer_ends_after_twice_its_work_and_delays_the_first_by_its_work():
    """B (work 100) alone from 0; s (work 10) joins at 40: both at half speed, s ends at 40 + 20 =
    60, B has 100 - 40 - 10 = 50 left then and ends at 110 (= 100 + s's work)."""
    links = Links()
    big, small = _t("B", 100.0, "dim0"), _t("s", 10.0, "dim0")
    links.add(big, 0.0)
    assert big.end_ns == pytest.approx(100.0)
    links.add(small, 40.0)
    assert (small.end_ns, big.end_ns) == (pytest.approx(60.0), pytest.approx(110.0))
    links.advance(70.0)  # s has left the links; B runs alone
    assert [f.name for f in links.flows] == ["B"]
    assert big.work_ns == pytest.approx(40.0)


def test_transfers_on_other_links_do_not_slow_each_other():
    links = Links()
    x, y = _t("x", 50.0, "dim0"), _t("y", 20.0, "dim1")
    links.add(x, 0.0)
    links.add(y, 10.0)
    assert (x.end_ns, y.end_ns) == (pytest.approx(50.0), pytest.approx(30.0))


BESIDE = _module(f"""ENTRY %main (p: f32[1000], s: f32[250]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %s = f32[250]{{0}} parameter(1)
  %all-gather-start = {AGS} all-gather-start(f32[1000]{{0}} %p), {GROUPS}
  %small = f32[1000]{{0}} all-gather(f32[250]{{0}} %s), {GROUPS}
  %a = f32[250]{{0}} add(f32[250]{{0}} %s, f32[250]{{0}} %s)
  ROOT %all-gather-done = f32[4000]{{0}} all-gather-done({AGS} %all-gather-start)
}}""")


def test_a_sync_collective_beside_an_async_one_waits_twice_its_time_not_the_whole_transfer():
    """The big gather (T_b) starts, then a small synchronous one (T_s) on the same links: it ends at
    2 T_s (a queue would end it at T_b + T_s), then the add (A), then the big one's done waits until
    T_b + T_s: the step is T_b + T_s, of which 2 T_s + (T_b + T_s - 2 T_s - A) is waiting."""
    spec = _spec()
    tb, ts, a = gather_ns(1000, spec), gather_ns(250, spec), add_ns(250, spec)
    assert 2 * ts + a < tb + ts
    p = timeline.predict(parse(BESIDE), spec)
    assert p.step_ns == pytest.approx(tb + ts, rel=1e-12)
    top = {c["op"]: c["ns"] for c in p.critical_path}
    assert top["small"] == pytest.approx(2 * ts, rel=1e-12)
    assert p.device["exposed_ns_by_kind"]["all-gather"] == pytest.approx(tb + ts - a, rel=1e-12)
    transfers = {e.name: (e.start_ns, e.end_ns) for e in p.events if e.name.endswith("(transfer)")}
    assert transfers["all-gather-start (transfer)"] == pytest.approx((0.0, tb + ts), rel=1e-12)
    assert transfers["small (transfer)"] == pytest.approx((0.0, 2 * ts), rel=1e-12)


def _fifo():
    return dataclasses.replace(_spec(), link_sharing="fifo")


def test_fifo_shares_give_the_links_to_the_earliest_transfer():
    flows = [_t("a", 1, "dim0"), _t("b", 1, "dim0", "dim1"), _t("c", 1, "dim1"), _t("d", 1, "x")]
    assert shares(flows, "fifo") == [1.0, 0.0, 0.0, 1.0]  # c waits behind b, which waits behind a
    t, _, ends = drain([_t("a", 10.0, "dim0"), _t("b", 30.0, "dim0")], [10.0, 30.0], 100.0, math.inf, "fifo")
    assert ends == pytest.approx([110.0, 140.0]) and t == pytest.approx(140.0)


def test_fifo_spec_makes_the_sync_collective_wait_for_the_whole_async_one():
    """``BESIDE`` with the other policy: the small gather starts when the big one ends (T_b) and ends
    at T_b + T_s, all of it waiting; the add runs after it (nothing left to hide it under): the
    step is T_b + T_s + A, A more than with fair shares."""
    spec = _fifo()
    tb, ts, a = gather_ns(1000, spec), gather_ns(250, spec), add_ns(250, spec)
    p = timeline.predict(parse(BESIDE), spec)
    assert p.step_ns == pytest.approx(tb + ts + a, rel=1e-12)
    assert {c["op"]: c["ns"] for c in p.critical_path}["small"] == pytest.approx(tb + ts, rel=1e-12)


def test_fifo_spec_gives_the_queued_answer_of_the_two_transfers_in_flight():
    """``test_timeline``'s two transfers through the loop, one after the other: the small one waits
    for the big one, so each iteration is T_b + T_s + C (C no longer hides)."""
    spec = _fifo()
    tb, ts, c = gather_ns(1000, spec), gather_ns(250, spec), add_ns(100, spec)
    assert timeline.predict(parse(TWO_IN_FLIGHT), spec).step_ns == pytest.approx(5 * (tb + ts) + 4 * c, rel=1e-12)


def test_the_interval_covers_the_other_link_sharing_policy():
    spec = _spec()
    u = timeline.uncertainty(parse(BESIDE), spec)
    assert u["link_sharing"] == "fair"
    assert u["points_s"]["link_sharing:fifo"] == pytest.approx(timeline.predict(parse(BESIDE), _fifo()).step_ns / 1e9)
    assert u["interval_s"][0] <= u["points_s"]["link_sharing:fifo"] <= u["interval_s"][1]
    assert "link_sharing:fair" in timeline.uncertainty(parse(BESIDE), _fifo())["points_s"]


def test_link_sharing_round_trips_through_a_spec_file_and_a_bad_one_is_refused():
    assert spec_from_dict(_fifo().to_dict()).link_sharing == "fifo"
    raw = _spec().to_dict()
    del raw["link_sharing"]  # a spec file written before the field: the default
    assert spec_from_dict(raw).link_sharing == "fair"
    with pytest.raises(ValueError, match="link_sharing 'lifo'"):
        spec_from_dict({**raw, "link_sharing": "lifo"}, "cal.json")


def _branch(i: int) -> str:
    return f"""%b{i} (x{i}: f32[1000]) -> f32[4000] {{
  %x{i} = f32[1000]{{0}} parameter(0)
  ROOT %g{i} = f32[4000]{{0}} all-gather(f32[1000]{{0}} %x{i}), {GROUPS}
}}"""


OPERANDS = ", ".join(["f32[1000]{0} %p"] * 3)
THREE_BRANCHES = _module(
    f"""ENTRY %main (i: s32[], p: f32[1000]) -> f32[4000] {{
  %i = s32[] parameter(0)
  %p = f32[1000]{{0}} parameter(1)
  ROOT %c = f32[4000]{{0}} conditional(s32[] %i, {OPERANDS}), branch_computations={{%b0, %b1, %b2}}
}}""",
    *(_branch(i) for i in range(3)),
)


@pytest.mark.parametrize("policy", ["fair", "fifo"])
def test_each_branch_of_a_conditional_starts_from_the_links_as_they_were(policy: str):
    """Three branches, each one gather (T) on the same links: every branch is simulated from the
    state before the conditional, so each takes T and the step is T. (A snapshot whose containers
    the branches shared let each branch find the links the previous one had left busy: T, T, 2T,
    and the slowest one run again after 2T: 3T.)"""
    spec = dataclasses.replace(_spec(), link_sharing=policy)
    t = gather_ns(1000, spec)
    assert timeline.predict(parse(THREE_BRANCHES), spec).step_ns == pytest.approx(t, rel=1e-12)
    assert timeline.step_ns(timeline.build_program(parse(THREE_BRANCHES)), spec) == pytest.approx(t, rel=1e-12)


HOST_IN = """HloModule m, is_scheduled=true
ENTRY %e (p0: f32[1000000], p1: f32[1000000]) -> (f32[1000000], f32[1000000]) {
  %p0 = f32[1000000]{0:S(5)} parameter(0)
  %p1 = f32[1000000]{0:S(5)} parameter(1)
  %cs0 = (f32[1000000]{0}, f32[1000000]{0:S(5)}, u32[]) copy-start(%p0)
  %cs1 = (f32[1000000]{0}, f32[1000000]{0:S(5)}, u32[]) copy-start(%p1)
  %cd0 = f32[1000000]{0} copy-done(%cs0)
  %cd1 = f32[1000000]{0} copy-done(%cs1)
  ROOT %t = (f32[1000000]{0}, f32[1000000]{0}) tuple(%cd0, %cd1)
}
"""


def test_the_host_link_has_its_own_policy_and_the_other_links_keep_theirs():
    host = [
        _t("a", 1, "host-in"),
        _t("b", 1, "dim0"),
        _t("c", 1, "host-in"),
        _t("d", 1, "dim0"),
        _t("e", 1, "host-out"),
    ]
    assert shares(host, "fair", "fifo") == [1.0, 0.5, 0.0, 0.5, 1.0]
    assert shares(host, "fifo", "fair") == [0.5, 1.0, 0.5, 0.0, 1.0]
    assert shares(host, "fair") == shares(host, "fair", "fair") == [0.5, 0.5, 0.5, 0.5, 1.0]


def _host(policy: str) -> timeline.TimelineSpec:
    return dataclasses.replace(timeline.spec_for("v6e:2x4", "tpu"), host_link_sharing=policy)


def test_two_host_copies_in_one_direction_are_served_in_order_by_default():
    """Two copies in issued together, each W alone on the link (4 MB at 32 GB/s): in order (the
    spec's default) the first done waits W and the second W more; fair, they end together, the
    first done waits 2W and the second not at all. The step is 2W either way, after the launch."""
    spec = timeline.spec_for("v6e:2x4", "tpu")
    assert spec.host_link_sharing == "fifo" and spec.link_sharing == "fair"
    w = 4e6 / spec.value("host_bytes_per_s") * 1e9
    launch = spec.value("program_launch_s") * 1e9  # before the first copy is issued
    for policy, waits in (("fifo", (w, w)), ("fair", (2 * w, 0.0))):
        p = timeline.predict(parse(HOST_IN), _host(policy))
        assert p.step_ns == pytest.approx(launch + 2 * w, rel=1e-9)
        done = {e.name: e.end_ns - e.start_ns for e in p.events if e.name.startswith("cd")}
        assert (done["cd0"], done["cd1"]) == pytest.approx(waits, rel=1e-9, abs=1e-6)
        # On the critical path each copy holds the link time it received: W each under both policies
        # (fair: the first done's 2W wait moved both copies' bytes, half each); none is free.
        path = {c["op"]: c["ns"] for c in p.critical_path}
        assert (path["cs0"], path["cs1"]) == pytest.approx((w, w), rel=1e-9)


def test_the_interval_covers_the_host_link_policy_where_the_program_copies_to_the_host():
    u = timeline.uncertainty(parse(HOST_IN), _host("fifo"))
    assert u["host_link_sharing"] == "fifo" and "host_link_sharing:fair" in u["assumed"]
    assert "host_link_sharing:fifo" in timeline.uncertainty(parse(HOST_IN), _host("fair"))["points_s"]
    assert not any(k.startswith("host_link") for k in timeline.uncertainty(parse(BESIDE), _spec())["points_s"])


def test_host_link_sharing_round_trips_and_a_bad_one_is_refused():
    assert spec_from_dict(_host("fair").to_dict()).host_link_sharing == "fair"
    raw = _spec().to_dict()
    del raw["host_link_sharing"]  # a spec file written before the field: the default
    assert spec_from_dict(raw).host_link_sharing == "fifo"
    with pytest.raises(ValueError, match="host_link_sharing 'lifo'"):
        spec_from_dict({**raw, "host_link_sharing": "lifo"}, "cal.json")
