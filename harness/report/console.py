"""Plain-text tables for a terminal, each at most :data:`WIDTH` columns wide.

* :func:`summary_table`: the end of a sweep, one row per variant and stage (median time, speedup
  against the variant's reference, the predicted step and its exposed all-gather / wasted shares in
  percent, compile time, recompiles, collectives, memory, wasted share of the traced window, and the
  share of traced op time attributed to a model scope);
* :func:`format_diff`: one stage of a variant against another (``python -m harness diff``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.report import tables
from harness.results.diff import Delta, StageDiff
from harness.results.record import Record
from harness.vocabulary import label

WIDTH = 120
MIB = 2**20


def _cell(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _grid(rows: list[list[str]], right_from: int) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(
            c.rjust(w) if i >= right_from else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def _shares(predicted: Mapping[str, Any]) -> str:
    """``12/30``: the predicted step's exposed all-gather and wasted shares, in percent."""
    ag, wasted = predicted.get("exposed_all_gather_fraction"), predicted.get("wasted_fraction")
    return "-" if ag is None or wasted is None else f"{ag * 100:.0f}/{wasted * 100:.0f}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def summary_table(records: Sequence[Record]) -> str:
    """One row per (variant, stage), clipped to :data:`WIDTH` columns (long variant names shortened)."""
    rows_by = tables.stage_rows(records)
    coverage = {
        (r.variant.name, s): (e.trace or {}).get("scope_coverage") for r in records for s, e in r.stages.items()
    }
    pred = {(r.variant.name, s): e.predicted or {} for r in records for s, e in r.stages.items()}
    head = [
        "variant",
        "stage",
        "status",
        "med ms",
        "vs ref",
        "pred ms",
        "AG/wst%",
        "cmp s",
        "rcmp",
        "colls",
        "collMiB",
        "memMiB",
        "wasted",
        "scoped",
    ]
    rows = [head]
    for r in rows_by:
        t = r.time
        speedup = "-" if r.speedup_note is None else r.speedup_note.split(" ")[0]  # "n/a (different workload)": n/a
        p = pred.get((r.variant, r.stage)) or {}
        rows.append(
            [
                r.variant,
                r.stage,
                r.status,
                _cell(t.median * 1e3 if t else None, ".2f"),
                speedup,
                _cell(p["step_s"] * 1e3 if p.get("step_s") is not None else None, ".3g"),
                _shares(p),
                _cell(r.compile_s, ".1f"),
                _cell(r.recompiles, ".0f"),
                _cell(r.collective_count, ".0f"),
                _cell(None if r.collective_bytes is None else r.collective_bytes / MIB, ".1f"),
                _cell(None if r.memory_bytes is None else r.memory_bytes / MIB, ".1f"),
                _cell(r.wasted_fraction, ".0%"),
                _cell(coverage.get((r.variant, r.stage)), ".0%"),
            ]
        )
    lines = _grid(rows, right_from=3)
    over = max(len(line) for line in lines) - WIDTH
    if over > 0:  # shorten the free-text columns (variant, stage, vs ref), longest first
        for col in (0, 4, 1):
            longest = max(len(row[col]) for row in rows)
            cut = max(len(head[col]), longest - over)
            for row in rows[1:]:
                row[col] = _clip(row[col], cut)
            over -= longest - max(len(row[col]) for row in rows)
            if over <= 0:
                break
        lines = _grid(rows, right_from=3)
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
    if d.step is None:
        out.append("  no per-step trace samples on both sides: no time deltas")
    else:
        head = ["part (ms per step)", "base", "head", "delta", "95% CI of delta", "share", "sig"]
        rows = [head, _row(d.step, "step (window)")]
        rows += [_row(c, f"category {c.key}") for c in d.categories]
        rows += [_row(s, f"scope {label(s.key)}") for s in d.scopes[:top]]
        out += ["  " + line for line in _grid(rows, right_from=1)]
        if len(d.scopes) > top:
            out.append(f"  ... {len(d.scopes) - top} more scopes (smaller deltas)")
        out.append("  share: of the step's delta; sig (*): the interval excludes 0")
    changed = [c for c in d.collectives if c.base_count != c.head_count or c.base_bytes != c.head_bytes]
    if changed:
        rows = [["collectives by scope (per call)", "kind", "count", "delta", "MiB", "delta MiB"]]
        rows += [
            [
                _clip(label(c.scope), 48),
                c.kind,
                f"{c.head_count:g}",
                f"{c.head_count - c.base_count:+g}",
                f"{c.head_bytes / MIB:.2f}",
                f"{(c.head_bytes - c.base_bytes) / MIB:+.2f}",
            ]
            for c in changed
        ]
        out += ["  " + line for line in _grid(rows, right_from=2)]
    elif d.collectives:
        out.append("  collectives by scope: unchanged")
    return "\n".join(out)


__all__ = ["WIDTH", "format_diff", "summary_table"]
