"""A real TPU v6e profile read through the measured-trace path, as a user's would be.

The fixture (``tests/harness/fixtures/real/``, provenance beside it) is xprof's own test XSpace from
one host of a v6e job: four device planes, a host-offload stress program. Every number asserted here
was read from the file with :mod:`harness.metrics.measured.xplane_read` (a wire-format decoder) and
``jax.profiler.ProfileData``, not copied from a README. About 3 s (two xprof converter runs).
"""

from __future__ import annotations

import json
import shutil
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from harness.metrics.measured.trace import analyze_trace
from harness.metrics.measured.xplane_read import global_chips, hlo_protos, op_metadata, peaks, read_xspace
from harness.metrics.measured.xspace import read_trace

REAL = Path(__file__).parents[1] / "fixtures" / "real" / "v6e-tpu_inference_2.xplane.pb"
F32_ARRAY = 5 * 1024 * 1024 * 256 * 4  # f32[5,1024,1024,256]: 5,368,709,120 bytes
MS = 1e6


@pytest.fixture(scope="module")
def table():
    return read_trace(REAL)


@pytest.fixture(scope="module")
def planes():
    return read_xspace(REAL)


def _per(table, module: str, op: str) -> dict[int, list[float]]:
    out: dict[int, list[float]] = defaultdict(list)
    for e in table.events:
        if e.module == module and e.op == op:
            out[e.device].append(e.exclusive_ns)
    return out


def test_ops_per_device_and_modules(table):
    counts = defaultdict(int)
    for e in table.events:
        counts[e.device] += 1
    # TPU:0 also ran the one-op jit_broadcast_in_dim (broadcast.2): 1504 against 1503.
    assert dict(counts) == {0: 1504, 1: 1503, 2: 1503, 3: 1503}
    assert table.platform == "tpu"
    assert {e.module for e in table.events} == {"jit_f", "jit__psum", "jit_broadcast_in_dim"}
    # No Steps line and no host step annotations: TPU:0's 105 module executions are the steps.
    assert len(table.steps) == 105


def test_module_times_and_host_offload(table, planes):
    assert global_chips(planes) == {0: 4, 1: 5, 2: 6, 3: 7}  # this host's planes are chips 4-7 of 8
    assert peaks(planes) == (918e12, pytest.approx(1637.993152512e9))
    runs = defaultdict(list)
    for plane in planes:
        line = plane.line("XLA Modules")
        if line is None:
            continue
        names = {m.id: m.name.rsplit("(", 1)[0] for m in plane.event_metadata.values()}
        for e in line.events:
            runs[(plane.name, names[e.metadata_id])].append(e.duration_ps / 1e9)
    for device in range(4):
        jit_f = runs[(f"/device:TPU:{device}", "jit_f")]
        assert len(jit_f) == 100 and 783.5 < statistics.mean(jit_f) < 784.5  # ms: 784.15, 784.24, 784.17, 784.01
    offload = {op for module, op in table.host_offload if module == "jit_f"}
    assert offload == {f"copy-{kind}{n}" for kind in ("start", "done") for n in ("", ".1", ".2", ".3", ".4", ".5")}
    # The copy-dones that wait for a 5.37 GB host<->HBM copy: medians 182-195 ms on every device.
    for op in ("copy-done", "copy-done.2", "copy-done.4", "copy-done.5"):
        for device, times in _per(table, "jit_f", op).items():
            assert len(times) == 100 and 182 * MS < statistics.median(times) < 195 * MS, (op, device)
    # Only TPU:0 recorded its async line: 600 copy spans, start to done.
    assert {e.device for e in table.async_events} == {0} and len(table.async_events) == 600


def test_all_reduce_and_fusions(table, planes):
    meta = op_metadata(planes)
    all_reduce = meta[("jit__psum", "all-reduce")]
    assert all_reduce.category == "all-reduce" and all_reduce.bytes_accessed == 2 * F32_ARRAY
    assert "f32[5,1024,1024,256]" in all_reduce.text and "replica_groups=[4,2]<=[2,4]T(1,0)" in all_reduce.text
    for device, times in _per(table, "jit__psum", "all-reduce").items():
        assert len(times) == 3 and all(121.6 * MS < t < 121.8 * MS for t in times), device
    for op in ("broadcast_add_fusion", "broadcast_add_fusion.1", "broadcast_add_fusion.2"):
        assert meta[("jit_f", op)].bytes_accessed == 2 * F32_ARRAY  # 10.74 GB read + written
        for device, times in _per(table, "jit_f", op).items():
            assert 7.3 * MS < statistics.median(times) < 8.4 * MS, (op, device)
    assert set(hlo_protos(planes)) == {
        "jit_f",
        "jit__psum",
        "jit_broadcast_in_dim",
        "jit_convert_element_type",
    }


def xprof_converter_hlo_stats(xplane: str | Path) -> dict[tuple[str, str], dict[str, float]]:
    """xprof's own ``hlo_stats`` tool on an XSpace file: ``(program id, op)`` -> its
    ``occurrences``, ``total_self_ns`` and ``category`` (the table's ``#Occurrences``, ``Total
    self time (us)``, ``HLO op category``), summed over the profile's devices as xprof does."""
    from xprof.convert import raw_to_tool_data

    out = raw_to_tool_data.xspace_to_tool_data([str(xplane)], "hlo_stats", {})
    table = json.loads(out[0] if isinstance(out, tuple) else out)
    labels = [c.get("label", "") for c in table.get("cols", [])]
    at = {name: labels.index(name) for name in ("Program id", "HLO op name", "HLO op category", "#Occurrences")}
    self_us = labels.index("Total self time (us)")
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for row in table.get("rows", []):
        v = [c.get("v") for c in row["c"]]
        rows[(str(v[at["Program id"]]), str(v[at["HLO op name"]]))] = {
            "occurrences": float(v[at["#Occurrences"]]),
            "total_self_ns": float(v[self_us]) * 1e3,
            "category": str(v[at["HLO op category"]]),
        }
    return rows


def test_xprof_numbers_agree_with_xprofs_converters(table, tmp_path):
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    copy = tmp_path / REAL.name  # xprof's converters cache their op stats beside the file they read
    shutil.copyfile(REAL, copy)
    metrics = analyze_trace(copy)
    ours, theirs = metrics.xprof, metrics.xprof["converter"]
    assert theirs is not None and set(ours["categories"]) == set(theirs["categories"])
    assert set(ours["categories"]) == {"copy-done", "loop fusion", "all-reduce", "broadcast", "copy-start"}
    for name in ("root", *ours["categories"]):
        mine = ours["root"] if name == "root" else ours["categories"][name]
        xprof = theirs["root"] if name == "root" else theirs["categories"][name]
        for key in ("time_ns", "time_fraction", "flops_utilization", "hbm_bw_utilization", "wasted_fraction"):
            assert mine[key] == pytest.approx(xprof[key], rel=1e-9, abs=1e-12), (name, key)
    totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
    for e in table.events:
        totals[(e.module, e.op)][0] += e.exclusive_ns
        totals[(e.module, e.op)][1] += 1
    programs = {
        "12190760917235803885": "jit_f",
        "9646411105960254074": "jit__psum",
        "11287434908481120160": "jit_broadcast_in_dim",
    }
    stats = xprof_converter_hlo_stats(copy)
    assert len(stats) == len(totals) == 17  # 12 copies, 3 fusions, the all-reduce, broadcast.2
    for (program, op), row in stats.items():
        ns, count = totals[(programs[program], op)]
        assert row["occurrences"] == count and row["total_self_ns"] == pytest.approx(ns, rel=1e-9), op


def test_overview_page_idle_is_xprofs_own(table, tmp_path):
    """xprof's overview page finds no step here and counts only its "high confidence" idle: 13.4%
    of device time; our windows (first op start to last op end per device) hold 14.8% idle. The gap
    is the rule written in :mod:`harness.metrics.xprof.metrics`, not a number we reproduce."""
    pytest.importorskip("xprof.convert.raw_to_tool_data")
    import json

    from xprof.convert import raw_to_tool_data

    from harness.metrics.measured.accounting import device_metrics

    copy = tmp_path / REAL.name
    shutil.copyfile(REAL, copy)
    out = raw_to_tool_data.xspace_to_tool_data([str(copy)], "overview_page", {})
    analysis = json.loads(out[0] if isinstance(out, tuple) else out)[0]["p"]
    assert analysis["device_idle_time_percent"] == "13.4%"
    devices = device_metrics(table.events)
    ours = sum(d.idle_ns for d in devices) / sum(d.window_ns for d in devices)
    assert 0.147 < ours < 0.149
