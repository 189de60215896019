"""``python -m harness search`` end to end on the ``small`` transformer, compile-only on 8 simulated CPU
devices, over a space whose answer is known: the ``context`` strategy with its tokens split over
context x fsdp (4 ways) or whole on every device (4x the compute per device, nothing saved in
collectives). The split one wins; a re-run compiles nothing; the winner's rules give the replicated
numbers (the parity bar of every strategy, tests/ltx2/test_strategies.py).

Slow: two compiles of the small step plus the CPU calibration, ~30 s on 2 cores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.expansion import load_sweep
from harness.model import rules_of
from ltx2 import sharding
from tests.ltx2.test_strategies import _check_step

REPO = Path(__file__).resolve().parents[3]
MANIFEST = """\
schema_version = 1
[target]
platform = "cpu"
mode = "compile"
devices = 8
mesh = { fsdp = 2, context = 2, tensor = 2 }
[model]
preset = "small"
[workload]
height = 256
width = 256
num_frames = 65
batch = 2
steps = 8
text_tokens = 128
stages = ["denoise_step"]
[run]
metrics = ["static"]
[search]
base = "context"
meshes = [{ fsdp = 2, context = 2, tensor = 2 }]
[search.rules]
activation_length = [[], ["context", "fsdp"]]
"""

pytestmark = pytest.mark.slow


def _search(manifest: Path, reports: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "harness", "search", str(manifest), "--budget", "4", "--reports", str(reports)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("search")
    manifest = tmp / "space.toml"
    manifest.write_text(MANIFEST)
    done = _search(manifest, tmp / "reports")
    assert done.returncode == 0, done.stderr[-3000:]
    return manifest, tmp / "reports", done


def test_the_sequence_split_wins(searched: tuple[Path, Path, subprocess.CompletedProcess[str]]) -> None:
    _, reports, done = searched
    summary = json.loads((reports / "space" / "search.json").read_text())
    assert summary["evaluations"] == 2 and summary["declared"] == 2
    first, second = summary["rows"]
    print(done.stdout)
    assert first["rules"] == {"activation_length": ["context", "fsdp"]} and second["rules"] == {"activation_length": []}
    assert first["step_s"] < second["step_s"]
    assert "2 evaluated (2 compiled now" in done.stdout


def test_a_rerun_compiles_nothing(searched: tuple[Path, Path, subprocess.CompletedProcess[str]]) -> None:
    manifest, reports, _ = searched
    lines = (reports / "space" / "results.jsonl").read_text().count("\n")
    again = _search(manifest, reports)
    assert again.returncode == 0 and "(0 compiled now" in again.stdout
    assert (reports / "space" / "results.jsonl").read_text().count("\n") == lines


def test_the_winners_rules_keep_the_replicated_numbers(
    searched: tuple[Path, Path, subprocess.CompletedProcess[str]],
) -> None:
    _, reports, _ = searched
    winner = load_sweep(reports / "space" / "winners.toml").variants[0]
    rules = rules_of(winner.config_overrides)
    assert rules == {"activation_length": ["context", "fsdp"]}
    strategy = sharding.register_overrides(winner.config_overrides["transformer.sharding"], rules)
    _check_step("small", strategy.name, sharding.build_mesh(winner.target.mesh_shape))
