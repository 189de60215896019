"""Plain-text tables for a terminal, each at most :data:`WIDTH` columns wide.

* :func:`summary_table`: the end of a sweep, one row per variant and stage (status, median time,
  speedup against the variant's reference, the predicted step and its exposed all-gather / wasted
  shares in percent, compile time, recompiles, collectives, their bytes and memory per device, wasted
  share of the traced window, and the share of traced op time attributed to a model scope), names
  whole;
* :func:`format_diff`: one stage of a variant against another (``python -m harness diff``).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from harness.families import Predicted
from harness.fmt import fmt_bytes, fmt_time
from harness.report import tables
from harness.results.diff import Delta, StageDiff
from harness.results.record import Record
from harness.vocabulary import label

WIDTH = 120
MIB = 2**20


def _cell(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def grid(rows: list[list[str]], right_from: int) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.rjust(w) if i >= right_from else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _shares(predicted: Predicted) -> str:
    """``12/30``: the predicted step's exposed all-gather and wasted shares, in percent."""
    ag, wasted = predicted.exposed_all_gather_fraction, predicted.wasted_fraction
    return "-" if ag is None or wasted is None else f"{ag * 100:.0f}/{wasted * 100:.0f}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in pieces of at most ``width`` characters, broken after a ``-`` or ``_`` where one is near."""
    pieces = []
    while len(text) > width:
        cut = max(text.rfind("-", 0, width), text.rfind("_", 0, width)) + 1
        cut = cut if cut > width // 2 else width
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text]


# The summary's columns after variant / stage / status; DROP_ORDER: the ones left out, in this order,
# while the table is wider than WIDTH (the names are never shortened).
SUMMARY_COLUMNS = (
    "median",
    "vs ref",
    "pred step",
    "AG/wst%",
    "compile",
    "rcmp",
    "colls",
    "coll bytes",
    "mem/dev",
    "wasted",
    "scoped",
)
NAME_WRAP = 32  # longer variant names wrap onto further lines before any column is left out
DROP_ORDER = ("rcmp", "scoped", "wasted", "colls", "AG/wst%", "coll bytes", "compile", "vs ref")


def _summary_cells(records: Sequence[Record]) -> list[list[str]]:
    pred = {(r.variant.name, s): e.predicted or Predicted() for r in records for s, e in r.stages.items()}
    rows = []
    for r in tables.stage_rows(records):
        p = pred.get((r.variant, r.stage)) or Predicted()
        speedup = "-" if r.speedup_note is None else r.speedup_note.split(" ")[0]  # "n/a (different workload)": n/a
        measured = [fmt_time(r.time.median if r.time else None), speedup]
        predicted = [fmt_time(p.step_s), _shares(p)]
        compiled = [fmt_time(r.compile_s), _cell(r.recompiles, ".0f"), _cell(r.collective_count, ".0f")]
        compiled += [fmt_bytes(r.collective_bytes), fmt_bytes(r.memory_bytes)]
        traced = [_cell(r.wasted_fraction, ".0%"), _cell(r.scope_coverage, ".0%")]
        rows.append([r.variant, r.stage, r.status, *measured, *predicted, *compiled, *traced])
    return rows


def summary_table(records: Sequence[Record]) -> str:
    """One row per (variant, stage) within :data:`WIDTH` columns: columns with nothing to show are left
    out; names over :data:`NAME_WRAP` characters wrap onto the next lines (whole, never clipped); then
    the least telling columns (:data:`DROP_ORDER`, named below the table) go until the rest fit."""
    head = ["variant", "stage", "status", *SUMMARY_COLUMNS]
    rows = _summary_cells(records)
    keep = [i for i in range(len(head)) if i < 3 or any(row[i] != "-" for row in rows)]
    dropped = []

    def width(cols: list[int]) -> int:
        widths = [max(len(row[i]) for row in [head, *rows]) for i in cols]
        widths[0] = min(widths[0], NAME_WRAP) if cols[0] == 0 else widths[0]
        return sum(widths) + 2 * (len(cols) - 1)

    for name in DROP_ORDER:
        if width(keep) <= WIDTH:
            break
        if (i := head.index(name)) in keep:
            keep.remove(i)
            dropped.append(name)
    name_width = max(NAME_WRAP, WIDTH - width(keep[1:]) - 2)
    table = [[head[i] for i in keep]]
    for row in rows:
        names = _wrap(row[0], name_width)
        table.append([names[0], *(row[i] for i in keep[1:])])
        table += [[piece, *("" for _ in keep[1:])] for piece in names[1:]]
    lines = grid(table, right_from=3)
    if dropped:
        lines.append(f"(columns left out for width: {', '.join(dropped)}; the report page has them)")
    return "\n".join(lines)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _row(d: Delta, name: str) -> list[str]:
    ci = "-" if d.ci is None else f"[{d.ci[0] / 1e6:+.3f}, {d.ci[1] / 1e6:+.3f}]"
    share = "-" if d.share is None else f"{d.share:.0%}"
    return [
        _clip(name, 48),
        _ms(d.base_ns),
        _ms(d.head_ns),
        f"{d.delta_ns / 1e6:+.3f}",
        ci,
        share,
        "*" if d.significant else "",
    ]


def format_diff(d: StageDiff, top: int = 15) -> str:
    """A stage's diff as text: the step, each category, the ``top`` scopes by |delta|, changed collectives."""
    title = f"{d.head} vs {d.base} / {d.stage}: speedup {d.speedup_note}; traced steps {d.steps[0]}/{d.steps[1]}"
    out = [_clip(title, WIDTH)]
    if d.note:
        out += ["  " + line for line in textwrap.wrap(f"note: {d.note}", WIDTH - 2)]
    if d.step is None:
        out.append("  no per-step trace samples on both sides: no time deltas")
    else:
        head = ["part (ms per step)", "base", "head", "delta", "95% CI of delta", "share", "sig"]
        rows = [head, _row(d.step, "step (window)")]
        rows += [_row(c, f"category {c.key}") for c in d.categories]
        rows += [_row(s, f"scope {label(s.key)}") for s in d.scopes[:top]]
        out += ["  " + line for line in grid(rows, right_from=1)]
        if len(d.scopes) > top:
            out.append(f"  ... {len(d.scopes) - top} more scopes (smaller deltas)")
        out.append("  share: of the step's delta; sig (*): the interval excludes 0")
    changed = [c for c in d.collectives if c.base_count != c.head_count or c.base_bytes != c.head_bytes]
    if changed:
        rows = [["collectives by scope (per call)", "kind", "count", "delta", "MiB", "delta MiB"]]
        for c in changed:
            counts = [f"{c.head_count:g}", f"{c.head_count - c.base_count:+g}"]
            mib = [f"{c.head_bytes / MIB:.2f}", f"{(c.head_bytes - c.base_bytes) / MIB:+.2f}"]
            rows.append([_clip(label(c.scope), 48), c.kind, *counts, *mib])
        out += ["  " + line for line in grid(rows, right_from=2)]
    elif d.collectives:
        out.append("  collectives by scope: unchanged")
    return "\n".join(out)
