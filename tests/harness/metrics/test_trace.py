"""Trace capture and parsing: a real 8-device CPU trace, and exact maths on hand-made events."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.metrics.measured.accounting import (
    collective_spans,
    covered_ns,
    device_metrics,
    merge_intervals,
    overlap_ns,
)
from harness.metrics.measured.trace import CPU_NOTE, analyze_trace, capture_trace, top_ops
from harness.metrics.measured.xspace import COMPUTE, OpEvent, op_category, read_trace

STEPS = 2


@pytest.fixture(scope="module")
def xplane(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Trace of a program that all-gathers a weight and all-reduces a sum, run STEPS times."""
    mesh = jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))
    rows = NamedSharding(mesh, P("x", None))
    x = jax.device_put(jnp.ones((256, 64)), rows)
    w = jax.device_put(jnp.ones((64, 128)), rows)

    @jax.jit
    def traced_step(x, w):
        return jnp.tanh(jax.lax.with_sharding_constraint(x @ w, rows)).sum(axis=0)

    traced_step(x, w).block_until_ready()
    return capture_trace(lambda: traced_step(x, w), tmp_path_factory.mktemp("trace"), steps=STEPS)


def test_capture_writes_xplane(xplane: Path) -> None:
    assert xplane.name.endswith(".xplane.pb") and xplane.stat().st_size > 0


def test_op_table_has_every_device_and_collective(xplane: Path) -> None:
    table = read_trace(xplane, modules={"jit_traced_step"})
    assert table.platform == "cpu"
    assert table.devices == tuple(range(8))
    ops = {(e.op, e.category) for e in table.events}
    assert ("all-gather", "all-gather") in ops
    assert ("all-reduce", "all-reduce") in ops
    for device in range(8):
        per_device = [e for e in table.events if e.device == device]
        assert sum(e.category == "all-gather" for e in per_device) == STEPS
        assert sum(e.category == "all-reduce" for e in per_device) == STEPS
        assert any(e.category == COMPUTE for e in per_device)
    assert all(e.rendezvous_wait_ns == 0 for e in table.events if e.category == COMPUTE)
    assert sum(e.rendezvous_wait_ns for e in table.events) > 0


def test_device_metrics_are_consistent(xplane: Path) -> None:
    metrics = analyze_trace(xplane, modules={"jit_traced_step"})
    assert metrics.note == CPU_NOTE
    assert [d.device for d in metrics.devices] == list(range(8))
    for d in metrics.devices:
        assert 0 < d.busy_ns <= d.window_ns
        assert d.busy_ns == pytest.approx(d.compute_ns + d.exposed_collective_ns)
        assert d.idle_ns == pytest.approx(d.window_ns - d.busy_ns)
        assert set(d.collective_ns_by_kind) == {"all-gather", "all-reduce"}
        # CPU collectives are synchronous: nothing overlaps them.
        assert d.exposed_collective_ns == pytest.approx(d.collective_ns)
        assert d.collective_ns == pytest.approx(sum(d.collective_ns_by_kind.values()))
        assert 0 <= d.rendezvous_wait_ns <= d.collective_ns
        assert d.wasted_ns == pytest.approx(d.exposed_collective_ns + d.idle_ns)
        assert 0.0 <= d.wasted_fraction <= 1.0


def test_top_ops_and_json(xplane: Path) -> None:
    metrics = analyze_trace(xplane, modules={"jit_traced_step"}, top=10)
    by_op = {o.op: o for o in metrics.top_ops}
    assert by_op["all-gather"].count == 8 * STEPS
    assert by_op["all-gather"].category == "all-gather"
    assert [o.total_ns for o in metrics.top_ops] == sorted((o.total_ns for o in metrics.top_ops), reverse=True)
    d = metrics.to_dict()
    assert json.loads(json.dumps(d)) == d
    xprof = d["xprof"]  # XProf's op-profile numbers: all-gather op time over all op time (no costs: all wasted)
    ag = sum(o.total_ns for o in metrics.top_ops if o.category == "all-gather")
    total = sum(c["time_ns"] for c in xprof["categories"].values())
    assert xprof["all_gather_wasted_fraction"] == pytest.approx(ag / total, rel=1e-9)
    assert (
        metrics.xprof is not None and metrics.xprof.converter is None
    )  # xprof's op profile reads device planes: a CPU trace has none


@pytest.mark.parametrize(
    ("op", "category"),
    [
        ("all-gather", "all-gather"),
        ("all-gather-start.3", "all-gather"),
        ("all-reduce.1", "all-reduce"),
        ("all-reduce-scatter-fusion.2", "reduce-scatter"),
        ("reduce-scatter.7", "reduce-scatter"),
        ("collective-permute-done", "collective-permute"),
        ("ragged-all-to-all.2", "ragged-all-to-all"),
        ("all-to-all", "all-to-all"),
        ("ynn_fusion", COMPUTE),
        ("copy-start.1", COMPUTE),
    ],
)
def test_op_category_from_name(op: str, category: str) -> None:
    assert op_category(op) == category


def test_op_category_prefers_hlo_mapping() -> None:
    assert op_category("fusion.65", {"fusion.65": "reduce-scatter"}) == "reduce-scatter"
    assert op_category("fusion.66", {"fusion.65": "reduce-scatter"}) == COMPUTE


def test_interval_maths() -> None:
    merged = merge_intervals([(5, 7), (0, 2), (1, 3), (7, 8)])
    assert merged == [(0, 3), (5, 8)]
    assert covered_ns([(0, 2), (1, 3)]) == 3.0
    assert overlap_ns([(0, 3), (5, 8)], [(2, 6)]) == 2.0


def _ev(device: int, op: str, start: float, end: float) -> OpEvent:
    return OpEvent(device, "jit_f", op, op_category(op), start, end)


def test_async_collective_overlapped_by_compute() -> None:
    """Device 0: compute [0,10] and [12,13]; all-gather in flight [5,15]. Device 1 sets the window end."""
    events = [
        _ev(0, "fusion.1", 0, 10),
        _ev(0, "all-gather-start.1", 5, 6),
        _ev(0, "fusion.2", 12, 13),
        _ev(0, "all-gather-done.1", 14, 15),
        _ev(1, "fusion.1", 0, 20),
    ]
    assert collective_spans(events[:4]) == {"all-gather": [(5, 15)]}
    d0, d1 = device_metrics(events)
    assert d0.window_ns == 20
    assert d0.compute_ns == 11
    assert d0.collective_ns_by_kind == {"all-gather": 10}
    assert d0.exposed_collective_ns == 4  # [10,12] and [13,15]
    assert d0.busy_ns == 15
    assert d0.idle_ns == 5
    assert d0.wasted_ns == 9
    assert d0.wasted_fraction == pytest.approx(0.45)
    assert (d1.busy_ns, d1.idle_ns, d1.wasted_fraction) == (20, 0, 0.0)


def test_top_ops_sums_over_devices() -> None:
    events = [_ev(0, "fusion.1", 0, 4), _ev(1, "fusion.1", 0, 5), _ev(0, "all-reduce", 4, 6)]
    (first, second) = top_ops(events, n=2)
    assert (first.op, first.total_ns, first.count) == ("fusion.1", 9.0, 2)
    assert (second.op, second.category, second.total_ns) == ("all-reduce", "all-reduce", 2.0)
    assert device_metrics([]) == ()


def test_step_samples_split_the_trace_at_step_annotations(xplane: Path) -> None:
    """One sample per traced call; its categories (compute, exposed collectives, idle) fill its window."""
    samples = analyze_trace(xplane, modules={"jit_traced_step"}).step_samples
    assert len(samples) == STEPS
    for s in samples:
        assert s["window_ns"] > 0 and s["categories"]["compute"] > 0 and s["categories"]["all-gather"] > 0
        assert sum(s["categories"].values()) == pytest.approx(s["window_ns"])
        assert s["by_scope"] == {}  # no program scopes given
