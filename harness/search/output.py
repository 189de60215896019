"""What a search hands back: its results (``search.json``: ranked rows, what was pruned, the references;
rendered by :mod:`harness.report.search` into the page and the console table) and the winners as a
manifest of variants with per-rule overrides that ``harness sweep`` runs as is."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.agreement import spearman
from harness.plan.manifest import Manifest
from harness.plan.toml import toml_key, toml_value
from harness.results.uncertain import Uncertain, ordering
from harness.search.space import Candidate
from harness.search.strategy import SearchResult
from harness.vocabulary import StageStatus

# The manifest sections a winners manifest copies as written (everything but the variants and the space).
COPIED = ("target", "model", "workload", "run", "gate")
SEARCH_JSON = "search.json"


def _uncertain(row: Mapping[str, Any]) -> Uncertain | None:
    if row["step_s"] is None or row["status"] != "ok":
        return None
    interval = row.get("interval_s")
    return Uncertain(
        row["step_s"],
        (float(interval[0]), float(interval[1])) if interval else None,
        row.get("points_s") or {},
        row.get("spec", ""),
    )


def mark_ties(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Set each row's ``tie_with_previous``: its order against the row ranked just above it does not
    survive the constants' uncertainty (:func:`harness.results.uncertain.ordering`)."""
    for prev, row in zip([None, *table], table, strict=False):
        a, b = (None if prev is None else _uncertain(prev)), _uncertain(row)
        row["tie_with_previous"] = a is not None and b is not None and ordering(a, b) == "tie"
    return table


def rows(result: SearchResult) -> list[dict[str, Any]]:
    """One JSON-friendly row per evaluated candidate, best first (:meth:`SearchResult.ranked`), each
    marked where its order against the one above is a tie (:func:`mark_ties`)."""
    out = []
    for rank, (c, s) in enumerate(result.ranked(), start=1):
        est = result.estimates.get(c)
        out.append(
            {
                "rank": rank,
                "name": c.name,
                "mesh": dict(c.mesh),
                "attention": c.attention,
                "rules": {k: list(v) for k, v in c.rules},
                **dataclasses.asdict(s),  # every field of the score
                "confirmed": c in result.confirmed,
                "full_depth": s.depth == result.full_layers,
                "analytic_step_s": None if est is None else est.step_s,
                "interval_s": None if s.interval_s is None else list(s.interval_s),
                "points_s": dict(s.points_s),
            }
        )
    return mark_ties(out)


def rank_agreement(table: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How well the analytic estimate ordered the candidates: Spearman's rank correlation between
    its step and the predicted step (a proxy's scaled to full depth) over the rows that compiled
    (status ``ok``) and have both; ``spearman`` is None below 3 such rows or when either is constant."""
    pairs = [
        (r["analytic_step_s"], r["step_s"])
        for r in table
        if r["status"] == StageStatus.OK and r.get("analytic_step_s") is not None and r["step_s"] is not None
    ]
    rho = spearman([a for a, _ in pairs], [s for _, s in pairs]) if pairs else math.nan
    return {"spearman": None if math.isnan(rho) else rho, "pairs": len(pairs)}


# --------------------------------------------------------------------------- winners manifest


def _table(name: str, table: Mapping[str, Any]) -> list[str]:
    return [f"[{name}]", *(f"{toml_key(k)} = {toml_value(v)}" for k, v in table.items()), ""]


def winners_manifest(manifest: Manifest, winners: Sequence[tuple[Candidate, Mapping[str, Any]]], base: str) -> str:
    """A manifest of the winners (full depth: the search's settings, none of its proxy overrides), in
    rank order, named ``search-1``, ``search-2``...; ``winners`` pairs each candidate with its row."""
    lines = [
        f"# Written by `python -m harness search {manifest.path}`: its best layouts, best first.",
        "# Run them as they are: nox -s sweep -- <this file>",
        "schema_version = 1",
        "",
    ]
    for section in COPIED:
        if section in manifest.raw:
            lines += _table(section, manifest.raw[section])
    for i, (c, row) in enumerate(winners, start=1):
        step = "-" if row["step_s"] is None else f"{row['step_s'] * 1e3:.1f} ms"
        about = f"layout search rank {i}: predicted {step} per step (compiled at depth {row['depth']})"
        lines += [
            "[[variants]]",
            f'name = "search-{i}"',
            f"description = {toml_value(about)}",
            "[variants.overrides]",
            *(f"{toml_key(k)} = {toml_value(v)}" for k, v in c.overrides(base).items()),
            "",
        ]
    return "\n".join(lines)


def write_outputs(
    folder: Path,
    manifest: Manifest,
    result: SearchResult,
    base: str,
    winners: int,
    references: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Path]:
    """``search.json`` (the results, :data:`SEARCH_JSON`; its page and console table are the report's,
    :mod:`harness.report.search`) and ``winners.toml`` in ``folder``."""
    table = rows(result)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / SEARCH_JSON, "winners": folder / "winners.toml"}
    summary = {
        "declared": result.declared,
        "pruned": {k: len(v) for k, v in result.pruned.items()},
        "evaluations": result.evaluations,
        "rows": table,
        "analytic_rank_agreement": rank_agreement(table),
        "references": list(references),
    }
    summary["title"] = f"Layout search: {manifest.name}"
    paths["json"].write_text(json.dumps(summary, indent=1, sort_keys=True))
    by_name = {c.name: c for c in [*result.proxy, *result.confirmed]}
    best = [(by_name[r["name"]], r) for r in table if r["status"] == StageStatus.OK and r["step_s"] is not None][
        :winners
    ]
    paths["winners"].write_text(winners_manifest(manifest, best, base))
    return paths
