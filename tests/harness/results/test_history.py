"""harness.results.changepoint, harness.results.history and `harness history` on a recorded history:
24 real measured runs of two nightly variants (tests/harness/fixtures/history/, see make_history.py),
``context`` slowed 1.5x from run 12 on, ``trillium`` as measured."""

from __future__ import annotations

import importlib.util
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness import cli
from harness.commands import history as history_command
from harness.results import changepoint, history

FIXTURES = Path(__file__).parents[1] / "fixtures"
MANIFEST = FIXTURES / "history_nightly.toml"
_maker = importlib.util.spec_from_file_location("make_history", FIXTURES / "make_history.py")
make_history = importlib.util.module_from_spec(_maker)
_maker.loader.exec_module(make_history)
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
    assert c.index == 20 and c.p_value == pytest.approx(1 / 200)
    two = np.concatenate([shifted, rng.normal(-0.3, 0.05, 15)])
    assert sorted(c.index for c in changepoint.e_divisive(two)) == [20, 35]
    assert changepoint.e_divisive(rng.normal(0, 0.05, 40)) == []  # seeded: the same draws every run
    assert changepoint.e_divisive([1.0] * 5) == [] and changepoint.too_short(5) and not changepoint.too_short(6)
    with pytest.raises(ValueError, match="finite"):
        changepoint.e_divisive([1.0, float("nan")] * 4)


# --------------------------------------------------------------------------- the recorded history


def test_history_finds_the_injected_change_and_none_in_the_control(folder):
    runs = history.load(folder, "history_nightly")
    assert len(runs) == 24 and [r.commit for r in runs] == [commit(i) for i in range(24)]
    by_key = {s.key: history.analyse(s) for s in history.series(runs)}
    context = by_key["context / denoise_step / time"]
    assert len(context.series.points) == 24 and context.status == history.OK
    (change,) = context.changes
    # found within a run of the shift: run 11's median (321 ms, the loaded machine's worst) is put with
    # the slower side, so the split falls between runs 10 and 11
    assert change.after == change.before + 1 and abs(change.after - SHIFT_AT) <= 1
    assert change.p_value is not None and change.p_value < changepoint.ALPHA
    assert 1.2 < change.ratio < 1.9  # 1.5x injected into runs whose medians drift on a loaded machine
    assert by_key["trillium / denoise_step / time"].changes == ()
    deterministic = [a for a in by_key.values() if not a.series.measured]
    assert deterministic and all(a.changes == () for a in deterministic)  # the same programs every run
    bisect = history.bisect_command(context.series, change, runs, "m.toml")
    assert bisect == (
        f"python -m harness bisect {commit(change.before)} {commit(change.after)} --manifest m.toml "
        "--variant context --stage denoise_step --metric time"
    )


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
    assert f"bisect: python -m harness bisect {commit(SHIFT_AT - 2)} {commit(SHIFT_AT - 1)}" in out
    assert "24 runs, 2 gated series: 1 without a change point" in out and ran == []  # no --bisect
    rows = json.loads(out_json.read_text())
    assert [len(r["changes"]) for r in rows] == [1, 0]
    diffs = list((folder / "diffs").glob("*.json"))
    assert len(diffs) == 1 and json.loads(diffs[0].read_text())[0]["speedup"] < 1  # head slower
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
    yaml = pytest.importorskip("yaml")
    repo = Path(__file__).resolve().parents[3]
    wf = yaml.safe_load((repo / ".github" / "workflows" / "nightly.yml").read_text())
    assert wf["permissions"]["contents"] == "write"  # the push to perf-history
    (keep,) = [s for s in wf["jobs"]["gate"]["steps"] if "harness history" in (s.get("run") or "")]
    assert "steps.gate.outputs.exit_code == '0' || steps.gate.outputs.exit_code == '1'" in keep["if"]
    run = keep["run"]
    assert "git fetch --quiet origin perf-history" in run and "git -C history push origin perf-history" in run
    assert (
        "--append reports/nightly-gate/results.jsonl --bisect" in run and "--manifest experiments/nightly.toml" in run
    )
