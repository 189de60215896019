"""Per-variant detail and the attribution sections of the page: where the time went by model scope,
the ops that took it (with their scope and source line), collectives by scope and by the rule that
caused them, coverage of the attribution, and the diff against the variant's reference.

Inputs are the numbers the worker stored (``trace.by_scope``, ``trace.step_samples``,
``trace.top_ops``, ``static.attribution``) and :mod:`harness.results.diff`; nothing is re-parsed.
Time by scope takes any per-instruction timeline through one function
(:func:`harness.metrics.compiled.attribution.time_by_scope`), so a predicted timeline's section is one call
of :func:`scope_time_table` with its own by-scope numbers.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.families import Attribution, ScopeStatic, Trace
from harness.fmt import fmt_bytes, fmt_flops, fmt_num, fmt_pct, fmt_time
from harness.report import interactive as ui
from harness.report import predicted
from harness.report.charts import bar_chart
from harness.report.static_text import COVERAGE_KEYS, attributed, static_attributed
from harness.report.tables import XPROF_PORT, href
from harness.results.diff import Delta, StageDiff
from harness.results.record import Record, StageEntry
from harness.vocabulary import UNATTRIBUTED, label

e = html.escape
TOP_SCOPES = 14  # bars per time-by-scope chart


def _ms_ns(ns: float | None) -> str:
    return "-" if ns is None else fmt_time(ns / 1e9)


def _slug(*parts: str) -> str:
    return "-".join("".join(c if c.isalnum() else "_" for c in p) for p in parts)


# --------------------------------------------------------------------------- pieces of one stage


def trace_block(r: Record, stage: str, entry: StageEntry, out_dir: str | Path) -> str:
    """The trace's folder (link), the command that opens it, and the Perfetto Chrome-JSON."""
    trace = entry.trace or Trace()
    path = r.artifacts.traces.get(stage) or trace.log_dir
    if not path:
        return '<p class="note">No trace of this stage.</p>'
    rel, chrome = href(path, out_dir), trace.chrome_trace
    perfetto = ""
    if chrome:
        crel = href(chrome, out_dir)
        perfetto = (
            f' Perfetto: <a class="perfetto" href="{e(crel)}">{e(Path(chrome).name)}</a> '
            '<span class=note>(open ui.perfetto.dev, "Open trace file", pick this file)</span>'
        )
    return (
        f'<p class="trace">Trace: <a href="{e(rel)}">{e(rel)}</a>; open with '
        f"<code>xprof --logdir {e(str(path))} --port {XPROF_PORT}</code> (or <code>tensorboard --logdir "
        f"{e(str(path))}</code> with the profile plugin), then localhost:{XPROF_PORT}.{perfetto}</p>"
    )


def coverage_line(entry: StageEntry) -> str:
    trace, attribution = entry.trace or Trace(), _attribution(entry)
    cov = attribution.coverage or {}
    rest = (trace.by_scope or {}).get(UNATTRIBUTED)
    return (
        '<p class="coverage">Attributed to a model scope: traced op time '
        f"{attributed(trace.scope_coverage, trace.scope_inferred)}"
        f"{f' (unattributed {_ms_ns(rest)} per step)' if rest else ''}, FLOPs {static_attributed(cov, 'flops')}, "
        f"bytes {static_attributed(cov, 'bytes')}, collective bytes {static_attributed(cov, 'collective_bytes')}.</p>"
    )


def _attribution(entry: StageEntry) -> Attribution:
    return (entry.static.attribution if entry.static else None) or Attribution()


def scope_time_table(by_scope: Mapping[str, float], static: Attribution, table_id: str, what: str) -> str:
    """Time per step by scope (``by_scope``: ns, from any timeline) beside the static FLOPs, bytes and
    collectives of the same scopes; sortable, filterable, with a chart of the largest."""
    statics = static.by_scope or {}
    scopes = sorted(set(by_scope) | set(statics), key=lambda s: -by_scope.get(s, 0.0))
    total = sum(by_scope.values()) or None
    rows = []
    for s in scopes:
        ns, st = by_scope.get(s), statics.get(s) or ScopeStatic()
        colls = st.collectives or {}
        count, nbytes = st.collective_count, st.collective_bytes
        rows.append(
            "<tr>"
            + ui.cell(label(s), left=True)
            + ui.cell(_ms_ns(ns), ns or 0)
            + ui.cell(fmt_pct(ns / total if ns is not None and total else None), ns or 0)
            + ui.cell(fmt_flops(st.flops), st.flops or 0)
            + ui.cell(fmt_bytes(st.bytes), st.bytes or 0)
            + ui.cell(fmt_num(count) if colls else "-", count)
            + ui.cell(fmt_bytes(nbytes) if colls else "-", nbytes)
            + "</tr>"
        )
    chart_items = [(label(s), by_scope[s] / 1e9) for s in scopes if by_scope.get(s)][:TOP_SCOPES]
    chart = bar_chart(
        chart_items, fmt_time, f"{what}: time per step by scope (largest {len(chart_items)})", f"chart-{table_id}"
    )
    head = ["scope", "time / step", "share", "FLOPs / call", "bytes / call", "collectives", "collective bytes"]
    return chart + ui.table(head, rows, table_id)


def top_ops_table(entry: StageEntry, table_id: str, n: int = 15) -> str:
    ops = list((entry.trace.top_ops if entry.trace else None) or ())[:n]
    if not ops:
        return ""
    rows = [
        "<tr>"
        + ui.cell(f"<code>{e(str(o.op))}</code>", left=True, raw=True)
        + ui.cell(label(str(o.scope or "")), left=True)
        + ui.cell(str(o.source or "-"), left=True)
        + ui.cell(str(o.category), left=True)
        + ui.cell(fmt_num(o.count), o.count or 0)
        + ui.cell(fmt_time((o.total_ns or 0) / 1e9), o.total_ns or 0)
        + "</tr>"
        for o in ops
    ]
    return "<h5>Top ops (self time, all devices and traced steps)</h5>" + ui.table(
        ["op", "scope", "source line", "category", "executions", "total time"], rows, table_id, 4
    )


def collective_sites_table(entry: StageEntry, table_id: str) -> str:
    sites = _attribution(entry).collective_sites or ()
    if not sites:
        return '<p class="note">No collectives in this program.</p>'
    rows = [
        "<tr>"
        + ui.cell(label(s.scope or ""), left=True)
        + ui.cell(str(s.kind), left=True)
        + ui.cell(fmt_num(s.count), s.count or 0)
        + ui.cell(fmt_bytes(s.bytes), s.bytes or 0)
        + ui.cell(str(s.cause or "-"), left=True)
        + ui.cell(", ".join(s.axes or ()) or "-", left=True)
        + ui.cell(str(s.logical or "-"), left=True)
        + "</tr>"
        for s in sites
    ]
    return "<h5>Collectives by scope and rule (per device and call)</h5>" + ui.table(
        ["scope", "kind", "count", "bytes", "rule / cause", "mesh axes", "logical axis"], rows, table_id, 2
    )


def _delta_row(d: Delta, name: str) -> str:
    ci = "-" if d.ci is None else f"[{_ms_ns(d.ci[0])}, {_ms_ns(d.ci[1])}]"
    sig = '<span class="sig">yes</span>' if d.significant else "no"
    return (
        "<tr>"
        + ui.cell(name, left=True)
        + ui.cell(_ms_ns(d.base_ns), d.base_ns)
        + ui.cell(_ms_ns(d.head_ns), d.head_ns)
        + ui.cell(_ms_ns(d.delta_ns), d.delta_ns)
        + ui.cell(ci)
        + ui.cell(fmt_pct(d.share), d.share if d.share is not None else 0)
        + ui.cell(sig, raw=True)
        + "</tr>"
    )


DELTAS = ("part", "reference / step", "this / step", "delta", "95% CI of delta", "share of step delta", "significant")


def diff_block(d: StageDiff, table_id: str, top: int = 15) -> str:
    """A stage's diff against its reference: step, categories, top scopes, collective deltas."""
    head = f"<h5>Against {e(d.base)}: speedup {e(d.speedup_note)}; traced steps {d.steps[0]} / {d.steps[1]}</h5>"
    if d.note:
        head += f'<p class="note diff-note">{e(d.note)}</p>'
    if d.step is None:
        body = '<p class="note">No per-step trace samples on both sides: no time deltas.</p>'
    else:
        rows = [_delta_row(d.step, "step (window)")]
        rows += [_delta_row(c, f"category: {c.key}") for c in d.categories]
        rows += [_delta_row(s, f"scope: {label(s.key)}") for s in d.scopes[:top]]
        chart = bar_chart(
            [(label(s.key), s.delta_ns / 1e9) for s in d.scopes[:TOP_SCOPES] if s.delta_ns],
            fmt_time,
            f"{d.head} - {d.base}: delta per step by scope",
            f"chart-{table_id}",
        )
        body = (
            chart
            + ui.table(DELTAS, rows, table_id)
            + f'<p class="note">Means over traced steps; intervals: bootstrap-t, simultaneous (Bonferroni) '
            f"over the table's parts; {max(0, len(d.scopes) - top)} smaller scope deltas not shown.</p>"
        )
    changed = [c for c in d.collectives if c.base_count != c.head_count or c.base_bytes != c.head_bytes]
    if changed:
        rows = [
            "<tr>"
            + ui.cell(label(c.scope), left=True)
            + ui.cell(c.kind, left=True)
            + ui.cell(fmt_num(c.base_count), c.base_count)
            + ui.cell(fmt_num(c.head_count), c.head_count)
            + ui.cell(fmt_bytes(c.base_bytes), c.base_bytes)
            + ui.cell(fmt_bytes(c.head_bytes), c.head_bytes)
            + "</tr>"
            for c in changed
        ]
        body += "<h5>Collective deltas by scope (per call)</h5>" + ui.table(
            ["scope", "kind", "reference count", "this count", "reference bytes", "this bytes"],
            rows,
            f"{table_id}-collectives",
            2,
        )
    elif d.collectives:
        body += '<p class="note">Collectives by scope: unchanged.</p>'
    return f'<div class="diff">{head}{body}</div>'


# --------------------------------------------------------------------------- sections


def variant_details(records: Sequence[Record], diffs: Mapping[tuple[str, str], StageDiff], out_dir: str | Path) -> str:
    """One collapsible block per variant, each stage's attribution and its diff against the reference."""
    blocks = []
    for r in records:
        if not r.ok:
            continue
        ref = r.variant.reference
        parts = []
        for stage, entry in r.stages.items():
            slug = _slug(r.variant.name, stage)
            parts.append(
                f"<h4>{e(stage)}</h4>{trace_block(r, stage, entry, out_dir)}{coverage_line(entry)}"
                + predicted.gantt_block(entry, f"gantt-{slug}", f"{r.variant.name} / {stage}")
            )
            if entry.status != "ok":
                parts.append(f"<pre>{e(str(entry.error or entry.status))}</pre>")
                continue
            by_scope = (entry.trace.by_scope if entry.trace else None) or {}
            what = f"{r.variant.name} / {stage}"
            parts.append(scope_time_table(by_scope, _attribution(entry), f"scopes-{slug}", what))
            parts.append(top_ops_table(entry, f"ops-{slug}"))
            parts.append(collective_sites_table(entry, f"sites-{slug}"))
            if (d := diffs.get((r.variant.name, stage))) is not None:
                parts.append(diff_block(d, f"diff-{slug}"))
        summary = (
            f"{e(r.variant.name)} <span class=note>{e(r.variant.id)} · {e(', '.join(r.stages))} · "
            f"{'reference: ' + e(ref) if ref else 'no reference (a reference itself)'}</span>"
        )
        blocks.append(
            f'<details class="variant-detail" id="detail-{_slug(r.variant.name)}" '
            f'data-variant="{e(r.variant.name)}"><summary>{summary}</summary>{"".join(parts)}</details>'
        )
    if not blocks:
        return ""
    return (
        '<section id="details"><h2>Per variant: where the time went</h2><p class="note">Time by model scope is '
        "the traced ops' self time per step (mean over devices and traced steps); FLOPs, bytes and collectives "
        "by scope come from the compiled program. Scope names: ltx2/scopes.py.</p>" + "".join(blocks) + "</section>"
    )


def coverage_section(records: Sequence[Record]) -> str:
    """How much of each stage's time, FLOPs, bytes and collective bytes has a model scope."""
    rows = []
    for r in records:
        for stage, entry in r.stages.items():
            trace, cov = entry.trace or Trace(), _attribution(entry).coverage or {}
            if not trace.scope_coverage and not cov:
                continue
            rest = (trace.by_scope or {}).get(UNATTRIBUTED)
            traced = trace.scope_coverage
            statics = [(static_attributed(cov, k), cov.get(k)) for k in COVERAGE_KEYS]
            values = [(attributed(traced, trace.scope_inferred), traced), *statics]
            rows.append(
                f'<tr data-variant="{e(r.variant.name)}">'
                + ui.cell(r.variant.name, left=True)
                + ui.cell(stage, left=True)
                + "".join(ui.cell(text, v if v is not None else -1) for text, v in values)
                + ui.cell(_ms_ns(rest) if rest else "-", rest or 0)
                + "</tr>"
            )
    if not rows:
        return ""
    head = ["variant", "stage", "traced time", "FLOPs", "bytes", "collective bytes", "unattributed time / step"]
    return (
        '<section id="coverage"><h2>Attribution coverage</h2>'
        + ui.table(head, rows, "coverage-table", 2)
        + '<p class="note">Share of each total that maps to a model scope ("-": nothing to attribute, e.g. no '
        "collectives); <em>inferred</em>: the part whose scope comes from the op's fused ops, neighbours or "
        "fusion, not its own name.</p></section>"
    )
