"""The predicted family on the page: per-variant step and per-video time, exposed all-gather and
wasted shares next to the roofline bracket, sensitivity, a Gantt of one transformer block, and
predicted against measured on CPU (table, log-log scatter, Spearman and median |log ratio|).

Pure functions of records (the ``predicted`` object of a stage entry, :mod:`harness.run.predicted`);
pictures are inline SVG, so the page stays self-contained.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.agreement import median
from harness.calibration import check as calibration
from harness.families import GanttEvent, Predicted, Roofline, Sensitivity, SensitivityConstant
from harness.fmt import fmt_pct, fmt_time
from harness.report import interactive as ui
from harness.report import tables
from harness.results.record import Record, StageEntry
from harness.results.uncertain import Uncertain, ranking_text

e = html.escape
LANE_COLOURS = {
    "compute": "#4c78a8",
    "all-gather": "#e45756",
    "all-reduce": "#f58518",
    "reduce-scatter": "#54a24b",
    "all-to-all": "#b279a2",
    "collective-permute": "#9d755d",
}


def interval_text(u: Uncertain | None) -> str:
    if u is None or u.interval_s is None:
        return "-"
    return f"{fmt_time(u.interval_s[0])}..{fmt_time(u.interval_s[1])}"


@dataclass(frozen=True)
class PredictedRow:
    variant: str
    stage: str
    spec: str
    step_s: float | None
    video_s: float | None
    calls_per_video: int
    exposed_all_gather_fraction: float | None
    wasted_fraction: float | None
    roofline: tuple[float | None, float | None]  # (overlapped, serial) step of static.target.roofline
    measured_s: float | None
    sensitivity: str
    chrome_trace: str | None
    uncertain: Uncertain | None = None
    host_loop: bool = False  # one measured call is the loop: compare it with the per-video column


def sensitivity_line(sens: Sensitivity | None) -> str:
    """``most sensitive: <constant> +-20% -> step x..y`` from :func:`harness.metrics.timeline.sensitivity`."""
    if not sens or not sens.most:
        return ""
    one = (sens.constants or {}).get(sens.most) or SensitivityConstant()
    if one.low_step_s is None or one.high_step_s is None:
        return ""
    lo, hi = sorted((float(one.low_step_s), float(one.high_step_s)))
    factor = float(0.2 if sens.factor is None else sens.factor)
    return f"most sensitive: {sens.most} \u00b1{factor:.0%} -> step {fmt_time(lo)}..{fmt_time(hi)}"


def _measured(entry: StageEntry) -> float | None:
    return median(entry.measured.samples) if entry.measured and entry.measured.samples else None


def predicted_rows(records: Sequence[Record]) -> list[PredictedRow]:
    rows = []
    for r in records:
        for stage, entry in r.stages.items():
            p = entry.predicted
            if not p:
                continue
            target = entry.static.target if entry.static else None
            roof = (target.roofline if target else None) or Roofline()
            rows.append(
                PredictedRow(
                    r.variant.name,
                    stage,
                    str(p.spec_name or "-"),
                    p.step_s,
                    p.video_s,
                    int(p.calls_per_video or 1),
                    p.exposed_all_gather_fraction,
                    p.wasted_fraction,
                    (roof.step_s, roof.step_serial_s),
                    _measured(entry),  # a host loop's: one call, i.e. its "per video" column
                    sensitivity_line(p.sensitivity),
                    p.chrome_trace,
                    Uncertain.of(p),
                    bool(p.host_loop),
                )
            )
    return rows


def _bracket(roof: tuple[float | None, float | None]) -> str:
    lo, hi = roof
    if lo is None:
        return "-"
    return fmt_time(lo) if hi is None or hi == lo else f"{fmt_time(lo)}..{fmt_time(hi)}"


def predicted_section(records: Sequence[Record], out_dir: str | Path) -> str:
    rows = predicted_rows(records)
    if not rows:
        return ""
    body = []
    for r in rows:
        href = tables.href(r.chrome_trace, out_dir) if r.chrome_trace else None
        link = f'<a class="predicted-trace" href="{e(href)}">Chrome JSON</a>' if href else "-"
        body.append(
            f'<tr data-variant="{e(r.variant)}">'
            + ui.cell(r.variant, left=True)
            + ui.cell(r.stage, left=True)
            + ui.cell(r.spec, left=True)
            + ui.cell(fmt_time(r.step_s), r.step_s if r.step_s is not None else -1)
            + ui.cell(
                interval_text(r.uncertain), r.uncertain.interval_s[0] if r.uncertain and r.uncertain.interval_s else -1
            )
            + ui.cell(f"{fmt_time(r.video_s)} <span class=note>x{r.calls_per_video}</span>", r.video_s or -1, raw=True)
            + ui.cell(fmt_pct(r.exposed_all_gather_fraction), r.exposed_all_gather_fraction or 0)
            + ui.cell(fmt_pct(r.wasted_fraction), r.wasted_fraction or 0)
            + ui.cell(_bracket(r.roofline), r.roofline[0] or -1)
            + ui.cell(
                fmt_time(r.measured_s) + (" <span class=note>host loop: per video</span>" if r.host_loop else ""),
                r.measured_s or -1,
                raw=True,
            )
            + ui.cell(r.sensitivity or "-", left=True)
            + ui.cell(link, left=True, raw=True)
            + "</tr>"
        )
    head = [
        "variant",
        "stage",
        "spec",
        "predicted step",
        "interval",
        "per video",
        "exposed all-gather",
        "wasted",
        "roofline (overlap..serial)",
        "measured",
        "sensitivity",
        "timeline",
    ]
    return (
        '<section id="predicted"><h2>Predicted (simulated from the scheduled program)</h2>'
        + ui.table(head, body, "predicted-table", 3)
        + rankings_html(rows)
        + "<p class=\"note\">Predicted, not measured: each compiled program's schedule replayed on the spec's "
        "constants (compute at peak FLOP/s or memory bandwidth, collectives over the topology's links, async "
        "collectives overlapping the compute between their start and done). Exposed all-gather and wasted "
        "(exposed collectives + idle) are shares of the predicted step, in a measured trace's accounting. "
        "Interval: the step with the constants at the ends of their stated uncertainty (published \u00b15%, "
        "measured \u00b115%, assumed \u00b150%). Ranking: '<' where the order holds at every end of the "
        "constants' uncertainty, '\u2248' where it flips (a tie). "
        "Sensitivity: the constant whose \u00b120% moves the step most. Timeline: gzipped Chrome JSON; open "
        'ui.perfetto.dev and "Open trace file".</p></section>'
    )


def rankings_html(rows: Sequence[PredictedRow]) -> str:
    """Per (stage, spec) with two or more variants: the variants by predicted step, ties marked."""
    groups: dict[tuple[str, str], list[tuple[str, Uncertain]]] = {}
    for r in rows:
        if r.uncertain is not None:
            groups.setdefault((r.stage, r.spec), []).append((r.variant, r.uncertain))
    lines = [
        f"<li><b>{e(stage)}</b> ({e(spec)}): {e(ranking_text(items))}</li>"
        for (stage, spec), items in groups.items()
        if len(items) > 1
    ]
    return f'<ul class="predicted-ranking">{"".join(lines)}</ul>' if lines else ""


# --------------------------------------------------------------------------- the block Gantt

GANTT_LABEL_W, GANTT_W, GANTT_ROW, GANTT_TOP, GANTT_AXIS = 150, 560, 20, 24, 22


def gantt_svg(events: Sequence[GanttEvent], chart_id: str, title: str) -> str:
    """One transformer block's predicted timeline: a compute lane and one lane per collective kind
    (each event a bar, its name and times in a tooltip), a time axis in microseconds."""
    spans = [ev for ev in events if ev.end_ns is not None and ev.start_ns is not None]
    if not spans:
        return ""
    lanes = list(dict.fromkeys(str(ev.lane or "compute") for ev in spans))
    lanes.sort(key=lambda lane: (lane != "compute", lane))
    end = max(float(ev.end_ns or 0.0) for ev in spans) or 1.0
    scale = GANTT_W / end
    height = GANTT_TOP + GANTT_ROW * len(lanes) + GANTT_AXIS
    width = GANTT_LABEL_W + GANTT_W + 20
    parts = [f'<text x="4" y="14" font-weight="600">{e(title[: int(width // 6.5)])}</text>']
    for i, lane in enumerate(lanes):
        y = GANTT_TOP + i * GANTT_ROW
        parts.append(f'<text class="label" x="{GANTT_LABEL_W - 6}" y="{y + 13}" text-anchor="end">{e(lane)}</text>')
        colour = LANE_COLOURS.get(lane, "#72b7b2")
        for ev in (ev for ev in spans if str(ev.lane or "compute") == lane):
            start, stop = float(ev.start_ns or 0.0), float(ev.end_ns or 0.0)
            x0, x1 = start * scale, stop * scale
            tip = f"{ev.name or ''} ({ev.category or lane}) {ev.scope or ''}: {start / 1e3:.1f}..{stop / 1e3:.1f} us"
            parts.append(
                f'<rect x="{GANTT_LABEL_W + x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 0.6):.1f}" '
                f'height="{GANTT_ROW - 6}" fill="{colour}"><title>{e(tip)}</title></rect>'
            )
    axis_y = GANTT_TOP + GANTT_ROW * len(lanes)
    parts.append(
        f'<line x1="{GANTT_LABEL_W}" x2="{GANTT_LABEL_W + GANTT_W}" y1="{axis_y}" y2="{axis_y}" '
        'stroke="#6c757d"></line>'
    )
    for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
        parts.append(
            f'<text class="value" x="{GANTT_LABEL_W + frac * GANTT_W:.1f}" y="{axis_y + 15}" '
            f'text-anchor="{anchor}">{end * frac / 1e3:.1f} us</text>'
        )
    return (
        f'<svg class="chart gantt" id="{e(chart_id)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(title)}">{"".join(parts)}</svg>'
    )


def gantt_block(entry: StageEntry, chart_id: str, label: str) -> str:
    """The stage's predicted block Gantt and sensitivity line for the per-variant detail ("" without one)."""
    p = entry.predicted or Predicted()
    svg = gantt_svg(p.block_gantt or (), chart_id, f"Predicted: one transformer block, {label}")
    line = sensitivity_line(p.sensitivity)
    if not svg and not line:
        return ""
    step = f"predicted step {fmt_time(p.step_s)} ({p.spec_name or '-'})"
    return (
        f'<div class="predicted-detail"><p class="note">{e(step)}; {e(line or "no sensitivity")}</p>' + svg + "</div>"
    )


# --------------------------------------------------------------------------- predicted against measured

SC_W, SC_H, SC_PAD_L, SC_PAD_B, SC_PAD_T, SC_PAD_R = 440, 340, 72, 48, 30, 40


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def scatter_svg(pts: Sequence[calibration.Point], chart_id: str) -> str:
    """Predicted against measured, both axes log, the y = x diagonal and the 1.5x band."""
    if not pts:
        return ""
    values = [v for p in pts for v in (p.predicted_s, p.measured_s)]
    ticks = _log_ticks(min(values), max(values))
    lo, hi = math.log10(ticks[0]), math.log10(ticks[-1]) if ticks[-1] > ticks[0] else math.log10(ticks[0]) + 1
    pw, ph = SC_W - SC_PAD_L - SC_PAD_R, SC_H - SC_PAD_T - SC_PAD_B

    def x(v: float) -> float:
        return SC_PAD_L + (math.log10(v) - lo) / (hi - lo) * pw

    def y(v: float) -> float:
        return SC_PAD_T + ph - (math.log10(v) - lo) / (hi - lo) * ph

    a, b = 10**lo, 10**hi
    parts = [
        f'<rect x="{SC_PAD_L}" y="{SC_PAD_T}" width="{pw}" height="{ph}" fill="none" stroke="#adb5bd"></rect>',
        f'<line x1="{x(a):.1f}" y1="{y(a):.1f}" x2="{x(b):.1f}" y2="{y(b):.1f}" stroke="#6c757d" '
        'stroke-dasharray="4 3"></line>',
    ]
    for (x0, y0), (x1, y1) in (((a, a * 1.5), (b / 1.5, b)), ((a * 1.5, a), (b, b / 1.5))):  # 1.5x either way
        parts.append(
            f'<line x1="{x(x0):.1f}" y1="{y(y0):.1f}" x2="{x(x1):.1f}" y2="{y(y1):.1f}" stroke="#ced4da"></line>'
        )
    for t in ticks:  # x labels well below the y labels' baseline, so the corner ones cannot touch
        parts.append(
            f'<text class="value" x="{x(t):.1f}" y="{SC_PAD_T + ph + 22}" text-anchor="middle">{e(fmt_time(t))}</text>'
        )
        parts.append(
            f'<text class="value" x="{SC_PAD_L - 6}" y="{y(t) + 4:.1f}" text-anchor="end">{e(fmt_time(t))}</text>'
        )
    parts.append(f'<text x="{SC_PAD_L + pw / 2}" y="{SC_H - 6}" text-anchor="middle">measured</text>')
    parts.append('<text x="4" y="12">predicted</text>')
    for p in pts:
        fill = "#4c78a8" if p.gated else "#f58518"
        tip = (
            f"{p.variant} / {p.stage} ({p.devices} device{'s' if p.devices != 1 else ''}): predicted "
            f"{fmt_time(p.predicted_s)}, measured {fmt_time(p.measured_s)}, x{p.ratio:.2f}"
        )
        parts.append(
            f'<circle cx="{x(p.measured_s):.1f}" cy="{y(p.predicted_s):.1f}" r="4" fill="{fill}">'
            f"<title>{e(tip)}</title></circle>"
        )
    return (
        f'<svg class="chart scatter" id="{e(chart_id)}" width="{SC_W}" height="{SC_H}" '
        f'viewBox="0 0 {SC_W} {SC_H}" role="img" aria-label="predicted against measured">{"".join(parts)}</svg>'
    )


def calibration_section(records: Sequence[Record]) -> str:
    pts = calibration.points(records)
    if not pts:
        return ""
    body = [
        f'<tr data-variant="{e(p.variant)}">'
        + ui.cell(p.variant, left=True)
        + ui.cell(f"{p.stage} (host loop)" if p.host_loop else p.stage, left=True)
        + ui.cell(str(p.devices), p.devices)
        + ui.cell(fmt_time(p.predicted_s), p.predicted_s)
        + ui.cell(fmt_time(p.measured_s), p.measured_s)
        + ui.cell(f"{p.ratio:.2f}x", p.ratio)
        + ui.cell("scored" if p.gated else "shown only", left=True)
        + "</tr>"
        for p in pts
    ]
    s = calibration.summarize(pts)
    if s is None:
        score = (
            "No program to score: the multi-device CPU programs' specs did not model their devices sharing the "
            "host's cores (records from before the CPU spec measured them)."
        )
    else:
        verdict = "meets" if s.met else "misses"
        score = (
            f"{s.n} programs whose devices the spec models: Spearman {s.spearman:.2f} (target \u2265 "
            f"{calibration.TARGET_SPEARMAN}), median |ln(pred/meas)| {s.median_abs_log_ratio:.2f} (within "
            f"{s.typical_factor:.2f}x; target \u2264 ln 1.5 = {calibration.TARGET_LOG_RATIO:.2f}), worst "
            f"{s.worst_abs_log_ratio:.2f} (within {s.worst_factor:.2f}x; target \u2264 ln 3 = "
            f"{calibration.TARGET_WORST_LOG_RATIO:.2f}): {verdict} the targets. The CPU constants are measured on "
            "this machine, not fitted to these points."
        )
    head = ["variant", "stage", "devices", "predicted", "measured", "pred / meas", "calibration"]
    return (
        '<section id="calibration"><h2>Predicted against measured</h2>'
        f'<p id="calibration-score">{e(score)}</p>'
        + ui.table(head, body, "calibration-table", 2)
        + scatter_svg(pts, "calibration-scatter")
        + '<p class="note">One call of each compiled program (of a host loop: its program calls, '
        "per-call step x calls; the host's own work between them is not predicted); blue: scored (its spec "
        "models its devices: one, or "
        "N simulated devices measured sharing the host's cores), orange: shown only (an older record whose spec "
        "did not). Dashed: "
        "predicted = measured; grey: 1.5x either way.</p></section>"
    )
