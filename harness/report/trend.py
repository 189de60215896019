"""The trend page: every gated metric of a manifest over the history's runs, change points marked.

A pure function of the history's files (:mod:`harness.results.history`): one inline-SVG chart per
(variant, stage, metric) series (x: runs in order, labelled by commit; hollow points: timings
measured under load), each change point drawn as a dashed line between the runs around it, and a
table of change points, each linked to its bisect result and its diff where the history keeps them
(``bisect/<change>.json``, ``diffs/<change>.json``), with the exact command that makes each.
Self-contained: inline CSS, no script, no network.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Collection, Sequence
from urllib.parse import quote

from harness.fmt import fmt_ratio, fmt_unit
from harness.results.history import (
    TOO_LITTLE,
    Analysis,
    Change,
    Point,
    Run,
    Series,
    bisect_command,
    change_name,
    diff_command,
)

W, H, PAD_L, PAD_R, PAD_B, PAD_T = 720, 170, 70, 30, 34, 12
CSS = (
    "body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:20px}"
    "h2{font-size:15px;margin:18px 0 4px}table{border-collapse:collapse;margin:4px 0 10px}"
    "td,th{border:1px solid #ccc;padding:3px 6px;font-size:12px;text-align:left}"
    "code{font-size:11px;word-break:break-all}.note{color:#666}.cp{stroke:#c00;stroke-dasharray:4 3}"
    "section{border-top:1px solid #ddd;margin-top:8px}svg text{font-size:10px;fill:#444}"
)


def _x(i: int, n: int) -> float:
    return PAD_L + (W - PAD_L - PAD_R) * (i / max(1, n - 1))


def _label(s: Series, p: Point) -> str:
    if not s.measured:
        return fmt_unit(p.value, s.unit)
    return f"fastest call {fmt_unit(p.low, s.unit)}, median {fmt_unit(p.value, s.unit)}"


def chart(s: Series, changes: Sequence[Change], runs: Sequence[Run], chart_id: str) -> str:
    """One series as an SVG line chart over the runs, change points as dashed red lines."""
    n = len(runs)
    values = [p.low if s.measured else p.value for p in s.points]  # timings: the run's fastest call
    lo, hi = min(values), max(values)
    lo, hi = (lo * 0.95, hi * 1.05) if lo == hi else (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))

    def y(v: float) -> float:
        return PAD_T + (H - PAD_T - PAD_B) * (1 - (v - lo) / (hi - lo)) if hi > lo else H / 2

    pts = [(_x(p.run, n), y(v), p) for v, p in zip(values, s.points, strict=True)]
    line = " ".join(f"{x:.1f},{yy:.1f}" for x, yy, _ in pts)
    dots = "".join(
        f'<circle class="pt" cx="{x:.1f}" cy="{yy:.1f}" r="2.5" fill="{"none" if p.loaded else "#1f77b4"}" '
        f'stroke="#1f77b4"><title>{html.escape(runs[p.run].path)}: {html.escape(_label(s, p))}</title></circle>'
        for x, yy, p in pts
    )
    marks = "".join(
        f'<line class="cp" data-change="{i}" x1="{xm:.1f}" x2="{xm:.1f}" y1="{PAD_T}" y2="{H - PAD_B}"/>'
        f'<text x="{xm + 3:.1f}" y="{PAD_T + 10}">{html.escape(fmt_ratio(c.ratio))}</text>'
        for i, c in enumerate(changes)
        for xm in [(_x(c.before, n) + _x(c.after, n)) / 2]
    )
    step = max(1, n // 8)
    ticks = "".join(
        f'<text x="{_x(i, n):.1f}" y="{H - PAD_B + 14}" text-anchor="middle">{html.escape(label)}</text>'
        for i, r in enumerate(runs)
        for label in [(r.commit or "?")[:7]]
        if i % step == 0
    )
    axis = (
        f'<text x="{PAD_L - 4}" y="{y(hi) + 4:.1f}" text-anchor="end">{html.escape(fmt_unit(hi, s.unit))}</text>'
        f'<text x="{PAD_L - 4}" y="{y(lo):.1f}" text-anchor="end">{html.escape(fmt_unit(lo, s.unit))}</text>'
    )
    return (
        f'<svg class="trend" id="{chart_id}" width="{W}" height="{H}" viewBox="0 0 {W} {H}" role="img">'
        f'<line x1="{PAD_L}" x2="{W - PAD_R}" y1="{H - PAD_B}" y2="{H - PAD_B}" stroke="#999"/>'
        f'<polyline points="{line}" fill="none" stroke="#1f77b4" stroke-width="1"/>{dots}{marks}{ticks}{axis}</svg>'
    )


def _link(kept: Collection[str], rel: str, label: str, href: Callable[[str], str]) -> str:
    return f'<a href="{html.escape(href(rel))}">{label}</a>' if rel in kept else f"{label}: not run yet"


def change_rows(
    a: Analysis,
    runs: Sequence[Run],
    where: tuple[str, str],
    kept: Collection[str],
    href: Callable[[str], str],
) -> str:
    """The change points of one series, each with its bisect and diff (links where kept, commands);
    ``where``: (the manifest's path, the history folder) as the commands name them."""
    manifest_path, history_dir = where
    rows = []
    for i, c in enumerate(a.changes):
        name = change_name(a.series, c, runs)
        bisect = bisect_command(a.series, c, runs, manifest_path)
        before, after = runs[c.before], runs[c.after]
        p = "exact" if c.p_value is None else f"p = {c.p_value:.2g}"
        bisect_cell = (
            _link(kept, f"bisect/{name}.json", "bisect result", href) + f"<br><code>{html.escape(bisect)}</code>"
            if bisect
            else "same commit on both sides: the machine changed, not the code"
        )
        diff_cell = _link(kept, f"diffs/{name}.json", "diff", href) + (
            f"<br><code>{html.escape(diff_command(a.series, c, runs, history_dir))}</code>"
        )
        rows.append(
            f'<tr class="change" data-change="{i}"><td>{html.escape((before.commit or "?")[:12])} &rarr; '
            f"{html.escape((after.commit or '?')[:12])}<br>{html.escape(before.started_at[:16])} &rarr; "
            f"{html.escape(after.started_at[:16])}</td><td>{html.escape(fmt_ratio(c.ratio))} ({p})</td>"
            f"<td>{bisect_cell}</td><td>{diff_cell}</td></tr>"
        )
    head = "<tr><th>between runs</th><th>change</th><th>bisect</th><th>diff</th></tr>"
    return f'<table class="changes">{head}{"".join(rows)}</table>' if rows else ""


def render_trend(
    manifest: str,
    where: tuple[str, str],
    runs: Sequence[Run],
    analyses: Sequence[Analysis],
    kept: Collection[str] = (),
    href: Callable[[str], str] = lambda rel: quote(rel),
) -> str:
    """The page (see the module docstring); ``where``: (manifest path, history folder) for the
    commands it shows; ``kept`` are the history's files (relative paths) a
    change links to, ``href`` turns such a path into a link from where the page is written."""
    order = sorted(analyses, key=lambda a: (not a.series.measured, not a.changes, a.series.key))
    n_changes = sum(len(a.changes) for a in analyses)
    short = [a for a in analyses if a.status == TOO_LITTLE]
    parts = [
        f"<h1>{html.escape(manifest)}: {len(runs)} runs, {len(analyses)} gated series, {n_changes} change points</h1>",
        f'<p class="note">Runs {html.escape(runs[0].started_at[:10])} .. {html.escape(runs[-1].started_at[:10])}. '
        "Timings: each run's fastest call, change points by E-divisive means with Student's t-test and a minimum "
        "magnitude (as Otava); deterministic metrics: "
        "every change of value. Hollow points: measured under load.</p>"
        if runs
        else "<p>no runs</p>",
    ]
    if short:
        parts.append(
            f'<p class="note">Too little data: {len(short)} series ('
            + html.escape("; ".join(f"{a.series.key}: {a.note}" for a in short))
            + ")</p>"
        )
    for k, a in enumerate(order):
        status = a.note if a.status == TOO_LITTLE else f"{len(a.changes)} change point(s)"
        parts.append(
            f'<section class="series" data-rule="{a.series.rule}" data-changes="{len(a.changes)}">'
            f"<h2>{html.escape(a.series.key)} <span class='note'>({a.series.rule}; {len(a.series.points)} runs; "
            f"{html.escape(status)})</span></h2>"
            + chart(a.series, a.changes, runs, f"chart-{k}")
            + change_rows(a, runs, where, kept, href)
            + "</section>"
        )
    title = f"trend: {html.escape(manifest)}"
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>{CSS}</style></head>'
        f"<body>{''.join(parts)}</body></html>"
    )
