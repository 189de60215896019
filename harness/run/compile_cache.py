"""On-disk cache of compile-only static metrics, so an unchanged variant costs nothing on re-run.

A full-size compile for a TPU slice takes minutes on a CPU host; its result is a small
JSON dict. The key is a sha256 of everything that can change that dict:

* what is compiled: preset, resolved config overrides, target (platform, topology,
  resolved mesh, compiler options), workload (minus the list of stages) and the stage name;
* the compilers: versions of jax, jaxlib, flax, libtpu and the CUDA plugin;
* the code: the source of the ``ltx2`` package (which builds the stages) and of the harness
  modules that compile and analyse them (:data:`CODE_FILES`), less the code that predicts from the
  cached program (:data:`PREDICTION_FILES`: a hit simulates the program again, so a change to the
  simulator re-predicts every variant without compiling it).

Each entry keeps the compiled program's optimized HLO text too (``<key>.hlo.gz``, gzip: a
full-size step's text is tens of MB, a few MB compressed), so a hit still gives what reads the
program after compiling: the predicted timeline (:mod:`harness.run.predicted`) simulates it.
Entries are written atomically and stamped with their key, the cache version and the compilers'
versions; an entry that is cut short, corrupt or stamped otherwise is a miss, said and replaced
(:class:`CompileCache`). Delete the directory to start over.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import sys
import zlib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.results.provenance import library_versions
from harness.results.storage import StorageError, write_atomic
from harness.run.spec import WorkerSpec

CACHE_VERSION = 3  # 2: entries keep the HLO text (version-1 entries had none); 3: entries stamped
LIBRARIES = ("jax", "jaxlib", "flax", "libtpu", "jax-cuda12-plugin", "jax-cuda12-pjrt")
_ROOT = Path(__file__).resolve().parents[2]
# Harness code that decides how a stage is compiled and how its program is read (files or folders).
CODE_FILES = (
    "harness/run/jax_stage.py",
    "harness/metrics",
    "harness/targets.py",
    "harness/hardware.py",
    "harness/run/compile_cache.py",
)
# What reads the cached program after a hit as after a compile; no static metric comes from it.
PREDICTION_FILES = (
    "harness/metrics/timeline",
    "harness/metrics/xprof/predicted.py",
    "harness/metrics/xprof/xplane_write.py",
)


def _versions() -> dict[str, str | None]:
    return library_versions(LIBRARIES)


def source_files(root: Path, names: Iterable[str]) -> list[Path]:
    """The files ``names`` (from ``root``) stand for: a folder's ``*.py`` files sorted, a file itself."""
    files: list[Path] = []
    for name in names:
        path = root / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def hash_sources(h: Any, root: Path, files: Iterable[Path]) -> str:
    """``h`` (a hashlib object) fed each existing file's path from ``root`` and contents, in order;
    its hex digest. A missing file is skipped (tests/harness/run/test_predicted_cache.py checks the
    lists name none)."""
    for path in files:
        if path.exists():
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def code_hash(root: Path = _ROOT) -> str:
    """sha256 over the model package and :data:`CODE_FILES` less :data:`PREDICTION_FILES` (paths and
    contents, sorted)."""
    skip = [root / name for name in PREDICTION_FILES]
    files = [f for f in source_files(root, ("ltx2", *CODE_FILES)) if not any(f == s or s in f.parents for s in skip)]
    return hash_sources(hashlib.sha256(), root, files)


def cache_key(spec: WorkerSpec, stage: str) -> str:
    """Key of one stage of one worker spec (see the module docstring for what enters it)."""
    target = spec.target
    what = {
        "cache_version": CACHE_VERSION,
        "preset": spec.preset,
        "config": dict(sorted(spec.config_overrides.items())),
        "target": {
            "platform": target.platform,
            "topology": target.topology,
            "mesh": [[a, s] for a, s in target.mesh],
            **({"compiler_options": dict(target.compiler_options)} if target.compiler_options else {}),
        },
        "workload": {k: v for k, v in spec.workload.to_dict().items() if k != "stages"},
        "stage": stage,
        "versions": _versions(),
        "code": code_hash(),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class CompileCache:
    """A directory of ``<key>.json`` entries holding static-metric dicts (and ``<key>.hlo.gz`` their programs).

    An entry carries its key, :data:`CACHE_VERSION` and the compilers' versions; one that is cut short,
    not JSON, or written by another cache version or other compilers (a cache folder copied from
    another machine) is a miss, said in one line on stderr (the worker's log) naming the file, and
    is removed so the fresh compile's result replaces it. An entry the disk refuses to take (full,
    read-only) is said the same way and skipped: the compile's result still reaches the record.
    """

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        path = self.path(key)
        entry = read_entry(path, "static", lambda why: self._drop(path, why), "not a cache entry", describe=_why)
        if entry is None:
            return None
        stamp = {"key": key, "cache_version": CACHE_VERSION, "versions": _versions()}
        if (theirs := {k: entry.get(k) for k in stamp}) != stamp:
            self._drop(path, f"written by another harness or library version ({_diff(theirs, stamp)})")
            return None
        return dict(entry["static"])

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        entry = {"key": key, "cache_version": CACHE_VERSION, "versions": _versions(), "static": dict(value)}
        self._write(self.path(key), json.dumps(entry, default=str).encode())

    def hlo_path(self, key: str) -> Path:
        return self.directory / f"{key}.hlo.gz"

    def get_hlo(self, key: str) -> str | None:
        """The entry's optimized HLO text, None if it has none or it cannot be read (said and removed)."""
        path = self.hlo_path(key)
        try:
            return gzip.decompress(path.read_bytes()).decode()
        except FileNotFoundError:
            return None
        except (OSError, EOFError, UnicodeDecodeError, zlib.error) as e:
            self._drop(path, f"unreadable ({_why(e)})")
            return None

    def put_hlo(self, key: str, text: str) -> None:
        self._write(self.hlo_path(key), gzip.compress(text.encode(), compresslevel=6))

    def _write(self, path: Path, data: bytes) -> None:
        """Replace ``path`` whole (temporary sibling, rename); a refused write is said, not raised."""
        try:
            write_atomic(path, data)
        except StorageError as e:
            _say(f"{e}: entry not cached, the result goes to the record and the next run compiles again")

    def _drop(self, path: Path, why: str) -> None:
        _say(f"{path}: {why}: ignored and removed, compiling again")
        with contextlib.suppress(OSError):
            path.unlink()


def read_entry(
    path: Path,
    field: str,
    drop: Callable[[str], None],
    not_entry: str,
    describe: Callable[[BaseException], str] = str,
    key: str | None = None,
) -> dict[str, Any] | None:
    """A cache's JSON entry at ``path`` holding an object under ``field`` (and ``key`` as its key, when
    given); None when there is none: absent, or unreadable or not such an entry, which ``drop`` is
    told (``unreadable (<describe(error)>)`` or ``not_entry``) to say and remove."""
    try:
        entry = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        drop(f"unreadable ({describe(e)})")
        return None
    if not isinstance(entry, dict) or not isinstance(entry.get(field), dict) or key not in (None, entry.get("key")):
        drop(not_entry)
        return None
    return entry


def _why(e: BaseException) -> str:
    if isinstance(e, (ValueError, EOFError, zlib.error)):
        return f"cut short or corrupt: {e}"
    return str(e)


def _diff(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {theirs.get(k)!r}, here {ours[k]!r}" for k in ours if theirs.get(k) != ours[k])


def _say(line: str) -> None:
    print(f"compile cache: {line}", file=sys.stderr, flush=True)
