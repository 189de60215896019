"""``python -m harness search`` on the committed TPU search manifests, compiled for the real slices with
libtpu: a budget of 2 compiles two full-depth 19B candidates (the hand-written layouts it starts
from) and the manifest's variants as references, every one with a predicted step; a layout fits (the
seeds are layouts a full search found to fit), and the winners manifest loads with it first.

Marked ``aot`` and ``slow``: four or five 19B compiles per manifest (a minute or two each on 2 cores) --
``nox -s aot -- -m aot tests/harness/search/test_search_tpu.py``."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.expansion import load_sweep

REPO = Path(__file__).resolve().parents[3]

pytestmark = [
    pytest.mark.aot,
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("libtpu") is None, reason="needs the [tpu-aot] extra (libtpu): nox -s aot"
    ),
]


@pytest.mark.parametrize("manifest", ["search-v6e.toml", "search-v7x.toml"])
def test_a_small_budget_search_predicts_every_candidate_and_writes_winners(manifest: str, tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "search",
        f"experiments/{manifest}",
        "--budget",
        "2",
        "--reports",
        str(tmp_path),
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=3000)
    print(done.stdout)
    # Exit 0: a layout fits. Both manifests' seeds (the layouts the search starts from) are ones a full
    # search found to fit (the manifests' search-1 variants), so "none fits" (exit 1) is a failure here.
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    folder = tmp_path / manifest.removesuffix(".toml")
    summary = json.loads((folder / "search.json").read_text())
    declared = load_sweep(REPO / "experiments" / manifest).manifest.variants
    assert summary["evaluations"] == 2 and len(summary["references"]) == len(declared)  # hand-written + found
    assert all(r["step_s"] and r["step_s"] > 0 for r in [*summary["rows"], *summary["references"]])
    assert all(r["depth"] == 48 for r in summary["rows"])
    fitting = [r for r in summary["rows"] if r["status"] == "ok" and r["step_s"] is not None]  # ok: fits
    assert fitting and all(r["fits"] is not False for r in fitting)
    winners = load_sweep(folder / "winners.toml").variants  # the winners are runnable variants
    assert [v.name for v in winners] == [f"search-{i}" for i in range(1, len(fitting[:3]) + 1)]
    assert winners[0].target.mesh_shape == fitting[0]["mesh"]
