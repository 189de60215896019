"""Write op executions as an XSpace (``*.xplane.pb``) laid out as a TPU trace, so XProf opens it.

The layout is the one :mod:`harness.metrics.measured.xspace` reads and xprof's TPU converters expect
(``xprof/convert/xplane_to_op_metrics_db.cc``, ``ConvertTensorCoreDeviceTraceXPlaneToOpMetricsDb``;
``xprof/utils/op_metrics_db_utils.cc``, ``SetOpMetadataFromHloEventMetadata``;
``xprof/convert/xplane_to_op_stats.cc``, ``GetPerfEnvFromXPlane``):

* one plane ``/device:TPU:<n>`` whose stats ``peak_teraflops_per_second`` and
  ``peak_hbm_bw_gigabytes_per_second`` are the peaks xprof's utilisations divide by;
* line ``XLA Modules``: one event ``<module>(<program id>)`` spanning the program;
* line ``XLA Ops``: one event per op execution (the TensorCore's stream, ops back to back); each
  op's event metadata carries ``program_id``, ``symbol_id`` (xprof's op key: an op without one is
  dropped, ``XEventsOpMetricsDbBuilder::AddOpMetric``), ``hlo_category``, ``flops``, ``model_flops``,
  ``bytes_accessed`` and ``memory_access_breakdown`` (an ``op_metrics.proto``
  ``MemoryAccessBreakdown``: the HBM read bytes, which xprof's HBM bandwidth utilisation counts);
* line ``Steps``: one event per step (xprof's step line).

Ops with other lanes (a collective's transfer, running beside the stream) go on their own line,
named ``Async <kind>`` here, which xprof's op-metrics readers skip (only op lines count) and its
trace viewer shows.

The protobuf wire format is written here by hand, with the field numbers
:mod:`harness.metrics.measured.xplane_read` lists (no installed package ships the generated
classes). ``tests/harness/metrics/test_xplane_write.py`` reads the file back through
``jax.profiler.ProfileData`` and xprof's own converters. Pure Python (no JAX).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

XLA_OPS, XLA_MODULES, STEPS = "XLA Ops", "XLA Modules", "Steps"
PROGRAM_ID = 1
HBM = 1  # op_metrics.proto OpMetrics.MemoryAccessed.memory_space: MEMORY_SPACE_HBM
READ = 1  # OperationType READ


@dataclass(frozen=True)
class XOp:
    """One op execution to write: ``stream`` ops go on ``XLA Ops`` (back to back, never nested),
    the others on line ``Async <category>``. ``flops`` and ``bytes`` are one execution's."""

    name: str
    category: str
    start_ns: float
    end_ns: float
    flops: float = 0.0
    bytes: float = 0.0
    stream: bool = True


# ---------------------------------------------------------------- wire format


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # two's complement for negative int64
    out = bytearray()
    while True:
        bits = n & 0x7F
        n >>= 7
        if n:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _int(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(int(value)) if value else b""


def _len(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _str(field: int, text: str) -> bytes:
    return _len(field, text.encode()) if text else b""


def _double(field: int, value: float) -> bytes:
    return _varint(field << 3 | 1) + struct.pack("<d", value)


class _Plane:
    """One XPlane being built: metadata ids handed out on first use."""

    def __init__(self, pid: int, name: str) -> None:
        self.pid, self.name = pid, name
        self.stat_ids: dict[str, int] = {}
        self.event_ids: dict[str, int] = {}
        self.event_meta: dict[int, bytes] = {}
        self.lines: list[bytes] = []
        self.stats: list[bytes] = []

    def stat(self, name: str, value: float | int | str | bytes) -> bytes:
        sid = self.stat_ids.setdefault(name, len(self.stat_ids) + 1)
        if isinstance(value, bytes):
            body = _len(6, value)
        elif isinstance(value, str):
            body = _len(5, value.encode())
        elif isinstance(value, float):
            body = _double(2, value)
        else:
            body = _varint(4 << 3) + _varint(int(value))
        return _int(1, sid) + body  # an XStat's payload: its parent tags it

    def event_metadata(self, name: str, stats: dict[str, float | int | str | bytes]) -> int:
        if name not in self.event_ids:
            mid = self.event_ids[name] = len(self.event_ids) + 1
            body = _int(1, mid) + _str(2, name) + _str(4, name)
            body += b"".join(_len(5, self.stat(k, v)) for k, v in stats.items())
            self.event_meta[mid] = body
        return self.event_ids[name]

    def line(self, lid: int, name: str, events: list[tuple[int, int, int]]) -> None:
        """``events``: (metadata id, offset ps, duration ps)."""
        parts = [_int(1, lid), _str(2, name)]  # joined once: a step loop has ~10^6 events
        parts += [_len(4, _int(1, mid) + _int(2, offset) + _int(3, duration)) for mid, offset, duration in events]
        self.lines.append(_len(3, b"".join(parts)))

    def encode(self) -> bytes:
        parts = [_int(1, self.pid), _str(2, self.name), *self.lines]
        parts += [_len(4, _int(1, mid) + _len(2, meta)) for mid, meta in self.event_meta.items()]  # key=1, value=2
        parts += [_len(5, _int(1, sid) + _len(2, _int(1, sid) + _str(2, name))) for name, sid in self.stat_ids.items()]
        parts += [_len(6, s) for s in self.stats]
        return b"".join(parts)


def _breakdown(read_bytes: int) -> bytes:
    """``MemoryAccessBreakdown{memory_accessed: [{operation_type: READ, memory_space: HBM, bytes}]}``."""
    return _len(1, _int(1, READ) + _int(2, HBM) + _int(3, read_bytes))


# ---------------------------------------------------------------- the trace


def _op_stats(o: XOp, symbols: dict[str, int]) -> dict[str, float | int | str | bytes]:
    """The stats of an op's event metadata (written once per op name, at its first execution)."""
    stats: dict[str, float | int | str | bytes] = {
        "program_id": PROGRAM_ID,
        "symbol_id": symbols.setdefault(o.name, len(symbols) + 1),
        "hlo_category": o.category,
    }
    if o.flops:
        stats |= {"flops": round(o.flops), "model_flops": round(o.flops)}
    if o.bytes:
        stats |= {"bytes_accessed": round(o.bytes), "memory_access_breakdown": _breakdown(round(o.bytes))}
    return stats


def xspace_bytes(
    ops: Sequence[XOp],
    *,
    device: int = 0,
    module: str = "predicted",
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
    steps: Sequence[tuple[float, float]] = (),
) -> bytes:
    """A serialized XSpace with one TPU device plane holding ``ops`` (see the module docstring).
    ``steps``: step windows (start, end) in ns; none: one step over all ops."""
    plane = _Plane(device, f"/device:TPU:{device}")
    plane.stats += [
        plane.stat("peak_teraflops_per_second", peak_flops_per_s / 1e12),
        plane.stat("peak_hbm_bw_gigabytes_per_second", hbm_bytes_per_s / 1e9),
    ]
    ps = 1000
    t0 = min((o.start_ns for o in ops), default=0.0)
    t1 = max((o.end_ns for o in ops), default=0.0)
    windows = list(steps) or [(t0, t1)]
    step_events = [
        (plane.event_metadata(str(i), {}), round(s * ps), round((e - s) * ps)) for i, (s, e) in enumerate(windows)
    ]
    module_id = plane.event_metadata(f"{module}({PROGRAM_ID})", {"program_id": PROGRAM_ID})
    stream: list[tuple[int, int, int]] = []
    side: dict[str, list[tuple[int, int, int]]] = {}
    symbols: dict[str, int] = {}
    for o in sorted(ops, key=lambda o: (o.start_ns, o.end_ns)):
        mid = plane.event_ids.get(o.name) or plane.event_metadata(o.name, _op_stats(o, symbols))
        event = (mid, round(o.start_ns * ps), round((o.end_ns - o.start_ns) * ps))
        (stream if o.stream else side.setdefault(f"Async {o.category}", [])).append(event)
    plane.line(1, STEPS, step_events)
    plane.line(2, XLA_MODULES, [(module_id, round(t0 * ps), round((t1 - t0) * ps))])
    plane.line(3, XLA_OPS, stream)
    for lid, (name, events) in enumerate(sorted(side.items()), start=4):
        plane.line(lid, name, events)
    return _len(1, plane.encode())


def write_xspace(path: str | Path, ops: Sequence[XOp], **kwargs: object) -> Path:
    """:func:`xspace_bytes` written to ``path`` (its folder made); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(xspace_bytes(ops, **kwargs))  # type: ignore[arg-type]
    return path
