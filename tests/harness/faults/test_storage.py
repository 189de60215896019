"""Storage faults at each write a sweep makes: exit 3, one line with the cause and the path, records whole,
nothing left running, and the same command completing the sweep once the fault is cleared."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from faultbench import SWEEP_ID, VARIANTS, Bench, assert_one_line

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds processes and files through /proc")

ENOSPC = "no space left on device (ENOSPC)"
EROFS = "read-only file system (EROFS)"

# (case, the call that fails in the sweep, what the line says, the file it names relative to the sweep
# folder, how many variants were recorded before it)
SWEEP_WRITES = [
    ("lock-create", {"op": "open", "path": "*/sweep.lock"}, "taking the sweep lock", "sweep.lock", 0),
    ("lock-write", {"op": "write", "path": "*/sweep.lock"}, "taking the sweep lock", "sweep.lock", 0),
    ("logs-folder", {"op": "mkdir", "path": "*/logs"}, "starting the worker:", "logs", 0),
    ("worker-log", {"op": "open", "path": "*/logs/*.log", "nth": 2}, "starting the worker:", "logs/", 1),
    ("record-open", {"op": "open", "path": "*/results.jsonl"}, "appending a record to", "results.jsonl", 0),
    ("record-write", {"op": "write", "path": "*/results.jsonl", "nth": 3}, "appending a record to", "results.jsonl", 2),
    ("record-fsync", {"op": "fsync", "path": "*/results.jsonl", "nth": 2}, "appending a record to", "results.jsonl", 1),
    ("report-html", {"op": "open", "path": "*/.index.html.*"}, "writing", "index.html;", 3),
    ("report-csv", {"op": "open", "path": "*/.results.csv.*"}, "writing", "results.csv;", 3),
    ("report-rename", {"op": "replace", "path": "*/index.html"}, "writing", "index.html", 3),
]


@pytest.mark.parametrize(
    ("call", "says", "names", "before"), [c[1:] for c in SWEEP_WRITES], ids=[c[0] for c in SWEEP_WRITES]
)
def test_disk_full_at_each_write_of_the_sweep(
    bench: Bench, call: dict[str, object], says: str, names: str, before: int
) -> None:
    failed = bench.sweep(fault={**call, "action": "ENOSPC"})
    assert failed.code == 3, failed.err
    line = assert_one_line(failed.err, ENOSPC, says, str(bench.sweep_dir / names), "free some space")
    assert "run the same command again" in line
    assert len(bench.assert_whole()) == before  # what was recorded before the fault is kept, whole
    bench.assert_nothing_left()
    records = bench.assert_completes()
    assert len(records) == len(VARIANTS)  # each variant recorded once, the interrupted one included


def test_read_only_reports_folder(bench: Bench) -> None:
    bench.sweep_dir.mkdir(parents=True)
    failed = bench.sweep(fault={"op": "open", "path": f"{bench.reports}/*", "nth": 0, "action": "EROFS"})
    assert failed.code == 3
    assert_one_line(failed.err, EROFS, str(bench.sweep_dir / "sweep.lock"), "make it writable")
    assert not bench.results.exists()
    bench.assert_completes()


def test_reports_path_is_a_file(bench: Bench) -> None:
    bench.reports.write_text("not a folder\n")
    failed = bench.sweep()
    assert failed.code == 3
    assert_one_line(failed.err, "not a directory (ENOTDIR)", str(bench.reports), "a file is where a folder should be")
    assert bench.reports.read_text() == "not a folder\n"  # nothing of the user's is touched
    bench.reports.unlink()
    bench.assert_completes()


def test_results_file_is_a_folder(bench: Bench) -> None:
    bench.results.mkdir(parents=True)
    failed = bench.sweep()
    assert failed.code == 3
    assert_one_line(failed.err, "(EISDIR)", "reading", str(bench.results), "a folder is where a file should be")
    bench.results.rmdir()
    bench.assert_completes()


def test_sweep_folder_vanishes_while_a_worker_runs(bench: Bench) -> None:
    """Deleted (or unmounted) under the sweep: said, not papered over with a fresh empty results file."""
    gone = {"op": "open", "path": "*/out.json*", "action": f"rmtree:{bench.sweep_dir}"}
    failed = bench.sweep(worker_fault=gone)
    assert failed.code == 3
    assert_one_line(failed.err, "sweep folder vanished (ENOENT) while the sweep ran", str(bench.sweep_dir))
    assert not bench.sweep_dir.exists()
    bench.assert_nothing_left()
    bench.assert_completes()


def test_worker_output_disk_full_is_a_failed_record_and_the_sweep_goes_on(bench: Bench) -> None:
    failed = bench.sweep(worker_fault={"op": "open", "path": "*/out.json*", "action": "ENOSPC"})
    assert failed.code == 1 and "error:" not in failed.err and "Traceback" not in failed.err
    records = bench.assert_whole()
    assert [r.status for r in records] == ["crashed"] * len(VARIANTS)  # every variant tried: the sweep went on
    for r in records:
        assert "No space left on device" in (r.error or "") and "out.json" in (r.error or "")
    bench.assert_nothing_left()
    bench.assert_completes()


def test_debug_flag_adds_the_traceback(bench: Bench) -> None:
    failed = bench.sweep("--debug", fault={"op": "open", "path": "*/sweep.lock", "action": "ENOSPC"})
    assert failed.code == 3
    assert "Traceback (most recent call last)" in failed.err
    assert failed.err.rstrip().splitlines()[-1].startswith(f"error: {ENOSPC} taking the sweep lock")


def _mount(target: Path, *options: str) -> Callable[[], None] | None:
    """A tmpfs at ``target`` (root only); the unmount, or None where mounting is not allowed."""
    target.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(target)], capture_output=True
    )
    if mounted.returncode != 0 or not os.path.ismount(target):
        return None
    return lambda: subprocess.run(["umount", "-l", str(target)], check=True)


@pytest.mark.skipif(shutil.which("mount") is None, reason="needs mount(8)")
def test_a_real_full_tmpfs(bench: Bench) -> None:
    """No injection: the reports folder is a 256 KiB tmpfs filled to the last block by another file."""
    unmount = _mount(bench.reports, "size=256k")
    if unmount is None:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        filler = bench.reports / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as e:
            assert e.errno == errno.ENOSPC
        finally:
            os.close(fd)
        failed = bench.sweep()
        assert failed.code == 3
        assert_one_line(failed.err, ENOSPC, str(bench.reports / SWEEP_ID))
        bench.assert_whole()
        bench.assert_nothing_left()
        filler.unlink()
        bench.assert_completes()
    finally:
        unmount()


@pytest.mark.skipif(shutil.which("mount") is None, reason="needs mount(8)")
def test_a_real_read_only_tmpfs(bench: Bench) -> None:
    unmount = _mount(bench.reports, "size=256k", "ro")
    if unmount is None:
        pytest.skip("cannot mount a tmpfs here (not root, or no CAP_SYS_ADMIN)")
    try:
        failed = bench.sweep()
        assert failed.code == 3
        assert_one_line(failed.err, EROFS, str(bench.reports / SWEEP_ID))
    finally:
        unmount()
    bench.assert_completes()  # the folder underneath is writable: cleared


def test_a_bug_is_one_line_and_exit_4_unless_debug(bench: Bench) -> None:
    import harness.run.runner

    def broken() -> dict[str, object]:
        raise KeyError("machine")

    bench.monkeypatch.setattr(harness.run.runner, "context", broken)
    failed = bench.sweep()
    assert failed.code == 4
    assert_one_line(failed.err, "error: internal error (KeyError: 'machine'); run with --debug for the traceback")
    debug = bench.sweep("--debug")
    assert debug.code == 4 and "Traceback (most recent call last)" in debug.err
    assert bench.records() == []
    bench.assert_nothing_left()
