"""XProf's numbers in the report, beside ours, and a manifest's published ``[reference]`` table
beside our predictions.

A stage record may carry XProf's op-profile numbers with their definitions: ``predicted.xprof`` (the
simulated step) and ``trace.xprof`` (a measured trace; ``converter``: xprof's own op_profile tool on
it). They sit here beside our own shares, each labelled with what it means (:data:`LABELS`).

The ladder (:func:`ladder_rows`): for records of a manifest with ``[reference]`` (the table travels
in each record, ``manifest.reference``), per rung the published numbers beside ours, and for each
rung after the first how the step changed from the rung before, published and predicted, and what
our prediction says moved most (the critical path's scope and category with the largest change per
video, XProf's category with the largest change in op time). Pure Python over records.
"""

from __future__ import annotations

import html
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.families import Predicted, XprofNode, XprofProfile
from harness.fmt import fmt_pct, fmt_time
from harness.plan.reference import AG_WASTED, DIFFUSION_S, VIDEO_S, Reference
from harness.results.record import Record

e = html.escape
SCOPE_DEPTH = 3  # scope levels a critical-path change is grouped by

LABELS: dict[str, str] = {
    "xprof_ag": "XProf AG wasted: the summed Wasted % in XProf's op profile of its all-gather nodes "
    "(AG op time / all op time, idle excluded, x (1 - max(FLOPs util, HBM util)))",
    "xprof_flops": "XProf FLOPs util: all ops' FLOPs / (op time x peak FLOP/s)",
    "xprof_hbm": "XProf HBM util: all ops' HBM bytes / (op time x peak HBM B/s), capped at 1",
    "exposed_ag": "our exposed AG: all-gather time not overlapped by compute / step window",
    "wasted": "our wasted: (exposed collective time + idle) / step window",
}


# ---------------------------------------------------------------- per stage


@dataclass(frozen=True)
class XprofRow:
    """XProf's numbers of one (variant, stage, source) beside our shares."""

    variant: str
    stage: str
    source: str  # "predicted" | "trace" | "trace (xprof converter)"
    ag_wasted: float | None
    flops_util: float | None
    hbm_util: float | None
    top_wasted: str  # the categories with the most wasted share, "cat 12.3%, ..."
    exposed_ag: float | None = None
    wasted: float | None = None


def _top(profile: XprofProfile, n: int = 3) -> str:
    cats = (profile.categories or {}).items()
    ranked = sorted(cats, key=lambda kv: -(kv[1].wasted_fraction or 0.0))[:n]
    return ", ".join(f"{k} {fmt_pct(v.wasted_fraction)}" for k, v in ranked)


def _row(variant: str, stage: str, source: str, profile: XprofProfile, **ours: float | None) -> XprofRow:
    root = profile.root or XprofNode()
    return XprofRow(
        variant,
        stage,
        source,
        profile.all_gather_wasted_fraction,
        root.flops_utilization,
        root.hbm_bw_utilization,
        _top(profile),
        **ours,
    )


def xprof_rows(records: Sequence[Record]) -> list[XprofRow]:
    """Every stage's XProf numbers, predicted and measured, with our shares beside them."""
    out = []
    for r in records:
        for stage, entry in r.stages.items():
            p = entry.predicted
            if p is not None and p.xprof:
                ours = {"exposed_ag": p.exposed_all_gather_fraction, "wasted": p.wasted_fraction}
                out.append(_row(r.variant.name, stage, "predicted", p.xprof, **ours))
            t = entry.trace.xprof if entry.trace is not None else None
            if t:
                out.append(_row(r.variant.name, stage, "trace", t))
                if t.converter:
                    out.append(_row(r.variant.name, stage, "trace (xprof converter)", t.converter))
    return out


# ---------------------------------------------------------------- the published ladder


def load_reference(records: Sequence[Record]) -> tuple[Reference | None, str]:
    """The published ``[reference]`` the records carry (``manifest.reference``), and a note ("" or
    that the records carry different tables, of which the first is shown)."""
    tables = [t for r in records if (t := r.manifest.published()) is not None]
    if not tables:
        return None, ""
    differ = any(t != tables[0] for t in tables)
    return tables[0], "these records carry different [reference] tables; the first is shown" if differ else ""


@dataclass(frozen=True)
class LadderRow:
    """One rung: published numbers, ours, and the change from the rung before with its cause."""

    variant: str
    published: Mapping[str, float]
    ag_wasted: float | None  # ours, XProf's definition, the diffusion stage's prediction
    exposed_ag: float | None
    wasted: float | None
    video_s: float | None  # ours: the predicted stages' per-video times summed
    diffusion_s: float | None
    missing: tuple[str, ...]  # stages with no prediction (not in video_s)
    why: str = ""


def _predicted(record: Record | None, stage: str) -> Predicted:
    entry = record.stages.get(stage) if record else None
    return (entry.predicted if entry else None) or Predicted()


def _by_scope_category(p: Predicted) -> dict[tuple[str, str], float]:
    """Critical-path ns per video by (scope, first levels; category)."""
    calls = p.calls_per_video or 1
    out: dict[tuple[str, str], float] = defaultdict(float)
    for c in p.critical_path or ():
        scope = "/".join((c.scope or "(no scope)").split("/")[:SCOPE_DEPTH])
        out[(scope, c.category or "?")] += (c.ns or 0.0) * calls
    return out


def _categories(p: Predicted) -> dict[str, float]:
    calls = p.calls_per_video or 1
    cats = (p.xprof.categories if p.xprof else None) or {}
    return {k: (v.time_ns or 0.0) * calls for k, v in cats.items()}


def _largest(base: Mapping[Any, float], head: Mapping[Any, float]) -> tuple[Any, float] | None:
    keys = set(base) | set(head)
    if not keys:
        return None
    key = max(keys, key=lambda k: (abs(head.get(k, 0.0) - base.get(k, 0.0)), str(k)))
    return key, head.get(key, 0.0) - base.get(key, 0.0)


def why(base: Record | None, head: Record | None, stage: str) -> str:
    """What our prediction says moved most from ``base`` to ``head`` in ``stage``, per video."""
    pb, ph = _predicted(base, stage), _predicted(head, stage)
    if not pb or not ph:
        return "no prediction on both sides"
    parts = []
    path = _largest(_by_scope_category(pb), _by_scope_category(ph))
    if path is not None:
        (scope, category), ns = path
        parts.append(f"critical path: {scope} [{category}] {ns / 1e9:+.3g} s")
    cat = _largest(_categories(pb), _categories(ph))
    if cat is not None:
        parts.append(f"XProf category: {cat[0]} {cat[1] / 1e9:+.3g} s")
    return "; ".join(parts)


def ladder_rows(records: Sequence[Record], reference: Reference) -> list[LadderRow]:
    """One row per rung of ``reference``, in its order."""
    by_name = {r.variant.name: r for r in records}
    stage = reference.diffusion_stage
    out = []
    previous: Record | None = None
    for rung in reference.rungs:
        record = by_name.get(rung.variant)
        p = _predicted(record, stage)
        per_video = {
            s: e.predicted.video_s if e.predicted else None for s, e in (record.stages if record else {}).items()
        }
        have = [v for v in per_video.values() if v is not None]
        out.append(
            LadderRow(
                rung.variant,
                dict(rung.values),
                p.xprof.all_gather_wasted_fraction if p.xprof else None,
                p.exposed_all_gather_fraction,
                p.wasted_fraction,
                sum(have) if have else None,
                p.video_s,
                tuple(sorted(s for s, v in per_video.items() if v is None)) if record else ("(not run)",),
                why(previous, record, stage) if previous is not None else "",
            )
        )
        previous = record
    return out


def _sec(x: float | None) -> str:
    return "-" if x is None else fmt_time(x)


def ladder_cells(row: LadderRow) -> list[str]:
    """The row's cells, as the console and the page print them."""
    pub = row.published
    return [
        row.variant,
        fmt_pct(pub.get(AG_WASTED)),
        fmt_pct(row.ag_wasted),
        fmt_pct(row.exposed_ag),
        fmt_pct(row.wasted),
        _sec(pub.get(VIDEO_S)),
        _sec(row.video_s),
        _sec(pub.get(DIFFUSION_S)),
        _sec(row.diffusion_s),
        ", ".join(row.missing) or "-",
        row.why or "-",
    ]


LADDER_HEAD = [
    "rung",
    "published AG wasted",
    "ours XProf AG wasted",
    "our exposed AG",
    "our wasted",
    "published per video",
    "ours per video",
    "published diffusion",
    "ours diffusion",
    "not in ours",
    "what moved most from the rung before (predicted)",
]


# ---------------------------------------------------------------- page and console


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], table_id: str) -> str:
    th = "".join(f"<th>{e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table id="{table_id}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _definitions() -> str:
    return "<ul>" + "".join(f"<li>{e(text)}</li>" for text in LABELS.values()) + "</ul>"


XPROF_HEAD = [
    "variant",
    "stage",
    "from",
    "XProf AG wasted",
    "XProf FLOPs util",
    "XProf HBM util",
    "most wasted (XProf categories)",
    "our exposed AG",
    "our wasted",
]


def xprof_cells(row: XprofRow) -> list[str]:
    return [
        row.variant,
        row.stage,
        row.source,
        fmt_pct(row.ag_wasted),
        fmt_pct(row.flops_util),
        fmt_pct(row.hbm_util),
        row.top_wasted or "-",
        fmt_pct(row.exposed_ag),
        fmt_pct(row.wasted),
    ]


def xprof_section(records: Sequence[Record]) -> str:
    """The page's XProf section: every stage's op-profile numbers beside our shares ("" if none)."""
    rows = xprof_rows(records)
    if not rows:
        return ""
    return (
        '<section id="xprof"><h2>In XProf\'s terms</h2>'
        "<p>The numbers XProf's op profile shows, computed with its definitions for each predicted step "
        "and measured trace (a prediction's XSpace opens in <code>xprof --logdir</code>), beside our "
        "accounting.</p>" + _definitions() + _table(XPROF_HEAD, [xprof_cells(r) for r in rows], "xprof-table")
    ) + "</section>"


def reference_section(records: Sequence[Record]) -> str:
    """The page's published-ladder section, for records of a manifest with ``[reference]``."""
    reference, note = load_reference(records)
    if reference is None:
        return ""
    rows = ladder_rows(records, reference)
    source = reference.source
    return (
        '<section id="published"><h2>Published beside predicted</h2>'
        f"<p>{e(reference.description)} on {e(reference.hardware)}: "
        f'<a href="{e(source)}">{e(source)}</a>. Ours: predicted, the diffusion stage '
        f"<code>{e(reference.diffusion_stage)}</code> for the shares and the diffusion time, "
        "every predicted stage summed for per video.</p>"
        + (f'<p class="note">{e(note)}</p>' if note else "")
        + _definitions()
        + _table(LADDER_HEAD, [ladder_cells(r) for r in rows], "published-table")
        + "</section>"
    )


def console(records: Sequence[Record]) -> str:
    """The ladder (if the manifest has ``[reference]``) and XProf's numbers as text ("" if none)."""
    out: list[str] = []
    reference, note = load_reference(records)
    if reference is not None:
        out.append(f"published ({reference.hardware}, {reference.source}) beside predicted:")
        out += [f"  note: {note}"] if note else []
        for row in ladder_rows(records, reference):
            c = ladder_cells(row)
            out.append(
                f"  {c[0]}: AG wasted {c[1]} published | {c[2]} ours (XProf def.; our exposed AG {c[3]}, "
                f"wasted {c[4]}); per video {c[5]} | {c[6]}; diffusion {c[7]} | {c[8]}"
            )
            if row.missing:
                out.append(f"    not predicted (not in ours per video): {c[9]}")
            if row.why:
                out.append(f"    moved most from the rung before: {row.why}")
    rows = xprof_rows(records)
    if rows:
        out.append("XProf's op-profile numbers (AG wasted: the Wasted % of its all-gather nodes):")
        for r in rows:
            c = xprof_cells(r)
            out.append(
                f"  {c[0]} / {c[1]} ({c[2]}): AG wasted {c[3]}, FLOPs {c[4]}, HBM {c[5]}; "
                f"exposed AG {c[7]}, wasted {c[8]}; most wasted: {c[6]}"
            )
    return "\n".join(out)


def pair_lines(base: Record, head: Record, stage: str) -> str:
    """A diff's XProf lines: both sides' numbers for ``stage`` ("" when neither has any)."""
    lines = [
        f"  XProf {r.variant} ({r.source}): AG wasted {fmt_pct(r.ag_wasted)}, FLOPs {fmt_pct(r.flops_util)}, "
        f"HBM {fmt_pct(r.hbm_util)}; our exposed AG {fmt_pct(r.exposed_ag)}, wasted {fmt_pct(r.wasted)}"
        for rec in (base, head)
        for r in xprof_rows([rec])
        if r.stage == stage
    ]
    return "\n".join(lines)
