"""An interrupted sweep leaves nothing behind: SIGINT / SIGTERM stop the worker and exit 130 / 143, a SIGKILLed
sweep's worker ends itself; two sweeps never share a sweep folder. Real `python -m harness sweep` processes on
test presets, each with a private TMPDIR so "no harness-* folder left" is exact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness import cli
from harness.results.lock import LOCK_FILE, sweep_lock

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")

HANGS = """\
schema_version = 1
[target]
devices = 1
[model]
preset = "test:sleep"
[workload]
stages = ["denoise_step"]
[run]
repeats = 1
warmup = 1
timeout_s = 600
"""
WAIT_S = 60.0  # bound on every wait; a healthy run needs a few seconds


def wait_for(what: str, check: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if value := check():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def live_members(pgid: int) -> list[int]:
    """Pids of the processes of group ``pgid`` that are not zombies (a zombie holds nothing but its pid)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, _, group = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            out.append(int(entry.name))
    return out


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Worker process groups a test started: killed at teardown if still there (a failing test leaves no sleeper)."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        if live_members(pgid):
            os.killpg(pgid, signal.SIGKILL)


def start_sweep(tmp_path: Path, text: str = HANGS) -> tuple[subprocess.Popen[str], Path, Path]:
    """A sweep subprocess with its own TMPDIR; returns it, the TMPDIR and the reports folder."""
    manifest, tmpdir, reports = tmp_path / "hang.toml", tmp_path / "tmp", tmp_path / "reports"
    manifest.write_text(text)
    tmpdir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "sweep", str(manifest), "--reports", str(reports), "--no-report"],
        env={**os.environ, "TMPDIR": str(tmpdir)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, tmpdir, reports


def running_worker(tmpdir: Path) -> int:
    """The worker's pid once it is inside its stage (the status file it keeps in its scratch folder)."""

    def found() -> int | None:
        for status in tmpdir.glob("harness-*/status.json"):
            try:
                info = json.loads(status.read_text())
            except (OSError, ValueError):
                continue
            if info.get("phase") == "warmup":
                return int(info["pid"])
        return None

    return int(wait_for("the worker to start its stage", found))  # type: ignore[arg-type]


def assert_nothing_left(worker: int, tmpdir: Path) -> None:
    wait_for(f"worker group {worker} to end", lambda: not live_members(worker))
    wait_for(f"harness-* folders in {tmpdir} to go", lambda: not list(tmpdir.glob("harness-*")))


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_sweep_stops_its_worker_cleans_up_and_says_so(
    tmp_path: Path, reap: list[int], sig: int, code: int
) -> None:
    proc, tmpdir, reports = start_sweep(tmp_path)
    try:
        worker = running_worker(tmpdir)
        reap.append(worker)
        assert os.getpgid(worker) == worker != proc.pid  # the worker leads a process group of its own
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert f"interrupted by {signal.Signals(sig).name}: stopped variant base (" in err
    assert "0 variant(s) of this run recorded in" in err and "Traceback" not in err
    assert_nothing_left(worker, tmpdir)
    assert not (reports / "hang" / "results.jsonl").exists()  # an interrupted variant is no result
    log = next((reports / "hang" / "logs").glob("*.log")).read_text()
    assert "denoise_step:warmup" in log  # the worker's own lines reached its log
    with sweep_lock(reports / "hang"):  # and the lock went with the sweep
        pass


def test_a_killed_sweeps_worker_ends_itself_and_removes_its_scratch_folder(tmp_path: Path, reap: list[int]) -> None:
    proc, tmpdir, _ = start_sweep(tmp_path)
    try:
        worker = running_worker(tmpdir)
        reap.append(worker)
        proc.kill()  # SIGKILL: the sweep cannot clean up; the worker must notice
        proc.communicate(timeout=WAIT_S)
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert_nothing_left(worker, tmpdir)


def test_a_second_sweep_on_the_same_folder_is_refused_naming_the_holder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes: a holder of the sweep folder's lock, then a sweep of the same id in this one."""
    manifest, reports, tmpdir = tmp_path / "m.toml", tmp_path / "reports", tmp_path / "tmp"
    tmpdir.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))  # this process's temporary folders go there
    manifest.write_text(HANGS.replace("test:sleep", "test:ok"))
    code = (
        "import sys\nfrom harness.results.lock import sweep_lock\n"
        "with sweep_lock(sys.argv[1]):\n    print('held', flush=True)\n    sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(reports / "m"), "--holding"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert cli.main(["sweep", str(manifest), "--reports", str(reports), "--no-report"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: sweep 'm' is already running: pid {holder.pid} on ")
        assert "--holding" in err and f"(lock: {reports / 'm' / LOCK_FILE})" in err
        assert not (reports / "m" / "results.jsonl").exists()
    finally:
        holder.communicate("", timeout=WAIT_S)
    assert cli.main(["sweep", str(manifest), "--reports", str(reports), "--no-report"]) == 0  # free again
    assert len((reports / "m" / "results.jsonl").read_text().splitlines()) == 1
    assert holder.returncode == 0 and list(tmpdir.iterdir()) == []  # no process, no temporary folder left
