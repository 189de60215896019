"""The report's figures, drawn with matplotlib's Agg canvas and returned as base64 PNG.

No pyplot (no global state, no display backend): each function builds a ``Figure``,
renders it in memory and returns the PNG as base64 text, or None when the records
hold nothing to plot. PNG metadata is stripped so the same records give the same bytes.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.families import Trace
from harness.report.tables import StageRow, ok_records
from harness.results.record import Record
from harness.vocabulary import COMPUTE, KINDS

MIB = 2**20
_COLOURS = {
    COMPUTE: "#4c78a8",
    "idle": "#bab0ac",
    **dict(zip(KINDS, ("#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6"), strict=True)),
}
_MEMORY = (
    ("argument_bytes", "arguments", "#4c78a8"),
    ("output_bytes", "outputs", "#72b7b2"),
    ("temp_bytes", "temporaries", "#f58518"),
)


def to_png(fig: Figure) -> str:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight", metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(n_bars: int, height: float = 3.6) -> tuple[Figure, Any]:
    fig = Figure(figsize=(max(6.0, 1.1 * n_bars + 2.5), height))
    return fig, fig.add_subplot()


def _label(variant: str, stage: str, stages: int) -> str:
    return variant if stages == 1 else f"{variant}\n{stage}"


def _stacked(fig: Figure, ax: Any, bars: Sequence[tuple[str, str, Any]], ylabel: str, title: str) -> str:
    """Label a chart of stacked bars, one per (variant, stage, ...) of ``bars``, and render it."""
    n_stages = len({s for _, s, _ in bars})
    ax.set_xticks(range(len(bars)), [_label(v, s, n_stages) for v, s, _ in bars], rotation=20, ha="right")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return to_png(fig)


def stage_times(rows: Sequence[StageRow]) -> str | None:
    """Median time per variant, one panel per stage and workload (stages differ by orders of
    magnitude; another model or size is another panel), error bars from the first to the third
    quartile."""
    timed = [r for r in rows if r.time is not None]
    if not timed:
        return None
    panels = list(dict.fromkeys((r.stage, r.workload) for r in timed))
    widest = max(sum((r.stage, r.workload) == p for r in timed) for p in panels)
    fig = Figure(figsize=(max(6.0, 1.0 * widest + 2.5), 3.2 * len(panels)))
    for k, (stage, workload) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, k + 1)
        mine = [r for r in timed if (r.stage, r.workload) == (stage, workload) and r.time is not None]
        med = [r.time.median * 1e3 for r in mine if r.time]
        lo = [(r.time.median - r.time.q1) * 1e3 for r in mine if r.time]
        hi = [(r.time.q3 - r.time.median) * 1e3 for r in mine if r.time]
        ax.bar(range(len(mine)), med, 0.7, yerr=[lo, hi], capsize=3, color=f"C{k % 10}")
        ax.set_xticks(range(len(mine)), [r.variant for r in mine], rotation=25, ha="right", fontsize="small")
        ax.set_ylabel("ms per call")
        title = f"{stage}" + (f" ({workload})" if workload else "") + ": median time (error bars: IQR)"
        ax.set_title(title, fontsize="medium")
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return to_png(fig)


def _breakdown(trace: Trace) -> dict[str, float] | None:
    """Mean ms per traced step per device: compute, exposed time by collective kind, idle."""
    devices = [d for d in trace.devices or () if d.window_ns]
    if not devices:
        return None
    steps = max(1, int(trace.steps or 1))
    out: dict[str, float] = {COMPUTE: 0.0}
    for d in devices:
        out[COMPUTE] += d.compute_ns or 0.0
        by_kind = d.collective_ns_by_kind or {}
        total = sum(by_kind.values())
        for kind, ns in by_kind.items():  # share the exposed time out by each kind's covered time
            out[kind] = out.get(kind, 0.0) + ((d.exposed_collective_ns or 0.0) * ns / total if total else 0.0)
        out["idle"] = out.get("idle", 0.0) + (d.idle_ns or 0.0)
    return {k: v / len(devices) / steps / 1e6 for k, v in out.items()}


def time_breakdown(records: Sequence[Record]) -> str | None:
    """Stacked bar per variant (and stage): compute, exposed collectives by kind, idle."""
    bars = [
        (r.variant.name, stage, b)
        for r in ok_records(records)
        for stage, entry in r.stages.items()
        if entry.trace is not None and (b := _breakdown(entry.trace)) is not None
    ]
    if not bars:
        return None
    categories = [COMPUTE, *[k for k in KINDS if any(k in b for _, _, b in bars)], "idle"]
    fig, ax = _figure(len(bars))
    bottom = np.zeros(len(bars))
    for cat in categories:
        vals = np.array([b.get(cat, 0.0) for _, _, b in bars])
        ax.bar(
            range(len(bars)),
            vals,
            0.6,
            bottom=bottom,
            label=cat if cat in (COMPUTE, "idle") else f"{cat} (exposed)",
            color=_COLOURS[cat],
        )
        bottom += vals
    return _stacked(fig, ax, bars, "ms per step, mean over devices", "Where device time went (trace)")


def collective_bytes(records: Sequence[Record]) -> str | None:
    """Stacked bar of collective operand bytes per device and call, by kind (static)."""
    bars = []
    for r in ok_records(records):
        for stage, entry in r.stages.items():
            colls = entry.static.collectives if entry.static else None
            if colls is not None and colls.by_kind is not None:
                bars.append((r.variant.name, stage, {k: c.operand_bytes or 0 for k, c in colls.by_kind.items()}))
    if not bars or not any(sum(b.values()) for _, _, b in bars):
        return None
    fig, ax = _figure(len(bars))
    bottom = np.zeros(len(bars))
    for kind in KINDS:
        vals = np.array([b.get(kind, 0) / MIB for _, _, b in bars])
        if vals.any():
            ax.bar(range(len(bars)), vals, 0.6, bottom=bottom, label=kind, color=_COLOURS[kind])
            bottom += vals
    return _stacked(fig, ax, bars, "MiB per device per call", "Collective bytes by kind (compiled program)")


def memory(records: Sequence[Record]) -> str | None:
    """Per-device memory: arguments, outputs, temporaries stacked; the peak/bound as a marker."""
    bars = [
        (r.variant.name, stage, m)
        for r in ok_records(records)
        for stage, entry in r.stages.items()
        if entry.static and (m := entry.static.memory)
    ]
    if not bars:
        return None
    fig, ax = _figure(len(bars))
    bottom = np.zeros(len(bars))
    for key, label, colour in _MEMORY:
        vals = np.array([(getattr(m, key) or 0) / MIB for _, _, m in bars])
        ax.bar(range(len(bars)), vals, 0.6, bottom=bottom, label=label, color=colour)
        bottom += vals
    peaks = [(m.bound_bytes or m.peak_bytes or 0) / MIB for _, _, m in bars]
    ax.scatter(range(len(bars)), peaks, marker="_", s=900, color="black", zorder=3, label="peak (bound)")
    return _stacked(fig, ax, bars, "MiB per device", "Memory per device (compiled program)")


def all_plots(records: Sequence[Record], rows: Sequence[StageRow]) -> dict[str, str | None]:
    """Figure id -> base64 PNG (None where there is nothing to plot), in report order."""
    return {
        "plot-stage-times": stage_times(rows),
        "plot-breakdown": time_breakdown(records),
        "plot-collective-bytes": collective_bytes(records),
        "plot-memory": memory(records),
    }
