"""Render one self-contained ``index.html`` from result records (and optionally a baseline).

Self-contained: CSS inline, plots embedded as ``data:image/png;base64`` images, no
external scripts, styles, fonts or links to the network. The one inline script only
writes, on load, how many images decoded and how many errors occurred into
``data-*`` attributes of ``<body>``; a headless browser test reads them back.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import catalogue
from harness.families import TargetMemory
from harness.fmt import fmt_bytes, fmt_html, fmt_num, fmt_ratio, fmt_time
from harness.plan.manifest import Gate
from harness.report import detail, plots, predicted, tables, xprof
from harness.report import interactive as ui
from harness.results.compare import MISSING, NEW, Comparison, ComparisonSet
from harness.results.diff import StageDiff, reference_diffs
from harness.results.record import Record, StageEntry
from harness.results.stats import IMPROVED, NOISE, REGRESSED, UNCHANGED

VERDICT_COLOURS = {  # background, text
    REGRESSED: ("#f8d7da", "#842029"),
    IMPROVED: ("#d1e7dd", "#0f5132"),
    NOISE: ("#fff3cd", "#664d03"),
    UNCHANGED: ("#e9ecef", "#495057"),
    MISSING: ("#cfe2ff", "#084298"),
    NEW: ("#cfe2ff", "#084298"),
}
_VERDICT_ORDER = (REGRESSED, MISSING, IMPROVED, NOISE, NEW, UNCHANGED)

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #212529; }
h1 { font-size: 22px; margin: 0 0 8px; } h2 { font-size: 18px; margin: 28px 0 8px; border-bottom: 1px solid #dee2e6; }
h3 { font-size: 15px; margin: 16px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #dee2e6; padding: 3px 8px; text-align: right; vertical-align: top; }
th { background: #f1f3f5; } td.l, th.l { text-align: left; }
dl.meta { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 0; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 10px; font-weight: 600; }
.mode-compile { background: #fff3cd; color: #664d03; } .mode-measure { background: #d1e7dd; color: #0f5132; }
.status-ok { color: #0f5132; } .status-does-not-fit { color: #8a4b00; font-weight: 600; }
.status-failed, .status-timeout, .status-crashed { color: #842029; font-weight: 600; }
.verdict { font-weight: 600; } tr.ungated td { opacity: 0.7; }
figure { display: inline-block; margin: 8px 16px 8px 0; } figure img { max-width: 100%; border: 1px solid #dee2e6; }
figcaption { color: #6c757d; font-size: 12px; }
pre { background: #f8f9fa; border: 1px solid #dee2e6; padding: 8px; overflow-x: auto; max-height: 320px; }
code { background: #f1f3f5; padding: 0 3px; } .note { color: #6c757d; }
""" + "".join(f".verdict-{v} {{ background: {bg}; color: {fg}; }}\n" for v, (bg, fg) in VERDICT_COLOURS.items())

LOAD_CHECK = """
window.addEventListener("error", function () {
  document.body.dataset.errors = String(Number(document.body.dataset.errors || "0") + 1);
}, true);
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  document.body.dataset.images = String(imgs.length);
  document.body.dataset.imagesLoaded = String(imgs.filter(function (i) {
    return i.complete && i.naturalWidth > 0; }).length);
  document.body.dataset.errors = document.body.dataset.errors || "0";
});
"""

e = html.escape


# --------------------------------------------------------------------------- formatting


def verdict_cell(verdict: str) -> str:
    return f'<td class="l"><span class="verdict verdict-{e(verdict)}">{e(verdict)}</span></td>'


def _table(head: Sequence[str], body: Sequence[str], table_id: str = "", left: int = 1) -> str:
    ident = f' id="{table_id}"' if table_id else ""
    return f"<table{ident}><thead>{ui.row(head, left, 'th')}</thead><tbody>{''.join(body)}</tbody></table>"


# --------------------------------------------------------------------------- sections


def header_section(info: Mapping[str, Any], title: str | None) -> str:
    mode = (
        "compile-only (static analysis: no target devices here, so no timings or traces)"
        if info["compile_only"]
        else (
            "measured"
            if info["modes"] == ["measure"]
            else "mixed: " + ", ".join(info["modes"])
            if info["modes"]
            else "unknown"
        )
    )
    mode_class = "mode-compile" if info["compile_only"] else "mode-measure"
    m, t, manifest = info["machine"], info["target"], info["manifest"]
    versions = ", ".join(f"{k} {v}" for k, v in sorted(info["versions"].items()) if v)
    commit = ", ".join(c[:12] for c in info["commits"]) + (" (dirty tree)" if info["dirty"] else "")
    mesh = ", ".join(f"{a}={s}" for a, s in (t.mesh if t is not None else {}).items())
    span = f"{info['span'][0]} to {info['span'][1]}" if info["span"] else "-"
    where = f"{t.platform} mesh {{{mesh}}}, {t.topology or str(t.devices) + ' devices'}" if t is not None else "-"
    items = [
        (
            "Manifest",
            f"<code>{e(manifest.path if manifest else '-')}</code> "
            f"<span class=note>sha256 {e((manifest.sha256 if manifest else '')[:12])}</span>",
        ),
        ("Mode", f'<span id="mode" class="badge {mode_class}">{e(mode)}</span>'),
        ("Target", e(where)),
        (
            "Machine",
            e(
                f"{m.hostname or '-'}: {m.cpu or '-'} ({m.cpu_count or '?'} cores), "
                f"backend {m.backend or '-'}, {m.device_count or '?'} x {m.device_kind or '-'}, "
                f"{m.os or ''}, Python {m.python or '-'}"
            ),
        ),
        ("Versions", e(versions or "-")),
        ("Commit", f"<code>{e(commit)}</code>"),
        ("Ran", e(span)),
        ("Variants", e(f"{info['variants']} ({info['failed']} failed)")),
    ]
    dl = "".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in items)
    heading = title or f"Sweep {info.get('sweep_id') or '?'}"
    return f'<header><h1>{e(heading)}</h1><dl class="meta">{dl}</dl></header>'


def variant_section(rows: Sequence[tables.StageRow], reference: str | None, declared: bool = False) -> str:
    body = []
    for r in rows:
        t = r.time
        spread = f"<span class=note>IQR {fmt_time(t.iqr)}, n={t.n}</span>" if t else ""
        time = "-" if t is None else f"{fmt_html(t.median, 's')} {spread}"
        time += " <span class=note>under load</span>" if r.under_load else ""
        speedup = e(r.speedup_note or "-")
        if r.speedup_reference is not None and (declared or r.speedup_reference != reference):
            speedup += f" <span class=note>vs {e(r.speedup_reference)}</span>"
        wasted = "-" if r.wasted_fraction is None else f"{r.wasted_fraction:.1%}"
        accuracy = "-" if r.accuracy is None else f"{r.accuracy:.2e}"
        sort_accuracy = r.accuracy if r.accuracy is not None else (r.probe or {}).get("rel_l2", -1)
        if r.accuracy_max_abs is not None:
            accuracy += f" <span class=note>max {r.accuracy_max_abs:.1e}</span>"
        elif r.probe and r.accuracy is None:
            p = r.probe
            accuracy = (
                f"{p['rel_l2']:.2e} <span class=note>{p['ratio']:.3f}x plain bf16 (worse on {p['worse']}/{p['seeds']} "
                "seeds); CPU probe, small config</span>"
            )
        scoped = "-" if r.scope_coverage is None else f"{r.scope_coverage:.1%}"
        body.append(
            f'<tr data-variant="{e(r.variant)}"><td class="l">{e(r.variant)} <span class=note>{e(r.variant_id)}'
            f'</span></td><td class="l">{e(r.stage)}</td><td class="l status-{e(r.status)}">{e(r.status)}</td>'
            f'<td class="l">{e(r.mode or "-")}</td><td data-sort="{t.median if t else -1}">{time}</td>'
            f'<td data-sort="{r.speedup if r.speedup is not None else -1}">{speedup}</td>'
            f'<td data-sort="{sort_accuracy}">{accuracy}</td>'
            f'<td data-sort="{r.compile_s or 0}">{fmt_html(r.compile_s, "s")}</td><td>{fmt_num(r.recompiles)}</td>'
            f'<td data-sort="{r.memory_bytes or 0}">{fmt_html(r.memory_bytes, "bytes")}</td>'
            f'<td>{fmt_num(r.collective_count)}</td><td data-sort="{r.collective_bytes or 0}">'
            f'{fmt_html(r.collective_bytes, "bytes")}</td><td data-sort="{r.wasted_fraction or 0}">{wasted}</td>'
            f'<td data-sort="{r.scope_coverage if r.scope_coverage is not None else -1}">{scoped}</td></tr>'
        )
    against = "its reference" if declared else (reference or "-")
    head = [
        "variant",
        "stage",
        "status",
        "mode",
        "median time",
        f"speedup vs {against}",
        "rel L2 vs ref",
        "compile",
        "recompiles",
        "memory / device",
        "collectives",
        "collective bytes",
        "wasted",
        "time scoped",
    ]
    return (
        "<section><h2>Variants</h2>"
        + ui.table(head, body, "variants", left=4)
        + '<p class="note">Memory per device is the compiled program\'s bound (arguments + outputs + '
        "temporaries - aliased) where known, else its peak. Collective counts and bytes are per device and "
        "call (loop bodies counted once per trip). Wasted = exposed collective time + idle, as a share of "
        "the traced window. Speedup: the reference's median / this one's, only between the same model and "
        "workload sizes. Rel L2 vs ref: the stage's output on its reference's seeded inputs against the "
        "reference's output, |out - ref| / |ref| (max: the largest |out - ref|); for a compile-only variant, its "
        "knobs' accuracy probe: measured on CPU at a small config (not the target), the step's update against "
        "float32's, beside plain bfloat16's. Time scoped: share of traced op time attributed to a model scope.</p>"
        "</section>"
    )


def _fits(row: tables.TargetRow) -> str:
    if row.fits is None:
        return "-"
    need = f"{fmt_bytes(row.needed_bytes)} of {fmt_bytes(row.hbm_bytes)}"
    return (
        f'<span class="status-ok">yes</span> <span class=note>{need}</span>'
        if row.fits
        else f'<span class="status-does-not-fit">no</span> <span class=note>needs {need}</span>'
    )


def _unfit(entry: StageEntry) -> str:
    """Why a stage read as does-not-fit from its target analysis (records without an error text)."""
    target = entry.static.target if entry.static else None
    memory = (target.memory if target else None) or TargetMemory()
    needed, hbm = memory.needed_bytes, memory.hbm_bytes
    return f"needs {fmt_bytes(needed)} per device, the target has {fmt_bytes(hbm)}" if needed else entry.status


def target_section(records: Sequence[Record]) -> str:
    """Static analysis on the target hardware: fit, collectives per step and per video, roofline."""
    rows = tables.target_rows(records)
    if not rows:
        return ""
    kinds = sorted({k for r in rows for k in r.collective_bytes_per_call})
    body = []
    for r in rows:
        coll = "".join(f"<td>{fmt_html(r.collective_bytes_per_call.get(k), 'bytes')}</td>" for k in kinds)
        bound = f" <span class=note>{e(r.bound_by)}-bound</span>" if r.bound_by else ""
        serial = f" <span class=note>(no overlap {fmt_html(r.step_serial_s, 's')})</span>" if r.step_serial_s else ""
        body.append(
            f'<tr><td class="l">{e(r.variant)}</td><td class="l">{e(r.stage)}</td>'
            f'<td class="l">{e(r.mode or "-")}</td><td class="l">{e(r.device_kind or "-")}</td>'
            f'<td class="l">{_fits(r)}</td><td>{fmt_html(r.argument_bytes, "bytes")}</td>'
            f"<td>{fmt_html(r.temp_bytes, 'bytes')}</td>{coll}"
            f"<td>{fmt_html(r.collective_bytes_per_video, 'bytes')}</td>"
            f"<td>{fmt_html(r.flops_per_device, 'flops')}</td>"
            f"<td>{fmt_html(r.floor_s, 's')} <span class=note>(datasheet {fmt_html(r.floor_datasheet_s, 's')})</span>"
            f"</td><td>{fmt_html(r.step_s, 's')}{bound}{serial}</td>"
            f"<td>{fmt_html(r.video_s, 's')}</td><td>{fmt_html(r.compile_s, 's')}</td></tr>"
        )
    head = (
        ["variant", "stage", "mode", "device", "fits in HBM (per device)", "arguments", "temporaries"]
        + [f"{k} / call" for k in kinds]
        + ["collective bytes / video", "FLOPs / device / call", "matmul floor / call (achievable)"]
        + ["roofline / call", "roofline / video", "compile"]
    )
    assumptions, sources = tables.target_assumptions(records)
    calls = sorted({(r.stage, r.calls_per_video) for r in rows})
    notes = [f"{stage}: {n} calls per video" for stage, n in calls]
    return (
        '<section id="target"><h2>On the target</h2>'
        + _table(head, body, "target-analysis", left=5)
        + '<p class="note">Per device. Collective columns are operand bytes per call (loop bodies counted per '
        "trip); per video multiplies by the calls per video (" + e("; ".join(notes)) + "). Matmul floor: the "
        "FLOPs at the best measured GEMM rate (a published table's, harness/metrics/timeline/rates.py; "
        "for a generation without one, assumed from the measured one's efficiency), the datasheet peak's beside "
        "it. Roofline (datasheet peaks) "
        "assumptions: " + e("; ".join(assumptions)) + ". Specs: " + e(" | ".join(sources)) + ".</p>" + "</section>"
    )


def plots_section(images: Mapping[str, str | None]) -> str:
    captions = {
        "plot-stage-times": "Per-stage median time per variant; error bars span the interquartile range.",
        "plot-breakdown": "Mean per device and traced step: compute, collective time not hidden behind compute "
        "(by kind) and idle.",
        "plot-collective-bytes": "Operand bytes of the collectives of each compiled program, by kind.",
        "plot-memory": "Per-device memory of each compiled program; the black mark is the peak/bound.",
    }
    figs = [
        f'<figure id="{k}"><img alt="{e(captions[k])}" src="data:image/png;base64,{png}">'
        f"<figcaption>{e(captions[k])}</figcaption></figure>"
        for k, png in images.items()
        if png
    ]
    missing = [k.removeprefix("plot-") for k, png in images.items() if not png]
    note = f'<p class="note">Nothing to plot for: {e(", ".join(missing))}.</p>' if missing else ""
    return f"<section><h2>Plots</h2>{''.join(figs)}{note}</section>"


def collectives_section(records: Sequence[Record]) -> str:
    body = []
    for r in tables.ok_records(records):
        for stage in r.stages:
            for kind, c in tables.collectives_by_kind(r, stage).items():
                body.append(
                    f'<tr><td class="l">{e(r.variant.name)}</td><td class="l">{e(stage)}</td>'
                    f'<td class="l">{e(kind)}</td><td>{fmt_num(c.count)}</td>'
                    f"<td>{fmt_html(c.operand_bytes, 'bytes')}</td>"
                    f"<td>{fmt_html(c.result_bytes, 'bytes')}</td>"
                    "</tr>"
                )
    if not body:
        return '<section><h2>Collectives</h2><p class="note">No collectives in any compiled program.</p></section>'
    return (
        "<section><h2>Collectives</h2>"
        + _table(["variant", "stage", "kind", "count", "operand bytes", "result bytes"], body, "collectives", 3)
        + "</section>"
    )


def failed_section(records: Sequence[Record]) -> str:
    failed = tables.failed_records(records)
    stage_failures = [
        (r, s, entry) for r in tables.ok_records(records) for s, entry in r.stages.items() if entry.verdict != "ok"
    ]
    if not failed and not stage_failures:
        return '<section id="failed"><h2>Failed variants</h2><p class="note">None: every variant ran.</p></section>'
    parts = []
    for r in failed:
        log = r.artifacts.log
        parts.append(
            f'<div class="failed-variant"><h3>{e(r.variant.name)} <span class=note>'
            f'{e(r.variant.id)}</span> <span class="status-{e(r.status)}">{e(r.status)}</span></h3>'
            f"{f'<p class=note>log: <code>{e(str(log))}</code></p>' if log else ''}"
            f"<pre>{e(str(r.error or 'no error text'))}</pre></div>"
        )
    for r, stage, entry in stage_failures:
        parts.append(
            f'<div class="failed-variant"><h3>{e(r.variant.name)} / {e(stage)} <span class="status-'
            f'{e(entry.verdict)}">{e(entry.verdict)}</span></h3><pre>{e(str(entry.error or _unfit(entry)))}</pre></div>'
        )
    return f'<section id="failed"><h2>Failed variants</h2>{"".join(parts)}</section>'


def traces_section(records: Sequence[Record], out_dir: str | Path) -> str:
    links = tables.trace_links(records, out_dir)
    if not links:
        return '<section id="traces"><h2>Traces</h2><p class="note">No traces recorded.</p></section>'
    body = [
        f'<tr data-variant="{e(lk.variant)}"><td class="l">{e(lk.variant)}</td><td class="l">{e(lk.stage)}</td>'
        f'<td class="l"><a href="{e(lk.href)}">{e(lk.href)}</a></td><td class="l"><code>{e(lk.command)}</code>'
        '</td><td class="l">'
        + (f'<a class="perfetto" href="{e(lk.perfetto_href)}">Chrome JSON</a>' if lk.perfetto_href else "-")
        + "</td></tr>"
        for lk in links
    ]
    return (
        '<section id="traces"><h2>Traces</h2>'
        + ui.table(["variant", "stage", "trace directory", "open in XProf", "Perfetto"], body, "trace-links", 5)
        + f'<p class="note">Run the command, then open localhost:{tables.XPROF_PORT} in a browser. Perfetto: '
        'open ui.perfetto.dev and load the Chrome JSON (a gzipped trace file) with "Open trace file".</p>'
        "</section>"
    )


def _metric_cell(metric: str) -> str:
    """A metric's name with its catalogue label and definition as a tooltip."""
    m = catalogue.get(metric)
    return f'<td class="l" title="{e(m.label)}: {e(m.definition)}">{e(metric)}</td>'


def comparison_section(result: ComparisonSet, gate: Gate, baseline_label: str) -> str:
    counts = {v: len(result.by_verdict(v)) for v in _VERDICT_ORDER}
    summary = " ".join(f'<span class="verdict verdict-{v}">{n} {v}</span>' for v, n in counts.items() if n)
    gated = len(result.regressions)
    summary = (
        f'<strong id="gated-regressions">{gated} gated regression{"s" if gated != 1 else ""}</strong>. '
        f"All metrics: {summary}"
    )
    notes = [f"variant {n} failed in this run" for n in result.failed_now]
    notes += [f"variant {n}: only in the baseline" for n in result.only_in_baseline]
    notes += [f"variant {n}: not in the baseline" for n in result.only_in_now]
    notes += [f"variant {n}: settings changed (id {a} -> {b})" for n, (a, b) in result.changed_settings.items()]
    notes += [
        f"{c.variant} {c.stage}: timing samples taken under load ({c.under_load})"
        for c in result.comparisons
        if c.under_load
    ]

    def rows(cs: Sequence[Comparison]) -> list[str]:
        return [
            f'<tr class="{"gated" if c.gated else "ungated"}"><td class="l">{e(c.variant)}</td>'
            f'<td class="l">{e(c.stage)}</td>{_metric_cell(c.metric)}'
            f"<td>{fmt_html(c.baseline, c.unit)}</td><td>{fmt_html(c.now, c.unit)}</td>"
            f"<td>{fmt_html(c.delta, c.unit) if c.delta is not None else '-'}</td><td>{fmt_ratio(c.ratio)}</td>"
            f'{verdict_cell(c.verdict)}<td class="l">{"yes" if c.gated else "no"}</td>'
            f'<td class="l note">{e(c.detail)}</td></tr>'
            for c in cs
        ]

    head = ["variant", "stage", "metric", "baseline", "now", "delta", "ratio", "verdict", "gated", "how"]
    changed = [
        c for v in _VERDICT_ORDER if v != UNCHANGED for c in sorted(result.by_verdict(v), key=lambda c: not c.gated)
    ]
    same = result.by_verdict(UNCHANGED)
    return (
        f'<section id="comparison"><h2>Against baseline</h2><p>Baseline: <code>{e(baseline_label)}</code>. '
        f"Timing threshold {gate.timing_ratio:.2f}x at alpha {gate.alpha:g}.</p><p>{summary}</p>"
        + "".join(f'<p class="note">{e(n)}</p>' for n in notes)
        + (_table(head, rows(changed), "comparison-changed", left=3) if changed else "")
        + (
            f"<details><summary>{len(same)} unchanged metrics</summary>"
            + _table(head, rows(same), "comparison-unchanged", left=3)
            + "</details>"
            if same
            else ""
        )
        + "</section>"
    )


# --------------------------------------------------------------------------- page


@dataclass(frozen=True)
class Page:
    """What every section renderer gets: the records and what was computed from them once."""

    records: Sequence[Record]
    out_dir: str | Path
    rows: Sequence[tables.StageRow]
    reference: str | None
    diffs: Mapping[tuple[str, str], StageDiff]  # (variant, stage) -> against the variant's reference
    comparison: ComparisonSet | None = None
    gate: Gate | None = None
    baseline_label: str = ""
    title: str | None = None


Section = Callable[[Page], str]


def _comparison(p: Page) -> str:
    return "" if p.comparison is None else comparison_section(p.comparison, p.gate or Gate(), p.baseline_label)


def _variants(p: Page) -> str:
    names = [r.variant.name for r in p.records]
    declared = any(r.variant.reference for r in p.records)
    return ui.variant_toggle(names) + variant_section(p.rows, p.reference, declared)


# The page, top to bottom: a section is a function of the Page (add one by appending to a copy).
SECTIONS: tuple[Section, ...] = (
    _comparison,
    _variants,
    lambda p: predicted.predicted_section(p.records, p.out_dir),
    lambda p: xprof.reference_section(p.records),
    lambda p: xprof.xprof_section(p.records),
    lambda p: detail.coverage_section(p.records),
    lambda p: detail.variant_details(p.records, p.diffs, p.out_dir),
    lambda p: target_section(p.records),
    lambda p: predicted.calibration_section(p.records),
    lambda p: plots_section(plots.all_plots(p.records, p.rows)),
    lambda p: collectives_section(p.records),
    lambda p: failed_section(p.records),
    lambda p: traces_section(p.records, p.out_dir),
)


def render(
    records: Sequence[Record],
    out_dir: str | Path,
    *,
    comparison: ComparisonSet | None = None,
    gate: Gate | None = None,
    baseline_label: str = "",
    reference: str | None = None,
    title: str | None = None,
    sections: Sequence[Section] = SECTIONS,
) -> str:
    """The whole page as a string; ``out_dir`` only makes trace links relative to it."""
    ref = tables.pick_reference(records, reference)
    diffs = {(d.head, d.stage): d for d in reference_diffs(records)}
    page = Page(records, out_dir, tables.stage_rows(records, ref), ref, diffs, comparison, gate, baseline_label, title)
    info = tables.header(records)
    body = [header_section(info, title)] + [section(page) for section in sections]
    page_title = e(title or f"Sweep {info.get('sweep_id') or '?'}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{page_title}</title><style>{CSS}{ui.CSS}</style><script>{LOAD_CHECK}{ui.SCRIPT}</script>"
        f"</head><body>{''.join(body)}</body></html>\n"
    )
