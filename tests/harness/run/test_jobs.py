"""Compile-only variants side by side (``sweep --jobs N``): the same records as one at a time,
measured variants alone, the default sized by cores and memory, progress with an ETA."""

from __future__ import annotations

import io
import json
from pathlib import Path

from harness import cli
from harness.expansion import load_sweep
from harness.families import Measured
from harness.results.store import load_records
from harness.run import parallel
from harness.run.launcher import LocalLauncher
from harness.run.measure import load_notes
from harness.run.progress import Eta
from harness.run.runner import SweepOptions, run_sweep

GiB = 2**30
# Four compile-only variants (test presets: no JAX, a static dict each) and one measured one.
MANIFEST = """\
schema_version = 1
[target]
mode = "compile"
devices = 2
[model]
preset = "test:ok"
[workload]
stages = ["denoise_step"]
[run]
repeats = 3
warmup = 0
timeout_s = 120
[[variants]]
name = "a"
overrides = { "test.flops" = 1.0 }
[[variants]]
name = "measured"
overrides = { "target.mode" = "measure", "test.run_s" = 0.001 }
[[variants]]
name = "b"
overrides = { "test.flops" = 2.0 }
[[variants]]
name = "c"
overrides = { "test.flops" = 3.0, "test.memory_bytes" = 1024 }
[[variants]]
name = "d"
overrides = { "test.flops" = 4.0 }
"""
# Differ between any two runs of the same variant: when, how long, where, and the worker's memory.
VOLATILE = ("started_at", "finished_at", "duration_s", "artifacts", "sweep_id", "machine", "git")


def _stable_stage(entry: dict) -> dict:
    """A stage without its timings and the notes the machine's load at the time gave it."""
    loaded = load_notes(Measured.from_dict(entry["measured"]).load if entry.get("measured") else None)
    out = {k: v for k, v in entry.items() if k not in ("phases_s", "measured")}
    out["notes"] = [n for n in entry.get("notes", []) if n not in loaded]
    return out


def _stable(record: dict) -> dict:
    """A record without what differs between two runs of the same variant (times, samples, where, load)."""
    out = {k: v for k, v in record.items() if k not in VOLATILE}
    out["stages"] = {s: _stable_stage(e) for s, e in out["stages"].items()}
    return out


def _sweep(tmp_path: Path, sweep_id: str, jobs: int) -> tuple[list[dict], str, list[str]]:
    path = tmp_path / "jobs.toml"
    path.write_text(MANIFEST)
    out = io.StringIO()
    options = SweepOptions(reports_dir=tmp_path / "reports", sweep_id=sweep_id, jobs=jobs)
    result = run_sweep(load_sweep(path), options, stream=out, launcher=LocalLauncher(kill_grace_s=1.0))
    stable = [_stable(r.to_dict()) for r in result.records]
    appended = [r.variant.name for r in load_records(tmp_path / "reports" / sweep_id / "results.jsonl")]
    return stable, out.getvalue(), appended


def test_three_jobs_give_the_records_of_one(tmp_path: Path) -> None:
    one, _, _ = _sweep(tmp_path, "one", jobs=1)
    three, text, appended = _sweep(tmp_path, "three", jobs=3)
    assert [r["variant"]["name"] for r in three] == ["a", "measured", "b", "c", "d"]  # manifest order
    assert json.dumps(three, sort_keys=True) == json.dumps(one, sort_keys=True)
    assert {r["variant"]["name"]: r["target"]["mode_used"] for r in three}["measured"] == "measure"
    assert all(r["status"] == "ok" for r in three)
    assert appended[-1] == "measured" and sorted(appended) == ["a", "b", "c", "d", "measured"]  # alone, last
    assert text.count(" started (") == 4 and "running" in text and "4/5 done" in text, text


def test_a_rerun_shows_an_eta_from_the_last_durations(tmp_path: Path) -> None:
    _sweep(tmp_path, "eta", jobs=2)
    path = tmp_path / "jobs.toml"
    out = io.StringIO()
    options = SweepOptions(reports_dir=tmp_path / "reports", sweep_id="eta", jobs=2, rerun=True)
    run_sweep(load_sweep(path), options, stream=out, launcher=LocalLauncher(kill_grace_s=1.0))
    finished = [line for line in out.getvalue().splitlines() if " ok in " in line]
    assert len(finished) == 5 and all(", ETA " in line for line in finished[:-1]), out.getvalue()
    assert finished[-1].endswith(("ETA 0 s", "ETA 0 s)")), finished[-1]


def test_default_jobs_from_cores_memory_and_the_recorded_peak() -> None:
    assert parallel.default_jobs(21, 2 * GiB, cpus=32, memory=64 * GiB) == 21  # 25 fit in memory, 21 variants
    assert parallel.default_jobs(21, 2 * GiB, cpus=8, memory=64 * GiB) == 8  # one per core
    assert parallel.default_jobs(21, None, cpus=32, memory=24 * GiB) == 3  # 6 GiB each, 1.25x headroom
    assert parallel.default_jobs(21, 30 * GiB, cpus=32, memory=24 * GiB) == 1  # at least one
    assert parallel.default_jobs(21, None, cpus=4, memory=None) == 4


def test_eta_splits_compile_only_work_over_the_jobs() -> None:
    eta = Eta({"a": 60.0, "b": 60.0, "m": 30.0}, frozenset({"a", "b", "c"}), jobs=2, left={"a", "b", "c", "m"})
    assert eta.seconds(now=0.0) == (60 + 60 + 50) / 2 + 30  # c: unknown, counted as the mean of the known (50)
    eta.started["a"] = 0.0
    assert eta.seconds(now=45.0) == (15 + 60 + 50) / 2 + 30  # a: 45 s of its 60 gone


def test_jobs_must_be_a_positive_number(tmp_path: Path, capsys) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text(MANIFEST)
    try:
        cli.main(["sweep", str(path), "--jobs", "0"])
    except SystemExit as e:
        assert e.code == 2
    assert "--jobs takes a whole number >= 1, got '0'" in capsys.readouterr().err
