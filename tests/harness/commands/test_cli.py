"""The CLI: one module per verb behind a thin dispatcher (test presets: no model, no JAX)."""

from __future__ import annotations

import csv
import json
import tempfile
from pathlib import Path

import pytest

from harness import cli
from harness.report.export import to_csv
from harness.results.record import RECORD_VERSION, Record
from tests.harness.fixtures import synthetic

ISOLATION = """\
schema_version = 1
[target]
devices = 2
[model]
preset = "test:ok"
[workload]
stages = ["denoise_step"]
[run]
repeats = 3
warmup = 1
timeout_s = 1.5
[[variants]]
name = "first"
[[variants]]
name = "raises"
overrides = { "model.preset" = "test:raise" }
[[variants]]
name = "killed"
overrides = { "model.preset" = "test:kill" }
[[variants]]
name = "hangs"
overrides = { "model.preset" = "test:sleep" }
[[variants]]
name = "last"
overrides = { "test.run_s" = 0.002 }
"""


def _manifest(tmp_path: Path, text: str = ISOLATION) -> Path:
    path = tmp_path / "iso.toml"
    path.write_text(text)
    return path


def test_cli_list_inspect_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _manifest(tmp_path)
    assert cli.main(["sweep", str(path), "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in listed] == ["first", "raises", "killed", "hangs", "last"]
    assert cli.main(["inspect", str(path), "--variant", "last", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["variant"]["name"] == "last" and shown["stages"]["denoise_step"]["static"]["platform"] == "test"
    assert shown["record_version"] == RECORD_VERSION and shown["config"]["preset"] == "test:ok"  # as a sweep appends
    assert cli.main(["inspect", str(path), "--variant", "last"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("last (") and "stage denoise_step: ok" in text
    assert max(len(line) for line in text.splitlines()) <= 120
    bad = tmp_path / "bad.toml"
    bad.write_text(ISOLATION.replace("repeats = 3", "repeats = 0"))
    assert cli.main(["sweep", str(bad)]) == 2
    assert f"error: {bad}:9: run.repeats: must be > 0, got 0" in capsys.readouterr().err
    assert cli.main(["sweep", str(path), "--variant", "nope", "--list"]) == 2


def test_cli_sweep_writes_its_report_with_the_failures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = ISOLATION.replace("timeout_s = 1.5", "timeout_s = 5")
    text = text[: text.index('[[variants]]\nname = "killed"')]  # first (ok) and raises (failed)
    path = _manifest(tmp_path, text)
    reports = tmp_path / "reports"
    assert cli.main(["sweep", str(path), "--reports", str(reports), "--sweep-id", "s1"]) == 1  # one failed
    index = reports / "s1" / "index.html"
    assert f"report: {index}" in capsys.readouterr().out
    page = index.read_text()
    assert "first" in page and "raises" in page and "RuntimeError" in page
    rows = list(csv.DictReader((reports / "s1" / "results.csv").read_text().splitlines()))
    assert {(r["variant"], r["status"]) for r in rows} >= {("first", "ok"), ("raises", "failed")}
    assert cli.main(["sweep", str(path), "--reports", str(reports), "--sweep-id", "s2", "--no-report"]) == 1
    assert not (reports / "s2" / "index.html").exists() and (reports / "s2" / "results.jsonl").exists()


def test_a_report_that_cannot_be_written_exits_3_and_keeps_the_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.report

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(harness.report, "write_report", broken)
    path = _manifest(tmp_path, ISOLATION[: ISOLATION.index('[[variants]]\nname = "raises"')])  # `first` only
    reports = tmp_path / "reports"
    assert cli.main(["sweep", str(path), "--reports", str(reports), "--sweep-id", "s"]) == 3
    err = capsys.readouterr().err
    assert f"error: disk full writing the report in {reports / 's'}; then run the same command again" in err
    assert f"; or: python -m harness report {reports / 's' / 'results.jsonl'})" in err
    assert len((reports / "s" / "results.jsonl").read_text().splitlines()) == 1


def test_sweep_and_report_read_past_lines_that_are_no_records(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`{"record_version": 1}` crashed both with a KeyError; a torn last line was warned about forever."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the sweep's worker folders must all go
    first = ISOLATION[: ISOLATION.index('[[variants]]\nname = "raises"')]
    path, reports = _manifest(tmp_path, first), tmp_path / "reports"
    assert cli.main(["sweep", str(path), "--reports", str(reports), "--no-report"]) == 0
    results = reports / "iso" / "results.jsonl"
    with results.open("a") as f:
        f.write('{"record_version": 1}\n{"record_version": 1, "sweep_id": "iso", "variant": {"na')
    path.write_text(first + '[[variants]]\nname = "second"\noverrides = { "test.run_s" = 0.002 }\n')
    capsys.readouterr()
    assert cli.main(["sweep", str(path), "--reports", str(reports)]) == 0  # resumes, runs `second`, reports
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("warning:")] == [
        f"warning: {results}: skipped 2 line(s) that are not records: line 2: not a result record: missing "
        "sweep_id, manifest, variant, config, target, machine, versions, git, started_at, finished_at, duration_s, "
        "status, error, stages; line 3: torn last line (56 bytes)",
        f"warning: {results}:3: torn last line (56 bytes) moved to {results}.torn before appending",
    ]
    assert "Traceback" not in err and "[1/2] first" in err and "skipped: ok record exists" in err
    assert [json.loads(line).get("variant", {}).get("name") for line in results.read_text().splitlines()] == [
        "first",
        None,
        "second",
    ]
    elsewhere = reports / "copy" / "results.jsonl"  # the report verb, in a process that has not read it yet
    elsewhere.parent.mkdir()
    elsewhere.write_bytes(results.read_bytes())
    assert cli.main(["report", str(elsewhere)]) == 0
    out, err = capsys.readouterr()
    assert (
        err == f"warning: {elsewhere}: skipped 1 line(s) that are not records: line 2: not a result record: "
        "missing sweep_id, manifest, variant, config, target, machine, versions, git, started_at, finished_at, "
        "duration_s, status, error, stages\n"
    )
    assert f"wrote {elsewhere.parent / 'index.html'}" in out
    assert list(scratch.iterdir()) == []


def test_a_sweep_id_is_a_folder_name_under_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, reports = _manifest(tmp_path, ISOLATION[: ISOLATION.index("[[variants]]")]), tmp_path / "a" / "reports"
    assert cli.main(["sweep", str(path), "--reports", str(reports), "--sweep-id", "../../x"]) == 2
    assert capsys.readouterr().err.startswith("error: sweep id '../../x' is not a plain folder name")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["iso.toml"]  # nothing written, inside or out


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised() -> None:
    stage = {"status": "failed", "error": "-1 x", "notes": [], "static": None, "measured": None, "trace": None}
    names = ['=HYPERLINK("http://x","y")', "+1", "-2", "@SUM(A1)", "\tx", "plain"]
    records = [Record.from_dict({**synthetic.minimal(name), "stages": {"denoise_step": stage}}) for name in names]
    rows = list(csv.DictReader(to_csv(records).splitlines()))
    assert [r["variant"] for r in rows] == ['\'=HYPERLINK("http://x","y")', "'+1", "'-2", "'@SUM(A1)", "'\tx", "plain"]
    assert all(r["variant_id"] == r["variant"] for r in rows) and {r["stage_status"] for r in rows} == {"failed"}
