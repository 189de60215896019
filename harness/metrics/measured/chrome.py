"""Read Chrome trace-event JSON (``{"traceEvents": [...]}``, what Perfetto and ``chrome://tracing``
open) into op executions, so a timeline written as JSON goes through the same accounting
(:func:`harness.metrics.measured.accounting.device_metrics`) as a profiler's XSpace.

Complete events (``"ph": "X"``) become :class:`~harness.metrics.measured.events.OpEvent`: ``pid`` is the
device, ``ts``/``dur`` are microseconds, the category is ``args.category`` where the writer put one
(the predicted timeline does: :meth:`harness.metrics.timeline.Prediction.chrome_trace`), else it
is derived from the op name (:func:`~harness.metrics.measured.events.op_category`). Metadata and other
phases are skipped. Accepts a dict, JSON text, or a ``.json`` / ``.json.gz`` path. Pure Python.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.metrics.measured.events import OpEvent, OpTable, op_category

US = 1e3  # ns per trace-event microsecond


def _load(source: Mapping[str, Any] | str | Path) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    if isinstance(source, Path) or (isinstance(source, str) and not source.lstrip().startswith("{")):
        path = Path(source)
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        where = str(path)
    else:
        raw, where = source.encode(), "<json text>"
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not Chrome trace-event JSON ({e})") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{where}: not Chrome trace-event JSON (no 'traceEvents' list)")
    return data


def read_chrome_trace(source: Mapping[str, Any] | str | Path, *, platform: str = "predicted") -> OpTable:
    """Every complete event of a Chrome trace as an op execution, sorted by device then start."""
    data = _load(source)
    events = []
    for i, e in enumerate(data.get("traceEvents", [])):
        if not isinstance(e, Mapping) or e.get("ph") != "X":
            continue
        try:
            start, dur = float(e["ts"]) * US, float(e.get("dur", 0.0)) * US
            device = int(e.get("pid", 0))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"traceEvents[{i}]: bad complete event ({err!r}): {dict(e)!r}"[:300]) from None
        raw_args = e.get("args")
        args: Mapping[str, Any] = raw_args if isinstance(raw_args, Mapping) else {}
        name = str(e.get("name", ""))
        category = str(args.get("category") or op_category(name))
        events.append(OpEvent(device, str(args.get("module", "")), name, category, start, start + dur))
    events.sort(key=lambda ev: (ev.device, ev.start_ns))
    return OpTable(platform, tuple(events))


def write_chrome_trace(trace: Mapping[str, Any], path: str | Path) -> Path:
    """Write trace-event JSON (gzip when the name ends in ``.gz``); returns the path."""
    path = Path(path)
    text = json.dumps(trace, separators=(",", ":")).encode()
    path.write_bytes(gzip.compress(text) if path.suffix == ".gz" else text)
    return path
