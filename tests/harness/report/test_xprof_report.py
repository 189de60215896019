"""XProf's numbers and a manifest's published ``[reference]`` in the report (:mod:`harness.report.xprof`):
the ladder's cells, the cause of each rung's change, the page sections, the console and the diff lines."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest

from harness.plan.manifest import load_manifest
from harness.report import write_report
from harness.report.xprof import console, ladder_rows, load_reference, pair_lines, reference_section, xprof_rows
from tests.harness.fixtures import synthetic

MANIFEST = """\
schema_version = 1
[target]
devices = 8
mesh = { data = -1 }
[model]
preset = "tiny"
[workload]
height = 64
width = 64
num_frames = 9
text_tokens = 16
[[variants]]
name = "before"
[[variants]]
name = "fixed"
reference = "before"
[reference]
source = "https://example.org/pull/1"
hardware = "TPU v7x-8"
[reference.rungs.before]
all_gather_wasted_fraction = 0.5256
video_s = 20.01
[reference.rungs.fixed]
all_gather_wasted_fraction = 0.3807
video_s = 16.7
diffusion_s = 7.28
"""


def _xprof(ag_ns: float, other_ns: float) -> dict[str, Any]:
    total = ag_ns + other_ns
    return {
        "root": {"time_ns": total, "time_fraction": 1.0, "flops_utilization": 0.4, "hbm_bw_utilization": 0.2},
        "categories": {
            "all-gather": {"time_ns": ag_ns, "wasted_fraction": ag_ns / total},
            "fusion": {"time_ns": other_ns, "wasted_fraction": 0.1},
        },
        "all_gather_wasted_fraction": ag_ns / total,
    }


def _predicted(step_s: float, ag_ns: float, ffn_ns: float, calls: int = 40) -> dict[str, Any]:
    return {
        "step_s": step_s,
        "video_s": step_s * calls,
        "calls_per_video": calls,
        "exposed_all_gather_fraction": 0.07,
        "wasted_fraction": 0.33,
        "xprof": _xprof(ag_ns, step_s * 1e9 - ag_ns),
        "critical_path": [
            {"op": "ag.1", "scope": "transformer/block/attn1/qkv", "category": "all-gather", "ns": ag_ns, "count": 48},
            {
                "op": "fusion.2",
                "scope": "transformer/block/ff/proj_in",
                "category": "compute",
                "ns": ffn_ns,
                "count": 48,
            },
        ],
    }


@pytest.fixture()
def records(tmp_path: Path) -> list[Any]:
    path = tmp_path / "ladder.toml"
    path.write_text(MANIFEST)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    reference = load_manifest(path).reference
    assert reference is not None
    manifest = {"path": str(path), "sha256": sha, "reference": reference.to_dict()}
    before = {
        "denoise_loop": {"predicted": _predicted(0.5, 0.25e9, 0.1e9)},
        "video_decode": {"predicted": {"step_s": 1.0, "video_s": 1.0, "calls_per_video": 1}},
        "text_encode": {"status": "failed", "error": "text_encode at full size: ..."},
    }
    fixed = {"denoise_loop": {"predicted": _predicted(0.2, 0.01e9, 0.1e9)}}
    return synthetic.records(
        [
            synthetic.minimal("before", before, manifest=manifest),
            synthetic.minimal("fixed", fixed, manifest=manifest),
        ]
    )


def test_ladder_puts_published_beside_ours_and_says_what_moved(records: list[Any]) -> None:
    reference, note = load_reference(records)
    assert reference is not None and note == ""
    before, fixed = ladder_rows(records, reference)
    assert before.published == {"all_gather_wasted_fraction": 0.5256, "video_s": 20.01}
    assert before.ag_wasted == pytest.approx(0.5)  # 0.25 s of 0.5 s all-gather
    assert before.video_s == pytest.approx(0.5 * 40 + 1.0)  # every predicted stage
    assert before.diffusion_s == pytest.approx(20.0)
    assert before.missing == ("text_encode",) and before.why == ""
    assert fixed.ag_wasted == pytest.approx(0.05) and fixed.video_s == pytest.approx(8.0)
    # critical path: the all-gather on qkv fell 0.24 s per step x 40 steps; XProf's all-gather category too
    assert fixed.why == "critical path: transformer/block/attn1 [all-gather] -9.6 s; XProf category: all-gather -9.6 s"


def test_page_and_console_show_the_ladder_and_xprof_numbers(records: list[Any], tmp_path: Path) -> None:
    page = write_report(records, tmp_path / "out").index.read_text()
    assert '<section id="published">' in page and '<section id="xprof">' in page
    assert "52.6%" in page and "50.0%" in page and "https://example.org/pull/1" in page
    assert "Wasted % in XProf" in page  # the definitions are on the page
    text = console(records)
    assert "before: AG wasted 52.6% published | 50.0% ours" in text
    assert "per video 20 s | 21 s" in text and "not predicted (not in ours per video): text_encode" in text
    assert "fixed / denoise_loop (predicted): AG wasted 5.0%, FLOPs 40.0%, HBM 20.0%" in text
    assert reference_section(records).count("<tr>") == 3  # head + two rungs


def test_xprof_rows_and_diff_lines(records: list[Any]) -> None:
    rows = xprof_rows(records)
    assert [(r.variant, r.stage, r.source) for r in rows] == [
        ("before", "denoise_loop", "predicted"),
        ("fixed", "denoise_loop", "predicted"),
    ]
    assert rows[0].top_wasted == "all-gather 50.0%, fusion 10.0%"
    lines = pair_lines(records[0], records[1], "denoise_loop").splitlines()
    assert lines[0].startswith("  XProf before (predicted): AG wasted 50.0%") and len(lines) == 2
    assert pair_lines(records[0], records[1], "video_decode").startswith("  XProf") is False


def test_no_reference_no_section(records: list[Any], tmp_path: Path) -> None:
    Path(records[0].manifest.path).unlink()  # the page reads the records only: the manifest file is not needed
    assert load_reference(records)[0] is not None and reference_section(records) != ""
    records = [r.replace(manifest=dataclasses.replace(r.manifest, reference=None)) for r in records]
    assert load_reference(records) == (None, "")
    assert reference_section(records) == ""
