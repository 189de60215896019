"""`sweep --launcher xpk` and `collect`: a fake `xpk` on PATH records each argv and exits as told; the
workers are real `python -m harness run-variant` processes on test presets (no JAX, no cluster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.launcher_xpk import NAME_MAX, NAME_PATTERN, workload_name

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "tests" / "harness" / "fixtures" / "xpk_sweep.toml"
GOLDEN = REPO / "tests" / "harness" / "fixtures" / "xpk_dry_run.txt"
RESULTS = "/shared/results"  # dry run: written into the commands only
FAKE_XPK = """\
#!{python}
import json, os, sys
with open(os.environ["FAKE_XPK_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_XPK_FAIL") and os.environ["FAKE_XPK_FAIL"] in sys.argv:
    print("Workload create failed: quota exceeded (fake)")
    sys.exit(3)
print("[XPK] workload created (fake)")
"""


@pytest.fixture
def xpk(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """(environment with the fake xpk first on PATH, the file it appends its argv to)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "xpk-calls.jsonl"
    bin_dir.mkdir()
    fake = bin_dir / "xpk"
    fake.write_text(FAKE_XPK.format(python=sys.executable))
    fake.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_XPK_LOG": str(log),
        "PYTHONPATH": str(REPO),
    }
    return env, log


def harness(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], env=env, capture_output=True, text=True, cwd=REPO, timeout=120
    )


def submit(env: dict[str, str], results: str | Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return harness(
        env,
        "sweep",
        str(MANIFEST.relative_to(REPO)),
        "--launcher",
        "xpk",
        "--cluster",
        "ltx-cluster",
        "--tpu-type",
        "v6e-16",
        "--docker-image",
        "gcr.io/proj/ltx2-perf:abc123",
        "--results-dir",
        str(results),
        *extra,
    )


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_dry_run_prints_the_exact_commands_and_writes_nothing(xpk: tuple[dict[str, str], Path]) -> None:
    env, log = xpk
    done = submit(env, RESULTS, "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout == GOLDEN.read_text()  # regenerate: the same command > tests/harness/fixtures/xpk_dry_run.txt
    assert calls(log) == [] and not Path(RESULTS).exists()


def test_workload_names_are_dns_labels_within_xpks_limit() -> None:
    for sweep_id in ("x", "multiprocess-cpu", "A_Sweep.With.Dots", "n" * 80, "--", "9starts-with-digit"):
        name = workload_name(sweep_id, "0123456789ab")
        assert NAME_PATTERN.fullmatch(name) and len(name) <= NAME_MAX, name
        assert name.endswith("-0123456789ab")
    assert workload_name("multiprocess-cpu", "0123456789ab") == "h-multiprocess-cpu-0123456789ab"
    assert workload_name("n" * 80, "0123456789ab") == "h-" + "n" * 25 + "-0123456789ab"


def test_submit_collect_and_resume(xpk: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, log = xpk
    results = tmp_path / "results"
    first = submit(env, results)
    assert first.returncode == 0, first.stderr
    argvs = calls(log)
    assert len(argvs) == 2 and all(a[:2] == ["workload", "create"] for a in argvs)
    names = [a[a.index("--workload") + 1] for a in argvs]
    assert len(set(names)) == 2 and all(NAME_PATTERN.fullmatch(n) and len(n) <= NAME_MAX for n in names)
    sweep_dir = results / "xpk_sweep"
    commands = [a[a.index("--command") + 1].split() for a in argvs]
    assert all(c[:4] == ["python", "-m", "harness", "run-variant"] and Path(c[4]).is_file() for c in commands)
    assert "2 submitted" in first.stderr
    # A second sweep submits nothing: both are submitted already.
    again = submit(env, results)
    assert again.returncode == 0 and len(calls(log)) == 2 and again.stderr.count("skipped: submitted") == 2
    # The cluster runs the first variant's two processes (here, one after the other); collect records it.
    spec, out = commands[0][4], commands[0][6]
    for process in ("0", "1"):
        ran = harness(env, "run-variant", spec, "--out", out, "--process", process)
        assert ran.returncode == 0, ran.stderr
    collected = harness(env, "collect", str(sweep_dir), "--no-report")
    assert collected.returncode == 0, collected.stderr
    assert "1 collected, 0 collected before, 1 pending" in collected.stdout
    records = [json.loads(line) for line in (sweep_dir / "results.jsonl").read_text().splitlines()]
    assert [r["status"] for r in records] == ["ok"] and records[0]["variant"]["name"] == "first"
    assert [p["process"] for p in records[0]["stages"]["denoise_step"]["processes"]] == [0, 1]
    # Collecting again adds nothing.
    twice = harness(env, "collect", str(sweep_dir), "--no-report")
    assert "0 collected, 1 collected before, 1 pending" in twice.stdout
    assert len((sweep_dir / "results.jsonl").read_text().splitlines()) == 1


def test_a_refused_submission_is_a_failed_record_and_is_retried(
    xpk: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    env, log = xpk
    results = tmp_path / "results"
    ids = [line.split()[0] for line in harness(env, "sweep", str(MANIFEST), "--list").stdout.splitlines()]
    bad = workload_name("xpk_sweep", ids[1])
    failed = submit({**env, "FAKE_XPK_FAIL": bad}, results)
    assert failed.returncode == 1
    records = [json.loads(line) for line in (results / "xpk_sweep" / "results.jsonl").read_text().splitlines()]
    assert [(r["variant"]["id"], r["status"]) for r in records] == [(ids[1], "failed")]
    assert records[0]["error"].startswith(f"xpk workload create exited with code 3 (workload {bad})")
    assert "quota exceeded (fake)" in records[0]["error"]
    assert not (results / "xpk_sweep" / "specs" / f"{ids[1]}.json").exists()
    retried = submit(env, results)  # the refused one only
    assert retried.returncode == 0, retried.stderr
    assert [a[a.index("--workload") + 1] for a in calls(log)][-1] == bad and len(calls(log)) == 3


def test_xpk_needs_its_flags_and_dry_run_needs_a_cluster_launcher(xpk: tuple[dict[str, str], Path]) -> None:
    env, _ = xpk
    missing = harness(env, "sweep", str(MANIFEST), "--launcher", "xpk", "--cluster", "c")
    assert missing.returncode == 2
    assert "--launcher xpk needs --tpu-type, --docker-image, --results-dir" in missing.stderr
    local = harness(env, "sweep", str(MANIFEST), "--dry-run")
    assert local.returncode == 2 and "use it with --launcher xpk" in local.stderr
