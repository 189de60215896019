"""The sweep or a worker killed between any two writes (or in the middle of one), stopped and continued,
interrupted: no torn record survives the next run, no process is left, a lock left by a dead sweep is
taken over naming its pid, and the same command completes the sweep with every variant once."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from faultbench import VARIANTS, Bench, assert_one_line, tagged, wait_for

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds processes and files through /proc")

# (case, where the sweep process dies, how many whole records it leaves, whether it held the lock then)
KILLS = [
    ("after-the-lock", {"op": "mkdir", "path": "*/logs"}, 0, True),
    ("first-log", {"op": "open", "path": "*/logs/*.log"}, 0, True),
    ("before-2nd-record", {"op": "write", "path": "*/results.jsonl", "nth": 2}, 1, True),
    ("before-3rd-fsync", {"op": "fsync", "path": "*/results.jsonl", "nth": 3}, 3, True),
    ("report-page", {"op": "open", "path": "*/.index.html.*"}, 3, False),
    ("report-rename", {"op": "replace", "path": "*/results.csv"}, 3, False),
]


@pytest.mark.parametrize(("call", "whole", "held"), [k[1:] for k in KILLS], ids=[k[0] for k in KILLS])
def test_sweep_killed_between_writes(bench: Bench, call: dict[str, object], whole: int, held: bool) -> None:
    killed = bench.run(bench.args(), fault={"proc": "sweep", **call, "action": "kill"})
    assert killed.code == -signal.SIGKILL, killed.err
    assert len(bench.records()) == whole
    lock = json.loads((bench.sweep_dir / "sweep.lock").read_text() or "{}")  # the dead sweep's, if it held it
    assert bool(lock) == held
    wait_for(f"processes tagged {bench.tag} to end", lambda: not tagged(bench.tag))
    bench.assert_completes()  # a scratch folder or temporary file the dead sweep left is gone too
    took_over = f"taking over {bench.sweep_dir / 'sweep.lock'}: left by pid {lock.get('pid')}"
    assert (took_over in bench.last.err) == held, bench.last.err


def test_sweep_killed_in_the_middle_of_a_record(bench: Bench) -> None:
    """Half a line on disk (power lost mid-write): set aside to results.jsonl.torn, the variant run again."""
    torn = {"proc": "sweep", "op": "write", "path": "*/results.jsonl", "nth": 2, "action": "tear"}
    killed = bench.run(bench.args(), fault=torn)
    assert killed.code == -signal.SIGKILL
    data = bench.results.read_bytes()
    assert data.count(b"\n") == 1 and not data.endswith(b"\n")  # one whole record and half of the next
    bench.assert_nothing_left()
    records = bench.assert_completes()
    assert len(records) == len(VARIANTS)
    assert (bench.results.parent / "results.jsonl.torn").read_bytes() == data[data.index(b"\n") + 1 :] + b"\n"
    assert "torn last line" in bench.last.err and "results.jsonl.torn" in bench.last.err


@pytest.mark.parametrize(("signame", "code"), [("SIGKILL", -9), ("SIGTERM", 143), ("SIGINT", 130)])
def test_sweep_ended_while_its_worker_runs(bench: Bench, signame: str, code: int) -> None:
    """The worker signals its own sweep mid-stage: the worker never outlives it (SIGKILL: it ends itself)."""
    fault = {"proc": "worker", "op": "open", "path": "*/status.json*", "nth": 3, "action": f"signal-parent:{signame}"}
    ended = bench.run(bench.args(), fault=fault)
    assert ended.code == code, ended.err
    if signame != "SIGKILL":
        line = ended.err.rstrip().splitlines()[-1]
        assert line.startswith(f"interrupted by {signame}: stopped variant a (") and "Traceback" not in ended.err
        assert "run the same command again to resume" in line
    assert bench.assert_whole() == []
    bench.assert_nothing_left()
    bench.assert_completes()


def test_worker_killed_between_its_writes_is_a_crashed_record(bench: Bench) -> None:
    failed = bench.sweep(worker_fault={"op": "open", "path": "*/out.json*", "nth": 2, "action": "kill"})
    assert failed.code == 1 and "error:" not in failed.err and "Traceback" not in failed.err
    records = bench.assert_whole()
    assert [r.status for r in records] == ["crashed"] * len(VARIANTS)
    assert all("worker killed by signal SIGKILL" in (r.error or "") for r in records)
    bench.assert_nothing_left()
    bench.assert_completes()


def test_sweep_stopped_and_continued(bench: Bench) -> None:
    """SIGSTOP / SIGCONT (a job suspended at the shell): the sweep carries on as if nothing happened."""
    proc = bench.spawn(bench.args())
    try:
        wait_for("the sweep to take its lock", lambda: (bench.sweep_dir / "sweep.lock").exists())
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.5)
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert [r.status for r in bench.assert_whole()] == ["ok"] * len(VARIANTS)
    bench.assert_nothing_left()


def test_a_second_sweep_on_the_same_id_is_refused_naming_the_first(bench: Bench) -> None:
    first = bench.spawn(bench.args(), fault=None)
    try:
        info = wait_for("the first sweep to record itself", lambda: _holder(bench))
        first.send_signal(signal.SIGSTOP)  # holding the lock for as long as the second takes
        second = bench.sweep()
        first.send_signal(signal.SIGCONT)
        assert second.code == 2
        assert_one_line(second.err, f"sweep 'f' is already running: pid {info['pid']}", "sweep.lock")
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    assert first.returncode == 0, err
    assert [r.status for r in bench.assert_whole()] == ["ok"] * len(VARIANTS)


def _holder(bench: Bench) -> dict[str, object] | None:
    try:
        return json.loads((bench.sweep_dir / "sweep.lock").read_text()) or None
    except (OSError, ValueError):
        return None
