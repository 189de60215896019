"""XProf's op-profile definitions (:mod:`harness.metrics.xprof.metrics`) on hand-computed ops, and
a predicted timeline written as an XSpace (:mod:`harness.metrics.xprof.predicted`) read back by
xprof's own converters (``xprof.convert.raw_to_tool_data.xspace_to_tool_data``: trace viewer, op
profile, HLO stats, roofline), whose numbers must equal ours.

The spec: HBM 1 B/ns, links 1 B/ns, peak 1 TFLOP/s, 2 us collective latency, no op overhead. An
``add(f32[N], f32[N])`` moves 12N bytes at HBM speed (HBM utilisation 1, nothing wasted); an
all-gather of f32[1000] over 4 devices sends 12000 bytes: 2000 + 12000 = 14000 ns, no FLOPs; it
carries the 20000 HBM bytes it reads and writes (4000 + 16000, as XProf's inputs count a
collective's bytes accessed), which at this spec's 1 B/ns HBM would take longer than its op time:
HBM-bound by XProf's definition, nothing of it wasted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.measured.trace import analyze_trace
from harness.metrics.timeline.specs import Constant, TimelineSpec, Topology
from harness.metrics.xprof.metrics import OpCost, from_xprof_op_profile, is_all_gather, op_costs, op_profile
from harness.metrics.xprof.predicted import program_costs, write_predicted_xspace, xprof_entry
from harness.metrics.xprof.xplane_write import XOp, write_xspace

raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")

HEADER = "HloModule test, is_scheduled=true, num_partitions=4\n\n"
GROUPS = "replica_groups={{0,1,2,3}}, dimensions={0}"
AGS = "(f32[1000]{0}, f32[4000]{0})"
SYNC = (
    HEADER
    + f"""ENTRY %main (p: f32[1000], q: f32[500]) -> f32[500] {{
  %p = f32[1000]{{0}} parameter(0)
  %q = f32[500]{{0}} parameter(1)
  %a = f32[500]{{0}} add(f32[500]{{0}} %q, f32[500]{{0}} %q)
  %ag = f32[4000]{{0}} all-gather(f32[1000]{{0}} %p), {GROUPS}
  ROOT %b = f32[500]{{0}} add(f32[500]{{0}} %a, f32[500]{{0}} %a)
}}"""
)
ASYNC = (
    HEADER
    + f"""ENTRY %main (p: f32[1000], q: f32[500]) -> f32[4000] {{
  %p = f32[1000]{{0}} parameter(0)
  %q = f32[500]{{0}} parameter(1)
  %all-gather-start = {AGS} all-gather-start(f32[1000]{{0}} %p), {GROUPS}
  %a = f32[500]{{0}} add(f32[500]{{0}} %q, f32[500]{{0}} %q)
  ROOT %all-gather-done = f32[4000]{{0}} all-gather-done({AGS} %all-gather-start)
}}"""
)
PEAKS = {"peak_flops_per_s": 1e12, "hbm_bytes_per_s": 1e9}


def _spec() -> TimelineSpec:
    c = {
        "peak_flops_per_s": Constant(1e12, "FLOP/s", "test"),
        "hbm_bytes_per_s": Constant(1e9, "B/s", "test"),
        "op_overhead_s": Constant(0.0, "s", "test"),
        "collective_latency_s": Constant(2e-6, "s", "test"),
        "link_bytes_per_s": Constant(1e9, "B/s", "test"),
    }
    return TimelineSpec("test", "gpu", c, Topology("switch", (1, 1, 4)))


def test_op_profile_definitions_by_hand() -> None:
    ops = [
        OpCost("dot.1", "convolution", 1000.0, flops=5e5, bytes=100.0),  # 0.5 TFLOP/s: util 0.5
        OpCost("fusion.2", "fusion", 500.0, flops=0.0, bytes=400.0),  # 0.8 B/ns: HBM util 0.8
        OpCost("all-gather-done.3", "all-gather", 500.0),
    ]
    out = op_profile(ops, top=2, **PEAKS)
    cats = out["categories"]
    assert cats["convolution"]["time_fraction"] == pytest.approx(0.5)
    assert cats["convolution"]["flops_utilization"] == pytest.approx(0.5)
    assert cats["convolution"]["wasted_fraction"] == pytest.approx(0.5 * 0.5)
    assert cats["fusion"]["hbm_bw_utilization"] == pytest.approx(0.8)
    assert cats["fusion"]["wasted_fraction"] == pytest.approx(0.25 * 0.2)
    assert out["all_gather_wasted_fraction"] == pytest.approx(0.25)
    assert list(cats) == ["all-gather", "convolution", "fusion"]  # most wasted first
    assert [o["op"] for o in out["top_wasted_ops"]] == ["all-gather-done.3", "dot.1"]
    assert out["root"]["flops_utilization"] == pytest.approx(5e5 / 2000e-9 / 1e12)
    assert out["root"]["hbm_bw_utilization"] == pytest.approx(500 / 2000)


def test_op_costs_sum_executions_and_skip_transfers() -> None:
    rows = [("f", "compute", 10.0), ("f", "compute", 30.0), ("ag-start (transfer)", "all-gather", 99.0)]
    (cost,) = op_costs(rows, {"f": (7.0, 3.0)}, {"f": "fusion"})
    assert (cost.op, cost.category, cost.time_ns, cost.flops, cost.bytes, cost.occurrences) == (
        "f",
        "fusion",
        40.0,
        14.0,
        6.0,
        2,
    )


def _xprof(path: Path, tool: str, params: dict | None = None) -> object:
    out = raw_to_tool_data.xspace_to_tool_data([str(path)], tool, params or {})
    data = out[0] if isinstance(out, tuple) else out
    return json.loads(data)


@pytest.mark.parametrize(
    "hlo, ag_ns, step_ns",
    [(SYNC, 14000.0, 26000.0), (ASYNC, 14000.0 - 6000.0, 14000.0)],  # async: 6000 ns hidden behind %a
)
def test_predicted_xspace_opens_in_xprof_with_our_numbers(hlo: str, ag_ns: float, step_ns: float, tmp_path) -> None:
    spec = _spec()
    prediction = timeline.predict(parse(hlo), spec)
    assert prediction.step_ns == pytest.approx(step_ns)
    costs, opcodes = program_costs(timeline.build_program(parse(hlo)).ops)
    ours = xprof_entry(prediction.events, costs, opcodes, **PEAKS)
    path = write_predicted_xspace(tmp_path, prediction.events, costs, opcodes, **PEAKS)
    assert path == tmp_path / "plugins/profile/predicted/predicted.xplane.pb"
    # the all-gather's op time (sync op, or start + done wait) over all op time, less what its HBM
    # bytes explain: 20000 bytes at 1 B/ns is more than its op time, so none of it is wasted
    assert costs["ag" if "ag" in costs else "all-gather-start"] == (0.0, 20000.0)
    hbm_util = min(1.0, 20000.0 / ag_ns)
    assert ours["all_gather_wasted_fraction"] == pytest.approx(ag_ns / step_ns * (1 - hbm_util)) == 0.0
    assert ours["categories"]["add"]["hbm_bw_utilization"] == pytest.approx(1.0)

    profile = _xprof(path, "op_profile", {"group_by": "category"})
    theirs = from_xprof_op_profile(profile)
    assert theirs["all_gather_wasted_fraction"] == pytest.approx(ours["all_gather_wasted_fraction"], abs=1e-9)
    assert theirs["root"]["time_ns"] == pytest.approx(step_ns)
    for cat, node in ours["categories"].items():
        for key in ("time_fraction", "flops_utilization", "hbm_bw_utilization", "wasted_fraction"):
            assert theirs["categories"][cat][key] == pytest.approx(node[key], abs=1e-9), (cat, key)

    trace = _xprof(path, "trace_viewer")
    spans = {e["name"]: e["dur"] for e in trace["traceEvents"] if e.get("ph") == "X"}
    for e in (e for e in prediction.events if e.end_ns > e.start_ns):  # the viewer drops 0-length ones
        assert spans[e.name] == pytest.approx((e.end_ns - e.start_ns) / 1e3, abs=1e-6), e.name
    lines = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"XLA Ops", "XLA Modules", "Steps"} <= lines

    hlo_stats = _xprof(path, "hlo_stats")
    ids = [c["id"] for c in hlo_stats["cols"]]
    names = {row["c"][ids.index("hlo_op_name")]["v"] for row in hlo_stats["rows"]}
    assert {"a"} <= names
    roofline = _xprof(path, "roofline_model")
    assert roofline and roofline[0]["rows"]


def test_a_tpu_trace_is_cross_checked_against_xprofs_converter(tmp_path) -> None:
    """A TPU-layout trace (two steps on one core: fusion, async all-gather, convolution) read by our
    trace reader gives the op-profile numbers xprof's converter gives for the same file."""
    ops = []
    for t0 in (0.0, 1000.0):
        ops += [
            XOp("fusion.1", "fusion", t0, t0 + 300),
            XOp("all-gather-start.2", "all-gather", t0 + 300, t0 + 310),
            XOp("convolution.3", "convolution", t0 + 310, t0 + 700),
            XOp("all-gather-done.2", "all-gather", t0 + 700, t0 + 900),
        ]
    path = write_xspace(tmp_path / "t.xplane.pb", ops, peak_flops_per_s=1e12, hbm_bytes_per_s=1e9)
    xprof = analyze_trace(path).xprof
    assert xprof is not None and xprof["converter"] is not None
    assert xprof["all_gather_wasted_fraction"] == pytest.approx(420 / 1800)
    assert set(xprof["categories"]) == {"fusion", "convolution", "all-gather"}
    for cat, node in xprof["categories"].items():
        assert xprof["converter"]["categories"][cat]["wasted_fraction"] == pytest.approx(node["wasted_fraction"]), cat


SC = 'async_execution_thread="sparsecore"'
AGC, CPC = "((f32[1000]{0}, token[]), f32[4000]{0})", "((f32[2000]{0}), f32[2000]{0})"
OFFLOADED = (
    HEADER
    + f"""ENTRY %main (p: f32[1000], q: f32[500], c: f32[2000]) -> (f32[4000], f32[2000]) {{
  %p = f32[1000]{{0}} parameter(0)
  %q = f32[500]{{0}} parameter(1)
  %c = f32[2000]{{0}} parameter(2)
  %tok = token[] after-all()
  %all-gather.7.call-start = {AGC} call-start(f32[1000]{{0}} %p, token[] %tok), {SC}, to_apply=%sc_gather
  %copy.3.call-start = {CPC} call-start(f32[2000]{{0}} %c), {SC}, to_apply=%sc_copy
  %a = f32[500]{{0}} add(f32[500]{{0}} %q, f32[500]{{0}} %q)
  %all-gather.7.call-done = f32[4000]{{0}} call-done({AGC} %all-gather.7.call-start)
  %copy.3.call-done = f32[2000]{{0}} call-done({CPC} %copy.3.call-start)
  ROOT %r = (f32[4000]{{0}}, f32[2000]{{0}}) tuple(%all-gather.7.call-done, %copy.3.call-done)
}}

%sc_gather (x: f32[1000], t: token[]) -> f32[4000] {{
  %x = f32[1000]{{0}} parameter(0)
  %t = token[] parameter(1)
  ROOT %ag = f32[4000]{{0}} all-gather(f32[1000]{{0}} %x), {GROUPS}
}}, execution_thread="sparsecore"

%sc_copy (y: f32[2000]) -> f32[2000] {{
  %y = f32[2000]{{0}} parameter(0)
  ROOT %yc = f32[2000]{{0}} copy(f32[2000]{{0}} %y)
}}, execution_thread="sparsecore\""""
)


def test_a_sparsecore_all_gather_is_filed_as_xprof_files_it_and_still_counted_as_an_all_gather(tmp_path) -> None:
    """libtpu files an offloaded op's ``call-start`` / ``call-done`` under ``async-start`` /
    ``async-done`` (xprof's SparseCore-offload test), so the all-gather category is empty; the share
    counts the async ops named ``all-gather.*`` (xprof's SparseCore-offload rule) and not the copy's.
    Timeline (HBM 1 B/ns, links 1 B/ns, 2 us latency): both call-starts at 0; the add 0-6000 ns; the
    gather (2000 + 12000 ns) ends at 14000, its call-done waits 6000-14000; the copy (16000 bytes at
    1 B/ns) ends at 16000, its call-done waits 14000-16000. The gather's 20000 HBM bytes are its
    zero-length call-start's, a node apart from its done in XProf, so its 8000 ns wait is all wasted:
    8000 / 16000 (as one node with its start, 0.25 of a 10 B/ns peak, it would be 0.375)."""
    peaks = {"peak_flops_per_s": 1e12, "hbm_bytes_per_s": 1e10}
    prediction = timeline.predict(parse(OFFLOADED), _spec())
    assert prediction.step_ns == pytest.approx(16000.0)
    costs, opcodes = program_costs(timeline.build_program(parse(OFFLOADED)).ops)
    assert costs["all-gather.7.call-start"] == (0.0, 20000.0)
    ours = xprof_entry(prediction.events, costs, opcodes, **peaks)
    cats = ours["categories"]
    assert set(cats) == {"add", "async-start", "async-done"}  # no all-gather category
    assert is_all_gather("jit_f/all-gather.7.call-done", "async-done") and not is_all_gather(
        "copy.3.call-done", "async-done"
    )
    assert cats["async-done"]["time_fraction"] == pytest.approx(10000 / 16000)
    assert ours["all_gather_wasted_fraction"] == pytest.approx(8000 / 16000)

    xspace = write_predicted_xspace(tmp_path, prediction.events, costs, opcodes, **peaks)
    theirs = from_xprof_op_profile(_xprof(xspace, "op_profile", {"group_by": "category"}))
    assert "all-gather" not in theirs["categories"] and "async-done" in theirs["categories"]
    assert theirs["all_gather_wasted_fraction"] == pytest.approx(ours["all_gather_wasted_fraction"], abs=1e-9)
