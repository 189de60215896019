"""Isolated variant runs: crash isolation, timeouts, resume, the worker's environment (test presets: no JAX)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from harness.expansion import load_sweep
from harness.results.record import RECORD_VERSION
from harness.results.store import load_records
from harness.run.launcher import DEVICE_COUNT_FLAG, LocalLauncher, worker_command, worker_env
from harness.run.runner import SweepOptions, run_sweep, worker_spec

REPO = Path(__file__).parents[3]

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
    result = run_sweep(
        load_sweep(path), SweepOptions(reports_dir=reports, **kw), stream=out, launcher=LocalLauncher(kill_grace_s=1.0)
    )
    return [r.to_dict() for r in result.records], out.getvalue()  # the records' JSON form


def test_crashes_and_timeouts_become_failed_records_and_the_sweep_goes_on(tmp_path: Path) -> None:
    written, log = _sweep(_manifest(tmp_path), tmp_path / "reports")
    by_name = {r["variant"]["name"]: r for r in written}
    assert {n: r["status"] for n, r in by_name.items()} == {
        "first": "ok",
        "raises": "failed",
        "killed": "crashed",
        "hangs": "timeout",
        "last": "ok",
    }
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
    assert [r.to_dict() for r in on_disk] == written
    assert "[5/5] last" in log and "timeout" in log and "variant" in log.splitlines()[-9]


def test_record_is_self_describing(tmp_path: Path) -> None:
    text = ISOLATION.split("[[variants]]")[0]
    (record,), _ = _sweep(_manifest(tmp_path, text), tmp_path / "reports")
    assert record["record_version"] == RECORD_VERSION and record["sweep_id"] == "iso"
    assert record["manifest"]["path"].endswith("iso.toml") and len(record["manifest"]["sha256"]) == 64
    assert record["variant"]["name"] == "base" and len(record["variant"]["id"]) == 12
    assert record["config"]["preset"] == "test:ok" and record["config"]["run"]["repeats"] == 3
    assert record["target"] == {
        "platform": "cpu",
        "mode": "auto",
        "mode_used": "measure",
        "mesh": {"data": 2},
        "topology": None,
        "devices": 2,
        "compiler_options": None,
    }
    assert record["machine"]["hostname"] and record["versions"]["jax"]
    assert set(record["git"]) == {"commit", "dirty"}
    assert record["started_at"] < record["finished_at"] and record["duration_s"] > 0
    assert Path(record["artifacts"]["log"]).exists()
    stage = record["stages"]["denoise_step"]
    assert set(stage) >= {"status", "error", "notes", "static", "measured", "trace", "phases_s", "predicted"}


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


def test_worker_env_sets_devices_and_platform(tmp_path: Path) -> None:
    text = ISOLATION.split("[[variants]]")[0].replace("devices = 2", "devices = 4\nmesh = { data = 2, tensor = 2 }")
    (variant,) = load_sweep(_manifest(tmp_path, text)).variants
    spec = worker_spec(variant, load_sweep(_manifest(tmp_path, text)).manifest.run, tmp_path / "traces")
    env = worker_env(spec, {"XLA_FLAGS": f"--xla_foo {DEVICE_COUNT_FLAG}=8", "PYTHONPATH": "/x"})
    assert env["XLA_FLAGS"] == f"--xla_foo {DEVICE_COUNT_FLAG}=4"
    assert env["JAX_PLATFORMS"] == "cpu" and env["PYTHONPATH"].endswith(":/x")
    # every worker hashes strings alike: code that iterates a set (transformers' Gemma-3 RoPE tables)
    # traces in one order, so a program's compile-cache key is the same in every process
    probe = [sys.executable, "-c", "print(list({'full_attention', 'sliding_attention', *'abcdefgh'}))"]
    orders = {subprocess.run(probe, env=env, capture_output=True, text=True, check=True).stdout for _ in range(3)}
    assert env["PYTHONHASHSEED"] == "0" and len(orders) == 1
    assert worker_env(spec, {"PYTHONHASHSEED": "7"})["PYTHONHASHSEED"] == "7"  # the user's own choice stays


def test_a_tpu_worker_starts_with_the_stack_limit_raised_to_the_hard_one(tmp_path: Path) -> None:
    """libtpu overflows the default 8 MiB stack compiling the 19B tpu7x step; a TPU worker starts
    through harness.run.stack_limit (soft limit raised to the hard one, then exec), other workers
    as they are. Run with the real command line, its worker swapped for a probe."""
    import dataclasses
    import resource

    (variant,) = load_sweep(_manifest(tmp_path, ISOLATION.split("[[variants]]")[0])).variants
    spec = worker_spec(
        variant, load_sweep(_manifest(tmp_path, ISOLATION.split("[[variants]]")[0])).manifest.run, tmp_path / "traces"
    )
    worker = [sys.executable, "-m", "harness.run.worker", "s.json", "o.json"]
    assert worker_command(spec, sys.executable, Path("s.json"), Path("o.json")) == worker
    tpu = dataclasses.replace(spec, target=dataclasses.replace(spec.target, platform="tpu"))
    command = worker_command(tpu, sys.executable, Path("s.json"), Path("o.json"))
    assert command[:3] == [sys.executable, "-m", "harness.run.stack_limit"] and command[3:] == worker
    probe = [*command[:3], sys.executable, "-c", "import resource; print(*resource.getrlimit(resource.RLIMIT_STACK))"]
    soft, hard = subprocess.run(probe, capture_output=True, text=True, check=True, cwd=REPO).stdout.split()
    assert soft == hard == str(resource.getrlimit(resource.RLIMIT_STACK)[1])


def test_a_test_preset_worker_loads_neither_jax_nor_the_model(tmp_path: Path) -> None:
    """The test presets exist to be fast: their worker must not pay for importing JAX."""
    code = """
import sys
from harness.plan.manifest import Run, Target, Workload
from harness.run.spec import WorkerSpec
from harness.run.worker import run_spec
spec = WorkerSpec("t", "t", "test:ok", {}, Target("cpu", "auto", (("data", 1),), None, 1), "measure", Workload(),
                  Run(repeats=2, warmup=1), sys.argv[1])
rc = run_spec(spec, sys.argv[1] + "/out.json")
print(rc, sorted(m for m in ("jax", "ltx2", "flax", "torch") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "[]"]
    assert json.loads((tmp_path / "out.json").read_text())["stages"]["denoise_step"]["measured"]["wall_s"]["n"] == 2


def test_resume_re_runs_variants_whose_samples_came_from_other_run_settings(tmp_path: Path) -> None:
    text = ISOLATION.split('[[variants]]\nname = "raises"')[0]  # `first` only
    path, reports = _manifest(tmp_path, text), tmp_path / "reports"
    assert len(_sweep(path, reports)[0]) == 1
    path.write_text(text.replace("repeats = 3", "repeats = 5").replace("timeout_s = 1.5", "timeout_s = 9"))
    (again,), log = _sweep(path, reports)
    assert "re-running 1 variant: [run] changed (repeats 3 -> 5)\n" in log  # the timeout does not count
    assert len(again["stages"]["denoise_step"]["measured"]["samples_s"]) == 5
    assert _sweep(path, reports)[0] == []  # now current: skipped
    path.write_text(path.read_text().replace("warmup = 1", 'warmup = 0\nmetrics = ["static"]'))
    (_, log) = _sweep(path, reports)
    assert 're-running 1 variant: [run] changed (warmup 1 -> 0, metrics ["static", "measured"] -> ["static"])' in log


def test_a_variant_that_needs_more_memory_than_the_device_has_is_compiled_not_run(tmp_path: Path) -> None:
    text = ISOLATION.split("[[variants]]")[0].replace("test:ok", "test:kill")  # running it would crash the worker
    text += '[[variants]]\nname = "huge"\noverrides = { "test.memory_bytes" = 1152921504606846976 }\n'  # 2^60 B
    text += '[[variants]]\nname = "small"\noverrides = { "test.memory_bytes" = 1024, "model.preset" = "test:ok" }\n'
    (huge, small), log = _sweep(_manifest(tmp_path, text), tmp_path / "reports")
    stage = huge["stages"]["denoise_step"]
    assert huge["status"] == "ok" and stage["status"] == "does-not-fit" and stage["measured"] is None
    assert stage["error"].startswith("does not fit: needs 1.07e+09 GiB per device, the device has ")
    assert "(host MemAvailable / 2 devices); compiled only, not run" in stage["error"]
    assert stage["memory_fit"]["fits"] is False and stage["memory_fit"]["needed_bytes"] == 2**60
    assert stage["static"]["memory"]["bound_bytes"] == 2**60  # what it needs is kept, for reports and the gate
    fit = small["stages"]["denoise_step"]
    assert fit["status"] == "ok" and fit["memory_fit"]["fits"] is True and len(fit["measured"]["samples_s"]) == 3
    row = next(line for line in log.splitlines() if line.startswith("huge "))  # the summary table shows it
    assert "does-not-fit" in row and "1 EiB" in row  # and the memory it needs


def test_worker_logs_hold_what_the_worker_did(tmp_path: Path) -> None:
    text = ISOLATION.split('[[variants]]\nname = "killed"')[0]  # first (ok) and raises (failed)
    written, _ = _sweep(_manifest(tmp_path, text), tmp_path / "reports")
    ok_log, failed_log = (Path(r["artifacts"]["log"]).read_text() for r in written)
    lines = ok_log.splitlines()
    assert lines[0].startswith("[launcher] ") and "-m harness.run.worker" in lines[0]
    assert lines[-1].startswith("[launcher] ") and "worker exited with code 0 after" in lines[-1]
    assert any(line.endswith("denoise_step:measure") for line in lines) and lines[-2].endswith("finished: ok")
    assert "RuntimeError: test workload raised on purpose" in failed_log and "finished: failed" in failed_log
    assert "Traceback (most recent call last)" in failed_log
    assert "[launcher]" not in written[1]["error"]  # the launcher's lines stay out of error tails
