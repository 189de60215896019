"""The machine's load in the record: the counters, the wait for a quiet machine, run.max_load's parsing,
and the marks the gate and the report put on samples taken under load."""

from __future__ import annotations

import json
import os

import pytest

from harness import cli
from harness.families import Load, QuietWait
from harness.plan.manifest import Gate
from harness.report.html import comparison_section
from harness.results import gate
from harness.results.compare import compare_records
from harness.run import load
from harness.run.measure import load_notes, measure
from harness.testing import TestStage
from tests.harness.fixtures import synthetic
from tests.harness.plan.bad_manifest_corpus import VALID

STEP = ("trillium-loop", "denoise_step")


def test_busy_cpu_seconds_from_proc_stat(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 20 30 5000 70 4 6 10 0 0\ncpu0 1 2 3 4\n")
    assert load._busy_cpu_s(stat) == pytest.approx((100 + 20 + 30 + 4 + 6 + 10) / os.sysconf("SC_CLK_TCK"))
    assert load._busy_cpu_s(tmp_path / "missing") is None


def test_measure_records_the_load_of_its_timed_region():
    m = measure(TestStage("s", "test:ok", {"test.run_s": 0.001}), 1, 3, lambda *_: None)
    got = m.load
    assert got is not None and got.cores == os.cpu_count() and len(got.loadavg_1m) == 2 and got.quiet_wait is None
    assert got.wall_s > 0 and got.loaded_above_cores == load.LOADED_SHARE * got.cores
    assert got.loaded == load.loaded(got.others_busy_cores, got.cores)
    assert m.to_dict()["load"] == got.to_dict() and got.to_dict()["quiet_wait"] is None  # as the record holds it
    if got.others_busy_cores is not None:  # Linux
        assert got.others_busy_cores >= 0 and got.others_cpu_s >= 0


def test_loaded_threshold_and_notes():
    assert load.loaded(0.5, 2) and not load.loaded(0.49, 2) and not load.loaded(None, 2)
    notes = load_notes(Load(loaded=True, others_busy_cores=1.5, cores=2, loadavg_1m=[3.0, 3.5]))
    assert notes == ["timed under load: other processes kept 1.50 of 2 cores busy (load average 3.50)"]
    waited = Load(loaded=False, quiet_wait=QuietWait(waited_s=12.0, max_load=0.5))
    assert load_notes(waited) == ["waited 12 s for a quiet machine (run.max_load = 0.5)"] and load_notes(None) == []


def test_wait_for_quiet_waits_then_goes_on(monkeypatch):
    readings = iter([1.8, 1.2, 0.3])
    monkeypatch.setattr(load, "others_busy_now", lambda interval_s: next(readings))
    said = []
    got = load.wait_for_quiet(0.5, 60.0, said.append, poll_s=0.0)
    assert got.others_busy_cores == 0.3 and got.max_load == 0.5 and len(said) == 2


def test_wait_for_quiet_refuses_after_its_bounded_wait(monkeypatch):
    monkeypatch.setattr(load, "others_busy_now", lambda interval_s: 1.9)
    with pytest.raises(load.MachineBusy, match=r"kept 1.90 cores busy, above run.max_load = 0.5.*wait of 0 s"):
        load.wait_for_quiet(0.5, 0.0, poll_s=0.0)


def _edited(line: int, new: bytes) -> bytes:
    lines = VALID["cpu"].split(b"\n")
    lines[line - 1] = new
    return b"\n".join(lines)


@pytest.mark.parametrize(
    ("line", "text", "key", "reason"),
    [
        (23, b"max_load = -1.0", "run.max_load", "must be > 0"),
        (23, b"max_load = 0", "run.max_load", "must be > 0"),
        (23, b'max_load = "low"', "run.max_load", "expected a number"),
        (23, b"max_load = nan", "run.max_load", "not a finite number"),
        (23, b"max_load_wait_s = -5", "run.max_load_wait_s", "must be >= 0"),
        (24, b'metrics = ["static"]\nmax_load = 1.0', "run.max_load", "needs 'measured' in run.metrics"),
    ],
)
def test_bad_max_load_is_a_located_error(tmp_path, capsys, line, text, key, reason):
    path = tmp_path / "m.toml"
    path.write_bytes(_edited(line, text))
    assert cli.main(["sweep", str(path), "--list"]) == 2
    err = capsys.readouterr().err
    where = line + text.count(b"\n")
    assert err.startswith(f"error: {path}:{where}: {key}: ") and reason in err


def test_max_load_parses(tmp_path):
    from harness.plan.manifest import load_manifest

    path = tmp_path / "m.toml"
    path.write_bytes(_edited(23, b"max_load = 0.5\nmax_load_wait_s = 30"))
    run = load_manifest(path).run
    assert (run.max_load, run.max_load_wait_s) == (0.5, 30.0)


def _under_load(records: list[dict]) -> list[dict]:
    for r in records:
        for entry in r["stages"].values():
            if (entry.get("measured") or {}).get("samples_s"):
                entry["measured"]["load"] = {"loaded": True, "others_busy_cores": 1.4, "cores": 2}
    return records


def test_gate_and_report_mark_samples_taken_under_load():
    template = synthetic.ok_template()
    base = synthetic.records(synthetic.synthetic_run(1, template))
    head = synthetic.records(_under_load(synthetic.synthetic_run(2, template, slowdown={STEP: 1.3})))
    result = gate.evaluate(base, head, Gate())
    assert result.exit_code == gate.REGRESSION
    failed = [c for c in result.failures if (c.variant, c.stage) == STEP]
    assert failed and failed[0].under_load == "now" and "samples taken under load (now)" in failed[0].detail
    assert any(n.startswith("trillium-loop denoise_step time: samples taken under load (now)") for n in result.notes)
    html = comparison_section(compare_records(base, head), Gate(), "b")
    assert "trillium-loop denoise_step: timing samples taken under load (now)" in html
    quiet = gate.evaluate(base, base, Gate())
    assert not any("under load" in n for n in quiet.notes)


def test_a_sweep_records_load_per_stage(tmp_path):
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        'schema_version = 1\n[target]\ndevices = 1\n[model]\npreset = "test:ok"\n[workload]\n'
        'stages = ["denoise_step"]\n[run]\nrepeats = 3\nwarmup = 0\ntimeout_s = 60\nmax_load = 64\n'
        "max_load_wait_s = 0\n"
    )
    assert cli.main(["sweep", str(manifest), "--reports", str(tmp_path), "--sweep-id", "s", "--no-report"]) == 0
    record = json.loads((tmp_path / "s" / "results.jsonl").read_text().splitlines()[-1])
    got = record["stages"]["denoise_step"]["measured"]["load"]
    assert got["quiet_wait"]["max_load"] == 64.0 and got["cores"] == os.cpu_count()
    assert record["config"]["run"]["max_load"] == 64.0
