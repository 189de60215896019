"""Read what ``jax.profiler.ProfileData`` does not expose of an XSpace (``*.xplane.pb``): each
plane's stats and event metadata with *their* stats (libtpu writes an op's compiler costs there:
``flops``, ``bytes_accessed``, ``hlo_category``, ``memory_access_breakdown``), and the
``/host:metadata`` plane, whose event metadata carry the programs' ``Hlo Proto``.

The protobuf wire format is decoded by hand, field numbers from
``xla/tsl/profiler/protobuf/xplane.proto`` (:mod:`harness.metrics.xprof.xplane_write` writes with them):
XSpace.planes=1; XPlane id=1 name=2 lines=3 event_metadata=4 (map: key=1, value=2)
stat_metadata=5 (map) stats=6; XLine id=1 display_id=10 name=2 timestamp_ns=3 events=4; XEvent
metadata_id=1 offset_ps=2 duration_ps=3 stats=4; XStat metadata_id=1 double_value=2
uint64_value=3 int64_value=4 str_value=5 bytes_value=6 ref_value=7; XEventMetadata id=1 name=2
display_name=4 metadata=3 stats=5; XStatMetadata id=1 name=2. No installed package ships the
generated classes (xprof's wheel has its tools' protos, not xplane's). Pure Python.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def varint(buf: bytes, i: int) -> tuple[int, int]:
    """The base-128 varint at ``buf[i]``: its value and the index after it."""
    n, shift = 0, 0
    while True:
        byte = buf[i]
        i += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return n, i


def fields(buf: bytes) -> Iterator[tuple[int, Any]]:
    """``(field number, value)`` of one message: varints as int, 64-bit as float (the only fixed64
    field xplane uses is ``double_value``), length-delimited as bytes. ValueError on a wire type
    this reader does not know (groups, or bytes that are not a message)."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
            yield number, value
        elif wire == 1:
            yield number, struct.unpack_from("<d", buf, i)[0]
            i += 8
        elif wire == 2:
            size, i = varint(buf, i)
            yield number, buf[i : i + size]
            i += size
        elif wire == 5:
            yield number, struct.unpack_from("<f", buf, i)[0]
            i += 4
        else:
            raise ValueError(f"protobuf wire type {wire} (field {number}) at byte {i}: not an xplane message")


def _signed(n: int) -> int:
    return n - (1 << 64) if n >= 1 << 63 else n


@dataclass(frozen=True)
class XEvent:
    """One event: its metadata id, start (ns from the line's timestamp added) and duration in ps,
    and its own stats (name -> value)."""

    metadata_id: int
    offset_ps: int
    duration_ps: int
    stats: Mapping[str, Any]


@dataclass(frozen=True)
class XLine:
    name: str
    timestamp_ns: int
    events: tuple[XEvent, ...]


@dataclass(frozen=True)
class XEventMetadata:
    """An event metadata entry: name (for a TPU op, the HLO instruction text), display name (the
    op's name), and its stats."""

    id: int
    name: str
    display_name: str
    stats: Mapping[str, Any]


@dataclass(frozen=True)
class XPlane:
    name: str
    stats: Mapping[str, Any]
    lines: tuple[XLine, ...]
    event_metadata: Mapping[int, XEventMetadata] = field(default_factory=dict)

    def line(self, name: str) -> XLine | None:
        return next((line for line in self.lines if line.name == name), None)


def _stat(raw: bytes, names: Mapping[int, str]) -> tuple[str, Any]:
    meta: int = 0
    value: Any = None
    for number, v in fields(raw):
        if number == 1:
            meta = int(v)
        elif number == 4:
            value = _signed(int(v))
        elif number == 5:
            value = bytes(v).decode("utf-8", "surrogateescape")
        elif number in (2, 3, 6, 7):
            value = v
    return names.get(meta, str(meta)), value


def _stats(raws: list[bytes], names: Mapping[int, str]) -> dict[str, Any]:
    return dict(_stat(r, names) for r in raws)


def _plane(buf: bytes) -> XPlane:
    name = ""
    lines_raw: list[bytes] = []
    metas_raw: list[bytes] = []
    stats_raw: list[bytes] = []
    stat_names: dict[int, str] = {}
    for number, v in fields(buf):
        if number == 2:
            name = bytes(v).decode()
        elif number == 3:
            lines_raw.append(v)
        elif number == 4:
            metas_raw.append(v)
        elif number == 5:
            entry = dict(fields(v))
            stat = dict(fields(entry.get(2, b"")))
            stat_names[int(stat.get(1, entry.get(1, 0)))] = bytes(stat.get(2, b"")).decode()
        elif number == 6:
            stats_raw.append(v)
    metas: dict[int, XEventMetadata] = {}
    for raw in metas_raw:
        entry = dict(fields(raw))
        parts = list(fields(entry.get(2, b"")))
        one = dict((n, v) for n, v in parts if n != 5)
        meta = XEventMetadata(
            int(one.get(1, entry.get(1, 0))),
            bytes(one.get(2, b"")).decode("utf-8", "replace"),
            bytes(one.get(4, b"")).decode("utf-8", "replace"),
            _stats([v for n, v in parts if n == 5], stat_names),
        )
        metas[meta.id] = meta
    return XPlane(name, _stats(stats_raw, stat_names), tuple(_line(r, stat_names) for r in lines_raw), metas)


def _line(buf: bytes, names: Mapping[int, str]) -> XLine:
    name, ts = "", 0
    events: list[XEvent] = []
    for number, v in fields(buf):
        if number == 2:
            name = bytes(v).decode()
        elif number == 3:
            ts = _signed(int(v))
        elif number == 4:
            e: dict[int, Any] = {}
            stats = []
            for n, x in fields(v):
                if n == 4:
                    stats.append(x)
                else:
                    e[n] = x
            events.append(XEvent(int(e.get(1, 0)), int(e.get(2, 0)), int(e.get(3, 0)), _stats(stats, names)))
    return XLine(name, ts, tuple(events))


def read_xspace(xspace: str | Path | bytes) -> tuple[XPlane, ...]:
    """Every plane of an XSpace (a file path or its bytes); ValueError naming the file when it is
    not one."""
    data = xspace if isinstance(xspace, bytes) else Path(xspace).read_bytes()
    where = "<bytes>" if isinstance(xspace, bytes) else str(xspace)
    try:
        return tuple(_plane(v) for n, v in fields(data) if n == 1)
    except (ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not an XSpace ({e})") from None


def hlo_protos(planes: tuple[XPlane, ...]) -> dict[str, bytes]:
    """Module name -> serialized ``xla.HloProto`` (its ``hlo_module`` is field 1) of each program in
    the ``/host:metadata`` plane (event metadata named ``<module>(<program id>)`` with an ``Hlo
    Proto`` stat); empty when the profile has none."""
    out: dict[str, bytes] = {}
    for plane in planes:
        if plane.name != "/host:metadata":
            continue
        for meta in plane.event_metadata.values():
            proto = meta.stats.get("Hlo Proto")
            if isinstance(proto, bytes):
                out[meta.name.rsplit("(", 1)[0]] = proto
    return out


HBM_SPACE = 1  # op_metrics.proto OpMetrics.MemoryAccessed.memory_space: MEMORY_SPACE_HBM


@dataclass(frozen=True)
class OpMeta:
    """What libtpu wrote of one op (an ``XLA Ops`` event's metadata): its HLO ``text``, xprof
    category (``hlo_category``: ``loop fusion``, ``copy-done``...), the compiler's ``flops`` and
    ``bytes_accessed`` of one execution, and ``hbm_bytes``: the HBM bytes of its
    ``memory_access_breakdown`` (what xprof's HBM bandwidth utilisation divides)."""

    module: str
    op: str
    text: str
    category: str
    flops: float
    bytes_accessed: float
    hbm_bytes: float


def _hbm_bytes(breakdown: Any) -> float:
    """HBM bytes of a serialized ``MemoryAccessBreakdown`` (memory_accessed=1: operation_type=1
    memory_space=2 bytes_accessed=3)."""
    total = 0
    for _, one in fields(breakdown if isinstance(breakdown, bytes) else b""):
        entry = dict(fields(one))
        total += int(entry.get(3, 0)) if entry.get(2, 0) == HBM_SPACE else 0
    return float(total)


def device_ordinal(plane: XPlane) -> int | None:
    """``n`` of a ``/device:<KIND>:<n>`` plane (None for other planes)."""
    head, _, n = plane.name.rpartition(":")
    return int(n) if head.startswith("/device:") and n.isdigit() else None


def op_metadata(planes: tuple[XPlane, ...]) -> dict[tuple[str, str], OpMeta]:
    """``(module, op)`` -> :class:`OpMeta` over the device planes' ops (the first plane that has one
    wins: every device runs the same program). The module is the one whose ``<module>(<program
    id>)`` event metadata carries the op's ``program_id``. The op's own metadata (named by the op, or
    by its HLO text ``%op = ...`` as libtpu writes it) wins over a span named after it: a predicted
    XSpace's ``<op> (transfer)``, which carries no costs and may come first."""
    out: dict[tuple[str, str], OpMeta] = {}
    for plane in planes:
        if device_ordinal(plane) is None:
            continue
        programs = {
            m.name.rsplit("(", 1)[1].rstrip(")"): m.name.rsplit("(", 1)[0]
            for m in plane.event_metadata.values()
            if m.name.endswith(")") and "(" in m.name and not m.name.startswith("%")
        }
        for m in plane.event_metadata.values():
            program = str(m.stats.get("program_id", ""))
            if program not in programs or not m.display_name:
                continue
            key = (programs[program], m.name.split(" ", 1)[0].lstrip("%"))
            if key in out and not (_names_other(out[key].text) and not _names_other(m.name)):
                continue
            out[key] = OpMeta(
                *key,
                m.name,
                str(m.stats.get("hlo_category", "")),
                float(m.stats.get("flops", 0) or 0),
                float(m.stats.get("bytes_accessed", 0) or 0),
                _hbm_bytes(m.stats.get("memory_access_breakdown")),
            )
    return out


def _names_other(name: str) -> bool:
    """Whether an event metadata ``name`` only starts with an op's name (``<op> (transfer)``) rather
    than being the op's own: its name alone, or its HLO text ``%<op> = ...``."""
    rest = name.partition(" ")[2]
    return bool(rest) and not rest.startswith("=")


def global_chips(planes: tuple[XPlane, ...]) -> dict[int, int]:
    """Device plane ordinal -> its chip's global id (``core_details``, an xprof ``CoreDetails``:
    global_chip_id = field 5): which chips of the slice this host's planes are."""
    out = {}
    for plane in planes:
        n = device_ordinal(plane)
        details = plane.stats.get("core_details")
        if n is not None and isinstance(details, bytes | str):
            raw = details.encode("utf-8", "surrogateescape") if isinstance(details, str) else details
            out[n] = int(dict(fields(raw)).get(5, 0))
    return out


def peaks(planes: tuple[XPlane, ...]) -> tuple[float, float]:
    """(peak FLOP/s, peak HBM B/s) a device plane states (``peak_teraflops_per_second``,
    ``peak_hbm_bw_gigabytes_per_second``: the peaks xprof's utilisations divide by); (0, 0) where none."""
    for plane in planes:
        if device_ordinal(plane) is not None and "peak_teraflops_per_second" in plane.stats:
            return (
                float(plane.stats["peak_teraflops_per_second"]) * 1e12,
                float(plane.stats.get("peak_hbm_bw_gigabytes_per_second", 0.0)) * 1e9,
            )
    return 0.0, 0.0
