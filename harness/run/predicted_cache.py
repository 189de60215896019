"""On-disk cache of predicted entries, beside the compile cache's programs: an unchanged program priced
by an unchanged simulator on an unchanged spec is not simulated again.

A hit of the compile cache (:mod:`harness.run.compile_cache`) skips the compile but re-simulates the
program: for a 40-step loop of the 19B that is minutes of CPU (the prediction, its sensitivity and
its uncertainty interval each simulate it many times), nearly all of a warm TPU gate. The predicted
entry is a pure function of the program and the spec, so it is cached under a key of

* the stage's compile key (:func:`harness.run.compile_cache.cache_key`: what was compiled, the
  compilers' versions and the code that builds and reads the program), which names the program;
* the simulator's identity (:func:`simulator_identity`): :data:`SIMULATOR_VERSION` and a sha256 over
  the source of the code that prices a program and writes the entry (:data:`SIMULATOR_FILES`), so
  an edit to the simulator misses even when the version was not bumped;
* the spec, whole (its numbers and its prose: the entry carries both), and what the entry scales by
  (calls per video, whether one call is a host loop).

Only predictions on a fixed spec (a TPU / GPU topology's table or a spec file) are cached: a CPU
target's constants are measured for each sweep. An entry is ``<key>.predicted.json`` (the entry,
its files' paths relative) and ``<key>.predicted/`` (the Chrome trace and the XSpace it wrote); a hit
copies the files into the stage's trace folder. An entry that cannot be read is a miss, said on
stderr and removed; one the disk refuses is said and skipped (:class:`PredictionCache`).

The folder is bounded: after each write the least recently used entries (a hit marks its entry
used: the ``.predicted.json`` file's modification time) are removed until the entries together
take at most ``HARNESS_PREDICTION_CACHE_MB`` MiB (default :data:`DEFAULT_MAX_MB`; 0 keeps none).
An entry of a 40-step 19B loop is about 12 MB (its trace and XSpace), and every edit to the
simulator writes new ones beside the old (CI's cache restore keeps them), so without a bound the
folder only grows. A folder without its entry is removed too once it is :data:`ORPHAN_GRACE_S` old
(a write cut short): a younger one may be another process's ``put``, which writes the entry after its
files, so a concurrent prune must not take the files from under it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.metrics.timeline.identity import SIMULATOR_VERSION
from harness.metrics.timeline.specs import TimelineSpec
from harness.results.storage import StorageError, write_atomic
from harness.run.compile_cache import hash_sources, read_entry, source_files

ENTRY_VERSION = 1
_ROOT = Path(__file__).resolve().parents[2]
# The code between a parsed program and its predicted entry (files or folders, from the repository root).
SIMULATOR_FILES = (
    "harness/metrics/timeline",
    "harness/metrics/xprof/predicted.py",
    "harness/metrics/xprof/xplane_write.py",
    "harness/metrics/xprof/metrics.py",
    "harness/metrics/measured/chrome.py",
    "harness/run/predicted.py",
    "harness/run/predicted_cache.py",
)
FILE_FIELDS = ("chrome_trace", "xplane")  # entry fields that are paths of files under the stage's folder
ENV_MAX_MB = "HARNESS_PREDICTION_CACHE_MB"
DEFAULT_MAX_MB = 1024.0  # about 80 entries of a 40-step 19B loop
_SUFFIX = ".predicted.json"
ORPHAN_GRACE_S = 3600.0  # a put writes its files and then its entry within seconds; an hour-old orphan is dead


def max_bytes(environ: Mapping[str, str] = os.environ) -> int:
    """The folder's bound in bytes: ``HARNESS_PREDICTION_CACHE_MB`` MiB, else :data:`DEFAULT_MAX_MB`."""
    raw = environ.get(ENV_MAX_MB, "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        mb = math.nan
    if not math.isfinite(mb) or mb < 0:
        raise ValueError(f"{ENV_MAX_MB}={raw!r}: the prediction cache's bound in MiB must be a number >= 0")
    return int(mb * 2**20)


@functools.cache
def simulator_identity(root: Path = _ROOT) -> str:
    """sha256 (hex) of :data:`SIMULATOR_VERSION` and the source of :data:`SIMULATOR_FILES` (paths and
    contents, sorted)."""
    seed = hashlib.sha256(f"simulator {SIMULATOR_VERSION}\0".encode())
    return hash_sources(seed, root, source_files(root, SIMULATOR_FILES))


def prediction_key(
    compile_key: str, spec: TimelineSpec, *, calls_per_video: int, host_loop: bool, simulator: str | None = None
) -> str:
    """Key of one stage's predicted entry (see the module docstring for what enters it)."""
    what = {
        "entry_version": ENTRY_VERSION,
        "compile_key": compile_key,
        "simulator": simulator if simulator is not None else simulator_identity(),
        "spec": spec.to_dict(),
        "calls_per_video": calls_per_video,
        "host_loop": host_loop,
    }
    text = json.dumps(what, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


class PredictionCache:
    """A directory of ``<key>.predicted.json`` entries and ``<key>.predicted/`` folders of their files."""

    def __init__(self, directory: str | Path, limit: int | None = None):
        self.directory = Path(directory)
        self.limit = max_bytes() if limit is None else limit  # bytes the entries may take together

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.predicted.json"

    def files(self, key: str) -> Path:
        return self.directory / f"{key}.predicted"

    def get(self, key: str, where: Path) -> dict[str, Any] | None:
        """The entry, its files copied into ``where`` and its paths pointing there; None on a miss."""
        path, drop = self.path(key), functools.partial(self._drop, key)
        entry = read_entry(path, "predicted", drop, "not a predicted entry for this key", key=key)
        if entry is None:
            return None
        out = dict(entry["predicted"])
        try:
            for field in FILE_FIELDS:
                if isinstance(rel := out.get(field), str):
                    target = where / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(self.files(key) / rel, target)
                    out[field] = str(target)
        except OSError as e:
            self._drop(key, f"its files cannot be copied ({e})")
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # used now: the last to go
        return out

    def put(self, key: str, predicted: Mapping[str, Any], where: Path) -> None:
        """Keep ``predicted`` and the files it names under ``where`` (other paths are not cached)."""
        out = dict(predicted)
        try:
            for field in FILE_FIELDS:
                if isinstance(value := out.get(field), str):
                    rel = Path(value).relative_to(where)
                    target = self.files(key) / rel
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(value, target)
                    out[field] = rel.as_posix()
            write_atomic(self.path(key), json.dumps({"key": key, "predicted": out}, default=str).encode())
        except (OSError, ValueError, StorageError) as e:
            _say(f"{self.path(key)}: not cached ({e}): the next run simulates the program again")
        self.prune()

    def _size(self, key: str) -> int:
        files = self.files(key)
        inner = sum(f.stat().st_size for f in files.rglob("*") if f.is_file()) if files.is_dir() else 0
        return self.path(key).stat().st_size + inner

    def prune(self) -> list[str]:
        """Remove the least recently used entries until the rest take at most :attr:`limit` bytes (an
        entry larger than the bound first), and folders without an entry older than :data:`ORPHAN_GRACE_S`;
        the keys removed, in order."""
        entries = []
        for path in self.directory.glob(f"*{_SUFFIX}"):
            key = path.name[: -len(_SUFFIX)]
            with contextlib.suppress(OSError):  # another process may remove it meanwhile
                entries.append((path.stat().st_mtime, key, self._size(key)))
        now = time.time()
        for folder in self.directory.glob("*.predicted"):
            with contextlib.suppress(OSError):  # gone meanwhile: nothing to do
                orphan = folder.is_dir() and not self.path(folder.name[: -len(".predicted")]).exists()
                if orphan and now - folder.stat().st_mtime > ORPHAN_GRACE_S:
                    shutil.rmtree(folder, ignore_errors=True)
        total = sum(size for _, _, size in entries)
        removed = []
        # an entry larger than the whole bound goes first (it can never fit), then the least recently used
        for _, key, size in sorted(entries, key=lambda e: (e[2] <= self.limit, e[0])):
            if total <= self.limit:
                break
            self._remove(key)
            total -= size
            removed.append(key)
        if removed:
            _say(
                f"{len(removed)} least recently used entries removed: the rest take {total / 2**20:.1f} MiB of "
                f"{self.limit / 2**20:.0f} ({ENV_MAX_MB})"
            )
        return removed

    def _remove(self, key: str) -> None:
        with contextlib.suppress(OSError):
            self.path(key).unlink()
        shutil.rmtree(self.files(key), ignore_errors=True)

    def _drop(self, key: str, why: str) -> None:
        _say(f"{self.path(key)}: {why}: ignored and removed, simulating again")
        self._remove(key)


def _say(line: str) -> None:
    print(f"prediction cache: {line}", file=sys.stderr, flush=True)
