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
