"""Results files: one record per line (``reports/<sweep-id>/results.jsonl``), appended and read here.

Records (:mod:`harness.results.record`) are appended with one ``os.write`` of the whole line on an
``O_APPEND`` descriptor, under an exclusive ``flock`` of the file, and fsynced, so a crash leaves at
most a torn last line; a write the disk refuses (full, read-only) is cut back off and raised as a
:class:`~harness.results.storage.StorageError` naming the file. Reading skips every line that is not
a record (a torn write, an object that only looks like a record) with one
:class:`InvalidRecordWarning` per file naming each line; the next append repairs a torn last line
first (it is completed if it is a whole record that lost its newline, else moved to
``results.jsonl.torn``), so it is not warned about again. A record written by a newer harness is an
error, not skipped. Every record read anywhere (results files, baselines) goes through
:func:`harness.results.record.parse`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import warnings
from collections.abc import Iterable
from pathlib import Path

from harness.results.record import NewerRecordError, Record, RecordError, parse
from harness.results.storage import guarded

RESULTS_FILE = "results.jsonl"
TORN_SUFFIX = ".torn"
_WARNED: set[tuple[str, str]] = set()  # (file, what was said about one of its lines): said once per process
SWEEP_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")


class InvalidRecordWarning(UserWarning):
    """Lines of a results file that are not records (skipped), or a torn last line repaired."""


class SweepIdError(ValueError):
    """A sweep id that is not a plain folder name."""


# --------------------------------------------------------------------------- where


def check_sweep_id(sweep_id: str) -> str:
    """A sweep id is one plain folder name under the reports directory (``../x`` would write elsewhere)."""
    if not SWEEP_ID.match(sweep_id) or ".." in sweep_id:
        raise SweepIdError(
            f"sweep id {sweep_id!r} is not a plain folder name (letters, digits and . _ + -, not "
            "starting with '.', no '..'); results go to <reports>/<sweep id>/: pass --sweep-id NAME"
        )
    return sweep_id


def results_path(reports_dir: str | Path, sweep_id: str) -> Path:
    return Path(reports_dir) / check_sweep_id(sweep_id) / RESULTS_FILE


def output_dir(results: str | Path, reports_dir: str | Path, fallback_id: str) -> Path:
    """Where reports and gate files about ``results`` go: the sweep's own folder when ``results`` is one
    (``<dir>/results.jsonl`` or the folder), else ``<reports_dir>/<fallback_id>/``, never the folder of
    some other file (a committed baseline's)."""
    results = Path(results)
    folder = results if results.is_dir() else results.parent if results.name == RESULTS_FILE else None
    if folder is not None and folder.name != "baselines":
        return folder
    return Path(reports_dir) / check_sweep_id(fallback_id)


# --------------------------------------------------------------------------- writing


def to_line(record: Record) -> str:
    """A record as one results-file line (keys sorted, newline-terminated)."""
    return json.dumps(record.to_dict(), sort_keys=True, allow_nan=True) + "\n"


def append_record(path: str | Path, record: Record) -> None:
    """Append one record as one line, atomically with respect to readers, crashes and other appenders."""
    path = Path(path)
    line = to_line(record).encode()
    with guarded(path, "appending a record to"):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # released by close
            _repair_tail(fd, path)
            _append_whole(fd, line)
        finally:
            os.close(fd)


def _append_whole(fd: int, line: bytes) -> None:
    """Write ``line`` at the end and fsync it, or leave the file as it was: a write the disk refuses part
    way (full, gone read-only) is cut off again, so no torn record stays behind."""
    size = os.fstat(fd).st_size
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(errno.ENOSPC, f"short write: {written} of {len(line)} bytes written")
        os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise


def _repair_tail(fd: int, path: Path) -> None:
    """A last line without its newline (a crash mid-write): end it if it is a whole record, else move it
    to ``<path>.torn`` and cut it, so the file is clean again and nothing is lost."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    data = os.pread(fd, size, 0)
    start = data.rfind(b"\n") + 1
    tail, line_no = data[start:], data.count(b"\n") + 1
    try:
        parse(json.loads(tail), f"{path}:{line_no}")
    except (ValueError, RecordError):
        torn = path.with_name(path.name + TORN_SUFFIX)
        with torn.open("ab") as f:
            f.write(tail + b"\n")
        os.ftruncate(fd, start)
        warnings.warn(
            InvalidRecordWarning(
                f"{path}:{line_no}: torn last line ({len(tail)} bytes) moved to {torn} before appending"
            ),
            stacklevel=3,
        )
    else:
        os.write(fd, b"\n")  # a whole record that lost its newline (an editor): keep it


# --------------------------------------------------------------------------- reading


def load_records(path: str | Path) -> list[Record]:
    """Every record of a results file, in file order ([] if the file does not exist).

    Lines that are not records (not JSON, a torn last line, JSON that is no record) are skipped
    with one :class:`InvalidRecordWarning` naming the file and each line (a line already reported
    by this process is not reported again: a sweep reads its file more than once); older records
    are upgraded; a record newer than this harness is a :class:`~harness.results.record.NewerRecordError`.
    """
    path = Path(path)
    if not path.exists():
        return []
    with guarded(path, "reading"):
        data = path.read_bytes()
    records, skipped = [], []
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError:
            torn = not data.endswith(b"\n") and n == data.count(b"\n") + 1
            skipped.append(f"line {n}: {'torn last line' if torn else 'not JSON'} ({len(line)} bytes)")
            continue
        try:
            records.append(parse(raw, f"{path}:{n}"))
        except NewerRecordError:
            raise
        except RecordError as e:
            skipped.append(f"line {n}: {str(e).removeprefix(f'{path}:{n}: ')}")
    skipped = [s for s in skipped if (str(path), s) not in _WARNED]
    _WARNED.update((str(path), s) for s in skipped)
    if skipped:
        warnings.warn(
            InvalidRecordWarning(f"{path}: skipped {len(skipped)} line(s) that are not records: " + "; ".join(skipped)),
            stacklevel=2,
        )
    return records


def latest_by_variant(records: Iterable[Record]) -> dict[str, Record]:
    """variant id -> its most recent record (later lines win)."""
    return {r.variant.id: r for r in records}
