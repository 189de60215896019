"""Result records on disk: atomic appends, reading past lines that are no records, repairing a torn tail,
resume bookkeeping."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results.record import RECORD_VERSION, Record
from harness.results.store import (
    InvalidRecordWarning,
    NewerRecordError,
    SweepIdError,
    append_record,
    latest_by_variant,
    load_records,
    output_dir,
    results_path,
    to_line,
)
from tests.harness.fixtures import synthetic


def _record(vid: str, status: str = "ok", **extra: object) -> Record:
    """A record of variant ``vid``; ``extra`` are top-level keys a newer writer might add."""
    return Record.from_dict(synthetic.minimal(vid, status=status, **extra))


def test_append_and_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sweep" / "results.jsonl"
    append_record(path, _record("a", samples=[0.1, 0.2]))
    append_record(path, _record("b", "failed", error="boom\nline 2"))
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line) for line in lines)
    loaded = load_records(path)
    assert [r.variant.id for r in loaded] == ["a", "b"]
    assert loaded[1].error == "boom\nline 2" and loaded[0].extra == {"samples": [0.1, 0.2]}
    assert lines[0] == to_line(loaded[0]).rstrip("\n")  # read and written back: the same line


def test_missing_file_has_no_records(tmp_path: Path) -> None:
    assert load_records(tmp_path / "none.jsonl") == []


def test_truncated_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append_record(path, _record("a"))
    with path.open("ab") as f:
        f.write(b'{"record_version": 1, "variant": {"id": "b"')  # a crash mid-write
    with pytest.warns(InvalidRecordWarning) as caught:
        assert [r.variant.id for r in load_records(path)] == ["a"]
    assert [str(w.message) for w in caught] == [
        f"{path}: skipped 1 line(s) that are not records: line 2: torn last line (43 bytes)"
    ]


def test_the_next_append_repairs_a_torn_line_and_keeps_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    append_record(path, _record("a"))
    with path.open("ab") as f:
        f.write(b'{"record_ver')
    with pytest.warns(InvalidRecordWarning, match=rf"{path}:2: torn last line \(12 bytes\) moved to {path}.torn"):
        append_record(path, _record("c"))
    assert [r.variant.id for r in load_records(path)] == ["a", "c"]  # no warning: the file is clean again
    assert (tmp_path / "results.jsonl.torn").read_bytes() == b'{"record_ver\n'
    append_record(path, _record("d"))  # nothing more to repair, nothing said
    assert len(path.read_text().splitlines()) == 3


def test_a_whole_record_that_lost_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(to_line(_record("a")).rstrip("\n"))  # e.g. an editor dropped the final newline
    append_record(path, _record("b"))
    assert [r.variant.id for r in load_records(path)] == ["a", "b"]
    assert not (tmp_path / "results.jsonl.torn").exists()


def test_newer_record_version_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps({**_record("a").to_dict(), "record_version": RECORD_VERSION + 1}) + "\n")
    with pytest.raises(
        NewerRecordError, match=rf"results.jsonl:1: record_version {RECORD_VERSION + 1} is not readable"
    ):
        load_records(path)


def test_json_that_is_no_record_is_skipped_with_one_warning_naming_each_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = _record("a").to_dict()
    lines = [
        good,
        {"record_version": 1},
        [1, 2],
        {**good, "stages": []},
        {**good, "stages": {"s": {"status": "weird"}}},
        {**good, "duration_s": "slow"},
        "not json",
        good,
    ]
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    with pytest.warns(InvalidRecordWarning) as caught:
        assert len(load_records(path)) == 2
    (message,) = [str(w.message) for w in caught]
    assert message == (
        f"{path}: skipped 6 line(s) that are not records: "
        "line 2: not a result record: missing sweep_id, manifest, variant, config, target, machine, versions, git, "
        "started_at, finished_at, duration_s, status, error, stages; "
        "line 3: not a JSON object; "
        "line 4: not a result record: stages: expected an object, got list ('[]'); "
        "line 5: not a result record: stages.s.status: 'weird' is none of ok, failed, does-not-fit; "
        "line 6: not a result record: duration_s: expected a number, got str ('slow'); "
        "line 7: not JSON (8 bytes)"
    )


def test_sweep_ids_stay_inside_the_reports_folder(tmp_path: Path) -> None:
    assert results_path(tmp_path, "nightly-gate.2") == tmp_path / "nightly-gate.2" / "results.jsonl"
    for bad in ("../../x", "a/b", ".hidden", "..", "a..b", "", "x" * 200, "with space"):
        with pytest.raises(SweepIdError, match="is not a plain folder name"):
            results_path(tmp_path, bad)


def test_outputs_go_next_to_a_sweep_never_next_to_a_baseline(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    assert output_dir(reports / "s1" / "results.jsonl", reports, "x") == reports / "s1"
    (reports / "s2").mkdir(parents=True)
    assert output_dir(reports / "s2", reports, "x") == reports / "s2"
    assert output_dir(reports / "baselines" / "nightly.jsonl", reports, "nightly-gate") == reports / "nightly-gate"
    assert output_dir(reports / "baselines" / "results.jsonl", reports, "b") == reports / "b"
    assert output_dir(tmp_path / "elsewhere" / "old.json", reports, "old-report") == reports / "old-report"


_APPENDER = """
import json, sys
from harness.results.record import Record
from harness.results.store import append_record
path, worker, template = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
for i in range(40):
    append_record(path, Record.from_dict({**template, "variant": {"id": f"{worker}-{i}", "name": "x"},
                                          "padding": "x" * 5000}))
"""


def test_concurrent_appends_never_interleave(tmp_path: Path) -> None:
    # Separate interpreters (not a multiprocessing pool): a pool would have to import this test module by name,
    # which pytest's importlib mode does not make importable, and a worker that cannot unpickle its task hangs.
    path = tmp_path / "results.jsonl"
    template = json.dumps(synthetic.minimal("x"))
    procs = [subprocess.Popen([sys.executable, "-c", _APPENDER, str(path), str(w), template]) for w in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    loaded = load_records(path)
    assert len(loaded) == 160 and len({r.variant.id for r in loaded}) == 160


def test_resume_bookkeeping() -> None:
    rs = [
        _record("a", "failed"),
        _record("a", "ok", n=1),
        _record("b", "timeout"),
        _record("c", "ok"),
        _record("c", "crashed"),
    ]
    latest = latest_by_variant(rs)
    assert latest["a"].extra == {"n": 1} and latest["c"].status == "crashed"
