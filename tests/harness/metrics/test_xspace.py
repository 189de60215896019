"""XSpace layouts of TPU and GPU traces, on synthetic xplanes built from the sources the reader
follows (no TPU or GPU here): xprof's ``events_db/tpu_trace_parser.cc`` + ``tpu_component.h``
(TPU: ``XLA Ops`` line, module from the enclosing ``XLA Modules`` event ``name(program id)``)
and ``gpu_trace_parser.cc`` + XLA's ``cupti_collector.cc`` (GPU: kernels on ``Stream #N(...)``
lines with ``hlo_op`` / ``hlo_module`` stats; derived ``XLA Ops`` lines repeat them). Events
are written as XSpace text protos (``xla/tsl/profiler/protobuf/xplane.proto``) and read back
through ``jax.profiler.ProfileData`` like a real trace file."""

from __future__ import annotations

import jax
import pytest

from harness.metrics.measured.trace import analyze_trace
from harness.metrics.measured.xspace import read_trace

NS = 1000  # ps per ns


def _value(v: str | int) -> str:
    return f'str_value: "{v}"' if isinstance(v, str) else f"int64_value: {v}"


def _plane(pid: int, name: str, lines: list[tuple[str, list[tuple[str, float, float, dict]]]]) -> str:
    """A plane in text-proto form: lines of events (name, start ns, duration ns, stats)."""
    names: dict[str, int] = {}
    stat_ids: dict[str, int] = {}
    text = []
    for lid, (line, events) in enumerate(lines, start=1):
        body = []
        for ev, start, dur, stats in events:
            mid = names.setdefault(ev, len(names) + 1)
            st = "".join(
                f" stats {{ metadata_id: {stat_ids.setdefault(k, len(stat_ids) + 1)} {_value(v)} }}"
                for k, v in stats.items()
            )
            offset, duration = int(start * NS), int(dur * NS)
            body.append(f"events {{ metadata_id: {mid} offset_ps: {offset} duration_ps: {duration}{st} }}")
        text.append(f'lines {{ id: {lid} name: "{line}" timestamp_ns: 0 {" ".join(body)} }}')
    text += [f'event_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}' for n, i in names.items()]
    text += [f'stat_metadata {{ key: {i} value {{ id: {i} name: "{n}" }} }}' for n, i in stat_ids.items()]
    return f'planes {{ id: {pid} name: "{name}" {" ".join(text)} }}'


def _host(steps: list[tuple[float, float]]) -> str:
    return _plane(99, "/host:CPU", [("python", [("step", s, d, {"step_num": i}) for i, (s, d) in enumerate(steps)])])


def _xspace(*planes: str) -> bytes:
    return jax.profiler.ProfileData.text_proto_to_serialized_xspace("\n".join(planes))


def tpu_plane(device: int) -> str:
    """Two steps of jit_step(7) on one TensorCore: a fusion, a while enclosing a dot, an async
    all-gather pair; a foreign module's op in between (filtered out by module)."""
    return _plane(
        device,
        f"/device:TPU:{device}",
        [
            ("Steps", [("0", 0, 100, {}), ("1", 100, 100, {})]),
            ("XLA Modules", [("jit_step(7)", 0, 80, {}), ("jit_other(9)", 85, 10, {}), ("jit_step(7)", 100, 80, {})]),
            (
                "XLA Ops",
                [
                    ("fusion.1", 0, 20, {}),
                    ("%while.3 = (f32[8]) while(...)", 20, 30, {}),
                    ("dot.4", 25, 20, {}),
                    ("all-gather-start.2", 50, 5, {}),
                    ("all-gather-done.2", 70, 5, {}),
                    ("copy.9", 86, 4, {}),
                    ("fusion.1", 100, 20, {}),
                    ("all-gather-start.2", 150, 5, {}),
                    ("all-gather-done.2", 170, 5, {}),
                ],
            ),
        ],
    )


def test_tpu_layout_ops_modules_and_self_time() -> None:
    table = read_trace(_xspace(tpu_plane(0), tpu_plane(1), _host([(0, 100), (100, 100)])), modules={"jit_step"})
    assert table.platform == "tpu" and table.devices == (0, 1)
    ops = [(e.op, e.category, e.start_ns, e.exclusive_ns) for e in table.events if e.device == 0]
    assert ops == [
        ("fusion.1", "compute", 0, 20),
        ("while.3", "compute", 20, 10),
        ("dot.4", "compute", 25, 20),
        ("all-gather-start.2", "all-gather", 50, 5),
        ("all-gather-done.2", "all-gather", 70, 5),
        ("fusion.1", "compute", 100, 20),
        ("all-gather-start.2", "all-gather", 150, 5),
        ("all-gather-done.2", "all-gather", 170, 5),
    ]
    assert {e.module for e in table.events} == {"jit_step"}
    assert table.steps == ((0, 100), (100, 200))
    assert [e.op for e in read_trace(_xspace(tpu_plane(0)), modules={"jit_other"}).events] == ["copy.9"]


def test_tpu_steps_split_time_by_category() -> None:
    metrics = analyze_trace(_xspace(tpu_plane(0), _host([(0, 100), (100, 100)])), modules={"jit_step"})
    first, second = metrics.step_samples
    # step 0: compute [0,50] (the while covers the dot), all-gather in flight [50,75] (exposed), idle 25
    assert first["window_ns"] == 100
    assert first["categories"] == pytest.approx({"compute": 50, "all-gather": 25, "idle": 25})
    assert second["categories"] == pytest.approx({"compute": 20, "all-gather": 25, "idle": 55})
    top = {o.op: o.total_ns for o in metrics.top_ops}
    assert top["while.3"] == 10 and top["dot.4"] == 20  # self time: the loop body is not counted twice


def gpu_plane(device: int, derived: bool) -> str:
    """Kernels of jit_step on two streams (a collective on its own stream), a memcpy without an
    HLO op, and (optionally) the derived XLA Ops / XLA Modules lines repeating the kernels."""
    k = {"hlo_module": "jit_step", "program_id": 3}
    lines = [
        (
            "Stream #13(Kernel,MemcpyH2D)",
            [
                ("loop_fusion_kernel", 0, 10, {**k, "hlo_op": "fusion.1"}),
                ("cutlass_gemm", 10, 30, {**k, "hlo_op": "while.2::dot.4"}),
                ("memcpy", 45, 5, {}),
            ],
        ),
        ("Stream #20(Kernel)", [("nccl_all_gather", 15, 20, {**k, "hlo_op": "all-gather-start.5"})]),
    ]
    if derived:
        lines += [
            ("XLA Modules", [("jit_step(3)", 0, 40, {})]),
            ("XLA Ops", [("fusion.1", 0, 10, {}), ("dot.4", 10, 30, {})]),
        ]
    return _plane(device, f"/device:GPU:{device}", lines)


@pytest.mark.parametrize("derived", [False, True])
def test_gpu_layout_reads_kernels_once(derived: bool) -> None:
    table = read_trace(_xspace(gpu_plane(0, derived), gpu_plane(1, derived)), modules={"jit_step"})
    assert table.platform == "gpu" and table.devices == (0, 1)
    ops = [(e.op, e.category, e.start_ns, e.duration_ns) for e in table.events if e.device == 1]
    assert ops == [
        ("fusion.1", "compute", 0, 10),
        ("dot.4", "compute", 10, 30),
        ("all-gather-start.5", "all-gather", 15, 20),
    ]
    (d0,) = analyze_trace(_xspace(gpu_plane(0, derived)), modules={"jit_step"}).devices
    # the all-gather [15,35] runs under the gemm [10,40] on another stream: fully overlapped
    assert (d0.compute_ns, d0.collective_ns, d0.exposed_collective_ns) == (40, 20, 0)


def test_a_device_steps_line_gives_the_steps_without_host_annotations(tmp_path) -> None:
    """A profile with no host ``step`` annotations takes its steps from a device ``Steps`` line
    (the one our predicted XSpace writes), before falling back to module executions."""
    from harness.metrics.xprof.xplane_write import XOp, write_xspace

    ops = [XOp("fusion.1", "fusion", 0.0, 40.0), XOp("fusion.2", "fusion", 50.0, 90.0)]
    path = write_xspace(
        tmp_path / "p.xplane.pb", ops, steps=[(0.0, 45.0), (45.0, 100.0)], peak_flops_per_s=1e12, hbm_bytes_per_s=1e12
    )
    table = read_trace(path)
    assert [e.op for e in table.events] == ["fusion.1", "fusion.2"]
    assert table.steps == ((0.0, 45.0), (45.0, 100.0))


def test_an_ops_own_metadata_wins_over_its_transfer_span(tmp_path) -> None:
    """A predicted sync collective writes its transfer as ``<op> (transfer)`` (no costs), which sorts
    before the op when it ends first; reading the costs back must keep the op's own HBM bytes (the
    transfer's zero had won: a sync all-gather read back as wholly wasted)."""
    from harness.metrics.measured.xplane_read import op_metadata, read_xspace
    from harness.metrics.xprof.xplane_write import XOp, write_xspace

    ops = [
        XOp("all-gather.1 (transfer)", "all-gather", 0.0, 30.0, stream=False),
        XOp("all-gather.1", "all-gather", 0.0, 40.0, bytes=4096.0),
    ]
    path = write_xspace(tmp_path / "t.xplane.pb", ops, peak_flops_per_s=1e12, hbm_bytes_per_s=1e12)
    meta = op_metadata(read_xspace(path))
    assert meta[("predicted", "all-gather.1")].hbm_bytes == 4096.0
    assert meta[("predicted", "all-gather.1")].text == "all-gather.1"
