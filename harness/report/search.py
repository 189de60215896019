"""The layout search's results rendered: its page (``search.html``) and its console table, pure
functions of what the search wrote (``search.json``, :func:`harness.search.output.write_outputs`): no
JAX, no model. ``python -m harness report <folder>/search.json`` renders the page again."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.fmt import fmt_bytes, fmt_pct, fmt_time

SEARCH_JSON, SEARCH_HTML = "search.json", "search.html"  # as harness.search.output writes it; the page
GiB = 2**30

_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.l,th.l{text-align:left}"
    ".no{color:#b00}"
)
_HEAD = (
    "#",
    "predicted step",
    "depth",
    "exposed all-gather",
    "exposed collectives",
    "wasted",
    "memory / device",
    "fits HBM",
    "mesh",
    "attention",
    "rules",
    "variant id",
)


def rules_text(rules: Mapping[str, Sequence[str]]) -> str:
    """``heads=tensor embed=context,fsdp mlp_in=-`` (``-``: replicated)."""
    return " ".join(f"{k}={','.join(v) or '-'}" for k, v in rules.items())


def agreement_text(agreement: Mapping[str, Any]) -> str:
    """The analytic estimate's rank agreement with the predicted step, in a sentence."""
    rho = agreement.get("spearman")
    return (
        f"The analytic estimate that ordered the candidates agrees with their predicted step at Spearman "
        f"{'-' if rho is None else f'{rho:.2f}'} over {agreement.get('pairs', 0)} compiled candidates "
        "(1: the same order; -: fewer than 3)."
    )


def _row(r: Mapping[str, Any], rank: str) -> str:
    fits = {True: "yes", False: '<span class="no">no</span>', None: "?"}[r["fits"]]
    depth = f"{r['depth']}{'' if r.get('full_depth', True) else ' (proxy, scaled)'}"
    rules = r.get("label") or rules_text(r["rules"])
    mesh = " x ".join(f"{a}={s}" for a, s in r["mesh"].items())
    error = f'<br><span class="no">{html.escape(str(r["error"]))[:300]}</span>' if r.get("error") else ""
    cells = [
        rank,
        fmt_time(r["step_s"]),
        depth,
        fmt_pct(r["exposed_all_gather"]),
        fmt_time(r["exposed_collective_s"]),
        fmt_pct(r["wasted"]),
        fmt_bytes(r["memory_bytes"]),
        fits,
    ]
    left = [html.escape(mesh), html.escape(r["attention"]), html.escape(rules) + error, html.escape(r["variant_id"])]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "".join(f'<td class="l">{c}</td>' for c in left) + "</tr>"


def search_page(summary: Mapping[str, Any], title: str | None = None) -> str:
    """One self-contained HTML page: what was pruned, the ranked candidates, the references."""
    pruned = ", ".join(f"{html.escape(k)}: {n}" for k, n in summary["pruned"].items()) or "none"
    head = "".join(
        f'<th class="{"l" if h in ("mesh", "attention", "rules", "variant id") else ""}">{h}</th>' for h in _HEAD
    )
    body = "".join(_row(r, str(r["rank"])) for r in summary["rows"])
    refs = "".join(_row(r, "ref") for r in summary.get("references", []))
    order = agreement_text(summary.get("analytic_rank_agreement") or {})
    title = title or summary.get("title") or "Layout search"
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        f"<p>{summary['declared']} declared candidates, pruned before compiling: {pruned}; "
        f"{summary['evaluations']} evaluated. Predicted = the schedule simulator on the compiled program; "
        f"a proxy's step and memory are scaled per block to full depth. {order}</p>"
        f"<table><tr>{head}</tr>{body}{refs}</table></body></html>"
    )


def _ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v * 1e3:.1f}" if v < 0.1 else f"{v * 1e3:.0f}"


def console_table(table: Sequence[Mapping[str, Any]], references: Sequence[Mapping[str, Any]] = ()) -> str:
    """Ranked candidates (and hand-written references) as plain text."""
    head = (
        "#",
        "step ms",
        "interval ms",
        "depth",
        "exp AG",
        "exp coll ms",
        "wasted",
        "mem GiB",
        "fits",
        "mesh",
        "attn",
        "rules",
    )
    lines = [head]
    for r in [*table, *references]:
        mem = "-" if r["memory_bytes"] is None else f"{r['memory_bytes'] / GiB:.1f}"
        rank = str(r.get("rank", "ref")) + ("~" if r.get("tie_with_previous") else "")
        interval = r.get("interval_s")
        span = f"{_ms(interval[0])}..{_ms(interval[1])}" if interval else "-"
        depth = f"{r['depth']}{'' if r.get('full_depth', True) else ' proxy'}"
        shares = [fmt_pct(r["exposed_all_gather"]), _ms(r["exposed_collective_s"]), fmt_pct(r["wasted"])]
        fits = {True: "yes", False: "no", None: "?"}[r["fits"]]
        mesh = "x".join(f"{a}{s}" for a, s in r["mesh"].items())
        layout = (mesh, r["attention"], r.get("label") or rules_text(r["rules"]))
        lines.append((rank, _ms(r["step_s"]), span, depth, *shares, mem, fits, *layout))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    text = ["  ".join(v.ljust(w) for v, w in zip(line[:-1], widths, strict=True)) + "  " + line[-1] for line in lines]
    return (
        "\n".join(text)
        + "\n(depth N proxy: compiled with N blocks, step and memory scaled per block to full depth; "
        + "N~: a tie with the row above, its order flips within the constants' stated uncertainty)"
    )


def write(result_path: str | Path, out: str | Path | None = None) -> Path:
    """``search.html`` of a ``search.json``, next to it unless ``out`` (a folder) is given."""
    result_path = Path(result_path)
    summary = json.loads(result_path.read_text())
    folder = Path(out) if out is not None else result_path.parent
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / SEARCH_HTML
    page.write_text(search_page(summary))
    return page
