"""harness.results.changepoint, harness.results.history and `harness history` on a recorded history:
24 real measured runs of two nightly variants (tests/harness/fixtures/history/, see make_history.py),
``context`` slowed 1.5x from run 12 on, ``trillium`` as measured."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from harness import cli
from harness.commands import history as history_command
from harness.results import changepoint, history
from tests.harness.fixtures import make_history

FIXTURES = Path(__file__).parents[1] / "fixtures"
MANIFEST = FIXTURES / "history_nightly.toml"
SHIFT_AT = make_history.SHIFT_AT


def commit(i: int) -> str:
    return f"{i:02x}" * 20


@pytest.fixture
def folder(tmp_path) -> Path:
    """A copy of the recorded history (the command writes diffs, bisects and the page into it)."""
    shutil.copytree(FIXTURES / "history", tmp_path / "history")
    return tmp_path / "history"


# --------------------------------------------------------------------------- E-divisive


def test_the_energy_score_matches_its_definition():
    x = np.random.default_rng(0).normal(0, 1, 12)
    q = changepoint._scores(x, 3)

    def by_hand(t: int) -> float:
        a, b = x[:t], x[t:]
        cross = np.mean(np.abs(a[:, None] - b[None, :]))
        wa = np.mean([abs(u - v) for u, v in itertools.combinations(a, 2)])
        wb = np.mean([abs(u - v) for u, v in itertools.combinations(b, 2)])
        return len(a) * len(b) / len(x) * (2 * cross - wa - wb)

    np.testing.assert_allclose([q[t] for t in range(3, 10)], [by_hand(t) for t in range(3, 10)], rtol=1e-12)
    assert q[2] == -np.inf and q[10] == -np.inf  # sides under min_size


def test_a_shift_is_found_where_it_is_and_noise_is_not():
    rng = np.random.default_rng(1)
    shifted = np.concatenate([rng.normal(0, 0.05, 20), rng.normal(0.3, 0.05, 15)])
    (c,) = changepoint.e_divisive(shifted)
    assert c.index == 20 and c.p_value < 1e-12 and c.magnitude == pytest.approx(np.exp(0.3) - 1, abs=0.05)
    two = np.concatenate([shifted, rng.normal(-0.3, 0.05, 15)])
    assert [c.index for c in changepoint.e_divisive(two)] == [20, 35]
    assert changepoint.e_divisive(rng.normal(0, 0.05, 40)) == []  # seeded: the same draws every run
    assert changepoint.e_divisive([1.0] * 5) == [] and changepoint.too_short(5) and not changepoint.too_short(6)
    with pytest.raises(ValueError, match="finite"):
        changepoint.e_divisive([1.0, float("nan")] * 4)


def test_a_significant_move_under_the_minimum_magnitude_is_not_reported():
    rng = np.random.default_rng(2)
    small = np.concatenate([rng.normal(0, 0.01, 20), rng.normal(np.log(1.12), 0.01, 20)])  # 12 %: p ~ 1e-30
    assert changepoint.e_divisive(small) == []  # under MIN_MAGNITUDE (25 %)
    (c,) = changepoint.e_divisive(small, min_magnitude=0.05)
    assert c.index == 20 and c.magnitude == pytest.approx(0.12, abs=0.01)
    # one slow run is not a change, however slow: a side needs MIN_SIZE runs and its median moves
    outlier = rng.normal(0, 0.02, 30)
    outlier[15] += np.log(4.0)
    assert changepoint.e_divisive(outlier) == []


def test_the_t_test_is_students():
    a, b = np.array([0.0, 0.1, 0.2, 0.15]), np.array([0.3, 0.45, 0.5])
    pooled = ((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2)
    t = (b.mean() - a.mean()) / np.sqrt(pooled * (1 / a.size + 1 / b.size))
    from scipy import stats as sps

    assert changepoint.t_test(a, b) == pytest.approx(2 * sps.t.sf(abs(t), a.size + b.size - 2), rel=1e-12)
    assert changepoint.t_test(np.zeros(3), np.ones(3)) == 0.0 and changepoint.t_test(np.ones(3), np.ones(4)) == 1.0


# --------------------------------------------------------------------------- the recorded history


def test_history_finds_the_injected_change_and_none_in_the_control(folder):
    runs = history.load(folder, "history_nightly")
    assert len(runs) == 24 and [r.commit for r in runs] == [commit(i) for i in range(24)]
    by_key = {s.key: history.analyse(s) for s in history.series(runs)}
    context = by_key["context / denoise_step / time"]
    assert len(context.series.points) == 24 and context.status == history.OK
    (change,) = context.changes
    # found where it is: run 11's median (321 ms, the loaded machine's worst) does not move its fastest
    # call (60 ms), which is what the change points are found in
    assert change.after == change.before + 1 == SHIFT_AT
    assert change.p_value is not None and change.p_value < changepoint.ALPHA
    assert 1.35 < change.ratio < 1.65  # 1.5x injected into runs whose fastest calls drift by up to 10 % here
    assert by_key["trillium / denoise_step / time"].changes == ()
    deterministic = [a for a in by_key.values() if not a.series.measured]
    assert deterministic and all(a.changes == () for a in deterministic)  # the same programs every run
    bisect = history.bisect_command(context.series, change, runs, "m.toml")
    assert bisect == (
        f"python -m harness bisect {commit(change.before)} {commit(change.after)} --manifest m.toml "
        "--variant context --stage denoise_step --metric time"
    )


def test_night_by_night_the_recorded_history_alarms_only_at_the_shift(folder):
    """Every night as the nightly analyses it (each prefix of 6 runs or more): the A/A control never
    reports a change point (its fastest call moves by 15 % at run 20, a machine move under the floor),
    the shifted series reports exactly the shift from the first night that has 3 runs after it."""
    runs = history.load(folder, "history_nightly")
    by_key = {s.key: s for s in history.series(runs)}
    nights = range(2 * changepoint.MIN_SIZE, len(runs) + 1)
    control, shifted = by_key["trillium / denoise_step / time"], by_key["context / denoise_step / time"]
    assert [t for t in nights if history.analyse(replace(control, points=control.points[:t])).changes] == []
    found = {t: [c.after for c in history.analyse(replace(shifted, points=shifted.points[:t])).changes] for t in nights}
    assert all(found[t] == [] for t in nights if t < SHIFT_AT + changepoint.MIN_SIZE)
    assert all(found[t] == [SHIFT_AT] for t in nights if t >= SHIFT_AT + changepoint.MIN_SIZE)


def test_too_little_data_is_said(folder):
    runs = history.load(folder, "history_nightly")[:5]
    (a,) = [history.analyse(s) for s in history.series(runs) if s.key == "context / denoise_step / time"]
    assert a.status == history.TOO_LITTLE and a.changes == () and a.note.startswith("5 run(s); a change point needs 6")


def test_cli_prints_the_bisect_writes_the_diff_and_the_page(folder, tmp_path, capsys, monkeypatch):
    ran: list[str] = []

    def fake_bisect(where: Path, command: str, name: str) -> int:  # a real bisect builds worktrees per commit
        ran.append(command)
        (where / "bisect").mkdir(exist_ok=True)
        (where / "bisect" / f"{name}.json").write_text("{}\n")
        return 0

    monkeypatch.setattr(history_command, "_bisect", fake_bisect)
    out_json = tmp_path / "changes.json"
    args = ["history", str(folder), "--manifest", str(MANIFEST), "--json", str(out_json), "--metric", "*/ time"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "context / denoise_step / time: 1 change point(s) over 24 runs" in out
    assert f"bisect: python -m harness bisect {commit(SHIFT_AT - 1)} {commit(SHIFT_AT)}" in out
    assert "24 runs, 2 gated series: 1 without a change point" in out and ran == []  # no --bisect
    rows = json.loads(out_json.read_text())
    assert [len(r["changes"]) for r in rows] == [1, 0]
    diffs = list((folder / "diffs").glob("*.json"))
    (row,) = json.loads(diffs[0].read_text()) if len(diffs) == 1 else [None]
    # the diff of the two runs around it compares their medians: run 11's (321 ms) was the loaded
    # machine's worst, so one run against one reads "faster" (2.2x) where the history sees 1.5x slower
    assert row["stage"] == "denoise_step" and row["base"] == row["head"] == "context" and row["speedup"] > 1.5
    assert cli.main([*args, "--bisect", "--recent", "20"]) == 0 and len(ran) == 1
    assert ran[0].endswith("--variant context --stage denoise_step --metric time")
    page = (folder / "history_nightly.html").read_text()
    assert 'href="bisect/' in page and 'href="diffs/' in page and "not run yet" not in page
    assert cli.main([*args, "--bisect", "--recent", "20"]) == 0 and len(ran) == 1  # kept: not run again


def test_cli_appends_a_run_and_refuses_it_twice(folder, capsys):
    newest = sorted((folder / "history_nightly").glob("*.jsonl"))[-1]
    rows = [json.loads(line) for line in newest.read_text().splitlines()]
    for r in rows:
        r["started_at"] = "2026-12-01T03:17:00.000+00:00"
        r["git"]["commit"] = "f" * 40
    results = folder.parent / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    base = ["history", str(folder), "--manifest", str(MANIFEST), "--append", str(results)]
    assert cli.main(base) == 0
    assert (
        "appended" in capsys.readouterr().out
        and (folder / "history_nightly" / "20261201T031700Z-ffffffffffff.jsonl").exists()
    )
    assert cli.main(base) == 2 and "already in the history" in capsys.readouterr().err
    assert cli.main(["history", str(folder / "nowhere"), "--manifest", str(MANIFEST)]) == 2


def test_nightly_workflow_keeps_the_history_and_bisects_change_points():
    """After both gates, each gate's compared run is appended and the branch pushed, also when a bisect
    the history ran could not name a commit (its exit comes after the push); the artifact holds the
    trend pages with what they link to, not the compile caches."""
    yaml = pytest.importorskip("yaml")
    repo = Path(__file__).resolve().parents[3]
    wf = yaml.safe_load((repo / ".github" / "workflows" / "nightly.yml").read_text())
    assert wf["permissions"]["contents"] == "write"  # the push to perf-history
    steps = wf["jobs"]["gate"]["steps"]
    (keep,) = [s for s in steps if "harness history" in (s.get("run") or "")]
    order = [s.get("id") for s in steps]
    assert order.index("gate") < order.index("gate_tpu") < steps.index(keep)
    assert "steps.gate.outputs.exit_code == '0' || steps.gate.outputs.exit_code == '1'" in keep["if"]
    assert "steps.gate_tpu.outputs.exit_code == '3'" in keep["if"]
    run = keep["run"]
    assert "git fetch --quiet origin perf-history" in run
    assert (
        "--manifest experiments/nightly.toml" in run and "--append reports/nightly-gate/results.jsonl --bisect" in run
    )
    assert "--manifest experiments/nightly-tpu.toml" in run and "--append reports/nightly-tpu-gate/results.jsonl" in run
    assert run.count("|| code=$?") == 2
    assert run.index("git -C history push origin perf-history") < run.index("exit $code")
    (upload,) = [s for s in steps if "upload-artifact" in s.get("uses", "")]
    paths = upload["with"]["path"].split()
    assert {"reports/", "!reports/jax-cache/**", "!reports/aot-cache/**", "history/*.html"} <= set(paths)


@pytest.mark.slow  # 45 runs x 2 series x 6 floors x 4 shifts x 30 places, night by night: ~25 CPU-s
def test_the_documented_change_point_rates_are_what_the_recorded_runs_give(tmp_path):
    """docs/gates.md and benchmarks/results/changepoints-2026-11-29.md quote the held-out table of
    `benchmarks/changepoint_power.py --folds` over the recorded A/A runs: the script prints it again."""
    repo = Path(__file__).resolve().parents[3]
    with tarfile.open(repo / "benchmarks" / "results" / "changepoints-2026-11-29-aa-history.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    out = subprocess.run(
        [sys.executable, str(repo / "benchmarks" / "changepoint_power.py"), str(tmp_path), "aa-nightly", "--folds"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(repo)},
    ).stdout
    pooled = out[out.index("held-out folds pooled (2 series):") :]
    assert out.count("chosen on the other series: min_magnitude 0.25") == 2
    assert "A/A: nights reporting a change point 0 (0%); series with any: 0" in pooled
    for row in (
        "| 5% | 60 | 2 (3%) | 0 (0%) | 2 | 3 |",
        "| 10% | 60 | 4 (7%) | 0 (0%) | 2 | 4 |",
        "| 20% | 60 | 27 (45%) | 5 (8%) | 3 | 10 |",
        "| 50% | 60 | 60 (100%) | 4 (7%) | 3 | 5 |",
    ):
        assert row in pooled, pooled
