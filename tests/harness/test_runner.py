"""Isolated variant runs: crash isolation, timeouts, resume, the CLI, and the worker on the tiny model."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from harness import cli
from harness.manifest import load_manifest
from harness.records import load_records
from harness.runner import DEVICE_COUNT_FLAG, SweepOptions, run_sweep, variant_env
from harness.worker import run_spec

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


def _sweep(path: Path, reports: Path, **kw: object) -> tuple[list[dict], str]:
    out = io.StringIO()
    result = run_sweep(load_manifest(path), SweepOptions(reports_dir=reports, kill_grace_s=1.0, **kw), stream=out)
    return result.records, out.getvalue()


def test_crashes_and_timeouts_become_failed_records_and_the_sweep_goes_on(tmp_path: Path) -> None:
    written, log = _sweep(_manifest(tmp_path), tmp_path / "reports")
    by_name = {r["variant"]["name"]: r for r in written}
    assert {n: r["status"] for n, r in by_name.items()} == {
        "first": "ok", "raises": "failed", "killed": "crashed", "hangs": "timeout", "last": "ok"}
    assert "RuntimeError: test workload raised on purpose" in by_name["raises"]["error"]
    assert by_name["raises"]["stages"]["denoise_step"]["status"] == "failed"
    assert by_name["killed"]["error"].startswith("worker killed by signal SIGKILL")
    assert by_name["hangs"]["error"].startswith("timed out after 1.5 s in denoise_step:warmup")
    for name in ("first", "last"):
        measured = by_name[name]["stages"]["denoise_step"]["measured"]
        assert len(measured["samples_s"]) == 3 and len(measured["warmup_s"]) == 1
        assert measured["wall_s"]["n"] == 3 and measured["recompiles"]["count"] == 0
    # everything is on disk, one line per variant, in order
    on_disk = load_records(tmp_path / "reports" / "iso" / "results.jsonl")
    assert [r["variant"]["name"] for r in on_disk] == ["first", "raises", "killed", "hangs", "last"]
    assert "[5/5] last" in log and "timeout" in log and "variant" in log.splitlines()[-9]


def test_record_is_self_describing(tmp_path: Path) -> None:
    text = ISOLATION.split("[[variants]]")[0]
    (record,), _ = _sweep(_manifest(tmp_path, text), tmp_path / "reports")
    assert record["record_version"] == 1 and record["sweep_id"] == "iso"
    assert record["manifest"]["path"].endswith("iso.toml") and len(record["manifest"]["sha256"]) == 64
    assert record["variant"]["name"] == "base" and len(record["variant"]["id"]) == 12
    assert record["config"]["preset"] == "test:ok" and record["config"]["run"]["repeats"] == 3
    assert record["target"] == {"platform": "cpu", "mode": "auto", "mode_used": "measure", "mesh": {"data": 2},
                                "topology": None, "devices": 2}
    assert record["machine"]["hostname"] and record["versions"]["jax"]
    assert set(record["git"]) == {"commit", "dirty"}
    assert record["started_at"] < record["finished_at"] and record["duration_s"] > 0
    assert Path(record["artifacts"]["log"]).exists()
    stage = record["stages"]["denoise_step"]
    assert set(stage) >= {"status", "error", "notes", "static", "measured", "trace", "phases_s"}


def test_resume_skips_finished_variants_unless_rerun(tmp_path: Path) -> None:
    text = ISOLATION.split('[[variants]]\nname = "killed"')[0]
    text += '[[variants]]\nname = "z"\noverrides = { "test.z" = 1 }\n'
    path, reports = _manifest(tmp_path, text), tmp_path / "reports"
    first, _ = _sweep(path, reports)
    assert [r["status"] for r in first] == ["ok", "failed", "ok"]
    again, log = _sweep(path, reports)
    assert [r["variant"]["name"] for r in again] == ["raises"]  # only the failed one runs again
    assert "[1/3] first" in log and "skipped: ok record exists" in log
    forced, _ = _sweep(path, reports, rerun=True)
    assert len(forced) == 3
    only, _ = _sweep(path, reports, rerun=True, only=("z",))
    assert [r["variant"]["name"] for r in only] == ["z"]
    assert len(load_records(reports / "iso" / "results.jsonl")) == 3 + 1 + 3 + 1


def test_variant_env_sets_devices_and_platform(tmp_path: Path) -> None:
    text = ISOLATION.split("[[variants]]")[0].replace("devices = 2", "devices = 4\nmesh = { data = 2, tensor = 2 }")
    (variant,) = load_manifest(_manifest(tmp_path, text)).expand()
    env = variant_env(variant, {"XLA_FLAGS": f"--xla_foo {DEVICE_COUNT_FLAG}=8", "PYTHONPATH": "/x"})
    assert env["XLA_FLAGS"] == f"--xla_foo {DEVICE_COUNT_FLAG}=4"
    assert env["JAX_PLATFORMS"] == "cpu" and env["PYTHONPATH"].endswith(":/x")


def test_cli_list_inspect_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _manifest(tmp_path)
    assert cli.main(["sweep", str(path), "--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in listed] == ["first", "raises", "killed", "hangs", "last"]
    assert cli.main(["inspect", str(path), "--variant", "last", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["variant"]["name"] == "last" and shown["stages"]["denoise_step"]["static"]["platform"] == "test"
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


def test_a_report_that_cannot_be_written_warns_and_keeps_the_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import harness.report

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(harness.report, "write_report", broken)
    path = _manifest(tmp_path, ISOLATION[: ISOLATION.index('[[variants]]\nname = "raises"')])  # `first` only
    reports = tmp_path / "reports"
    assert cli.main(["sweep", str(path), "--reports", str(reports), "--sweep-id", "s"]) == 0
    err = capsys.readouterr().err
    assert "warning: could not write the report (OSError: disk full)" in err
    assert f"retry with: python -m harness report {reports / 's' / 'results.jsonl'}" in err
    assert len((reports / "s" / "results.jsonl").read_text().splitlines()) == 1


def test_worker_runs_the_tiny_transformer_in_process(tmp_path: Path) -> None:
    """The real stage path: static (collectives), measured (no recompiles), trace; a pipeline stage beside it."""
    spec = {
        "variant": {"name": "t", "id": "t"},
        "preset": "tiny",
        "config_overrides": {"transformer.sharding": "context"},
        "target": {"platform": "cpu", "mode": "measure", "mesh": {"fsdp": 2, "context": 2, "tensor": 2},
                   "topology": None, "devices": 8},
        "workload": {"height": 64, "width": 64, "num_frames": 65, "frame_rate": 24.0, "batch": 2, "steps": 2,
                     "text_tokens": 16, "stages": ["denoise_step", "video_decode"]},
        "run": {"repeats": 2, "warmup": 1, "timeout_s": 60, "trace": True, "metrics": ["static", "measured", "trace"]},
        "trace_dir": str(tmp_path / "traces"),
        "status_path": str(tmp_path / "status.json"),
    }
    assert run_spec(spec, tmp_path / "out.json") == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["mode_used"] == "measure" and out["machine"]["device_count"] == 8
    assert out["config_resolved"]["transformer"]["sharding"] == "context"
    step = out["stages"]["denoise_step"]
    assert step["status"] == "ok", step["error"]
    static = step["static"]
    assert static["tokens"]["video_tokens"] == 9 * 2 * 2 and static["tokens"]["audio_tokens"] == 68
    assert static["collectives"]["by_kind"]["all-gather"]["count"] > 0
    assert static["analytic_flops"] > 0 and static["memory"]["bound_bytes"] > 0
    measured = step["measured"]
    assert measured["recompiles"]["count"] == 0 and measured["warmup_compiles"]["count"] == 0
    assert measured["transfers"]["host_to_device"] == 0 and len(measured["samples_s"]) == 2
    trace = step["trace"]
    assert len(trace["devices"]) == 8 and Path(trace["xplane"]).exists()
    decode = out["stages"]["video_decode"]
    assert decode["status"] == "ok", decode["error"]
    assert decode["static"]["latent_grid"] == [9, 2, 2] and decode["measured"]["recompiles"]["count"] == 0
    assert out["status"] == "ok"
