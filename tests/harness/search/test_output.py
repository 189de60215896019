"""What a search writes: the winners manifest loads as a sweep whose variants carry the winners'
rules, mesh and kernel at full depth; search.json and search.html rank them; the console table."""

from __future__ import annotations

import json
from pathlib import Path

from harness import cli
from harness.expansion import load_sweep
from harness.model import build_config, rules_of
from harness.plan.manifest import load_manifest
from harness.plan.toml import toml_value
from harness.report.search import console_table
from harness.report.search import write as write_page
from harness.search.output import mark_ties, rank_agreement, rows, write_outputs
from harness.search.strategy import search
from tests.harness.search.test_search_manifest import HEAD
from tests.harness.search.test_space import MESH, tiny_facts
from tests.harness.search.test_strategy import BEST, HW, SPACE, Known


def test_toml_values() -> None:
    assert toml_value({"a": [1, "x", True], "b.c": 0.5}) == '{ a = [1, "x", true], "b.c" = 0.5 }'


def test_the_winners_manifest_runs_the_winners_as_they_are(tmp_path: Path) -> None:
    source = tmp_path / "space.toml"
    source.write_text(HEAD + '[run]\nmetrics = ["static"]\n')
    manifest = load_manifest(source)
    result = search(SPACE, tiny_facts(), 8, HW, Known(), budget=12)
    paths = write_outputs(tmp_path / "out", manifest, result, SPACE.base, winners=2)

    sweep = load_sweep(paths["winners"])
    assert [v.name for v in sweep.variants] == ["search-1", "search-2"]
    ranked = result.ranked()
    for variant, (cand, _) in zip(sweep.variants, ranked, strict=False):
        assert {k: tuple(v) for k, v in rules_of(variant.config_overrides).items()} == dict(cand.rules)
        assert variant.target.mesh == MESH
        assert variant.config_overrides["transformer.attention_impl"] == cand.attention
        assert "transformer.num_layers" not in variant.config_overrides  # full depth
    first = build_config(sweep.variants[0].preset, sweep.variants[0].config_overrides)
    assert first.transformer.sharding == "replicated+" + "+".join(
        f"{k}={','.join(v) or '-'}" for k, v in sorted(BEST.items())
    )
    assert sweep.manifest.workload == manifest.workload and sweep.manifest.run == manifest.run

    summary = json.loads(paths["json"].read_text())
    assert summary["declared"] == 32 and summary["evaluations"] == result.evaluations
    assert summary["rows"][0]["rules"] == {k: list(v) for k, v in BEST.items()}
    assert summary["rows"][0]["step_s"] == 0.010 and summary["rows"][0]["confirmed"] is True
    page = write_page(paths["json"]).read_text()
    assert page.startswith("<!doctype html>") and summary["rows"][0]["variant_id"] in page
    agreement = summary["analytic_rank_agreement"]
    ok = [r for r in summary["rows"] if r["status"] == "ok" and r["step_s"] is not None]
    assert agreement == rank_agreement(summary["rows"]) and agreement["pairs"] == len(ok) >= 3
    assert f"Spearman {agreement['spearman']:.2f} over {len(ok)} compiled candidates" in page
    again = tmp_path / "again"  # the page is a function of search.json alone: the report verb renders it again
    assert cli.main(["report", str(paths["json"]), "--out", str(again)]) == 0
    assert (again / "search.html").read_text() == page and f"Layout search: {manifest.name}" in page


def test_the_console_table_ranks_best_first() -> None:
    result = search(SPACE, tiny_facts(), 8, HW, Known(), budget=12)
    lines = console_table(rows(result)).splitlines()
    assert lines[0].split()[:2] == ["#", "step"]
    assert lines[1].split()[:4] == ["1", "10.0", "-", "2"]  # no interval: the fake records carry none
    assert "heads=tensor mlp=- activation_batch=data activation_length=context" in lines[1]


def test_a_row_whose_order_flips_within_the_uncertainty_is_a_tie() -> None:
    def row(step: float, fast: float, slow: float) -> dict[str, object]:
        points = {"base": step, "fast": fast, "slow": slow}
        return {"step_s": step, "status": "ok", "interval_s": [fast, slow], "points_s": points, "spec": "v6e:2x4"}

    table = mark_ties([row(0.4326, 0.40, 0.47), row(0.4361, 0.39, 0.48), row(0.50, 0.45, 0.55)])
    # 432.6 vs 436.1 ms: faster at base, slower with the constants at their fast ends -> a tie
    assert [r["tie_with_previous"] for r in table] == [False, True, False]
    lines = console_table(
        [
            {
                **r,
                "rank": i,
                "depth": 2,
                "exposed_all_gather": None,
                "exposed_collective_s": None,
                "wasted": None,
                "memory_bytes": None,
                "fits": True,
                "mesh": {"data": 8},
                "attention": "dot",
                "rules": {},
            }
            for i, r in enumerate(table, start=1)
        ]
    ).splitlines()
    assert [line.split()[:3] for line in lines[1:4]] == [
        ["1", "433", "400..470"],
        ["2~", "436", "390..480"],
        ["3", "500", "450..550"],
    ]
