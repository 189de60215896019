"""A worker's lifeline removes its scratch folder even while its other threads still write into it, and
the next sweep removes what a dead launcher, or a worker dead mid-removal, left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness.run import lifeline, runner

# A worker whose main thread keeps creating files in its scratch folder (as it writes status.json and
# out.json) when the lifeline ends it. Before the folder was renamed first, a plain rmtree lost this
# race: a file created between its listing and its rmdir left the folder behind (a CI failure of
# tests/harness/faults/test_interruption.py::test_sweep_ended_while_its_worker_runs[SIGKILL--9]).
WRITER = """
import sys, threading, time
from pathlib import Path
from harness.run import lifeline

scratch = Path(sys.argv[1])
started = threading.Event()

def write():
    n = 0
    while True:
        try:
            (scratch / f"status.json.{n}.tmp").write_text("{}")
        except OSError:
            pass
        n += 1
        if n == 200:
            started.set()

threading.Thread(target=write, daemon=True).start()
started.wait()
lifeline.orphaned(str(scratch))
"""


@pytest.mark.parametrize("attempt", range(8))
def test_orphaned_removes_a_scratch_folder_still_written_into(tmp_path: Path, attempt: int) -> None:
    scratch = tmp_path / "harness-v-abc"
    scratch.mkdir()
    (scratch / "spec.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", WRITER, str(scratch)], capture_output=True, text=True, env=env)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "launcher gone, scratch folder removed, exiting" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the folder nor its renamed self


def test_remove_scratch_is_idempotent(tmp_path: Path) -> None:
    scratch = tmp_path / "harness-v-abc"
    (scratch / "sub").mkdir(parents=True)
    (scratch / "sub" / "out.json").write_text("{}")
    lifeline.remove_scratch(scratch)
    lifeline.remove_scratch(scratch)  # the other mechanism, or the other worker, comes second
    assert list(tmp_path.iterdir()) == []
    assert lifeline.gone_name(scratch) == tmp_path / ".harness-v-abc.orphaned"


def test_next_sweep_removes_what_dead_launchers_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    for name, pid in [("harness-dead-1", int(dead.stdout)), ("harness-live-1", os.getpid())]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "spec.json").write_text(json.dumps({"parent_pid": pid}))
    (tmp_path / ".harness-half-1.orphaned" / "x").mkdir(parents=True)  # a worker killed while removing it
    (tmp_path / "harness-nospec-1").mkdir()  # a launcher killed before it wrote the spec: whose, unknown
    runner.remove_dead_scratch()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["harness-live-1", "harness-nospec-1"]


# A launcher (this script) whose worker kills it and ends at once, calling leaving() on its way out
# as the worker's main does: no time for the parent-death signal or the polling thread.
LAUNCHER = """
import subprocess, sys
worker = '''
import os, signal, sys
from harness.run import lifeline
parent = os.getppid()
if sys.argv[2] == "kill":
    os.kill(parent, signal.SIGKILL)
    print(int(lifeline.dying(parent)), flush=True)
lifeline.leaving(parent, sys.argv[1])
'''
subprocess.Popen([sys.executable, "-c", worker, sys.argv[1], sys.argv[2]], start_new_session=True).wait()
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads process state from /proc")
def test_a_worker_ending_as_its_launcher_is_killed_removes_its_folder(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for n in range(4):
        scratch = tmp_path / f"harness-v-{n}"
        scratch.mkdir()
        (scratch / "out.json").write_text("{}")
        done = subprocess.run(
            [sys.executable, "-c", LAUNCHER, str(scratch), "kill"], capture_output=True, text=True, env=env
        )
        assert done.returncode == -signal.SIGKILL
        assert done.stdout.strip() == "1"  # dying() right after kill(): SIGKILL pending
        assert not scratch.exists()  # run() returns when the worker, holding its stdout, has ended
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads process state from /proc")
def test_a_worker_ending_under_a_live_launcher_leaves_the_folder_to_it(tmp_path: Path) -> None:
    scratch = tmp_path / "harness-v-live"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", LAUNCHER, str(scratch), "live"], capture_output=True, env=env)
    assert done.returncode == 0
    assert scratch.is_dir()  # the launcher (alive when the worker ended) removes it
    assert not lifeline.dying(os.getpid())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert not lifeline.dying(int(dead.stdout))  # gone already: not "dying"
