"""On-disk cache of compile-only static metrics, so an unchanged variant costs nothing on re-run.

A full-size compile for a TPU slice takes minutes on a CPU host; its result is a small
JSON dict. The key is a sha256 of everything that can change that dict:

* what is compiled: preset, resolved config overrides, target (platform, topology,
  resolved mesh, compiler options), workload (minus the list of stages) and the stage name;
* the compilers: versions of jax, jaxlib, flax, libtpu and the CUDA plugin;
* the code: the source of the ``ltx2`` package (which builds the stages) and of the harness
  modules that compile and analyse them (:data:`CODE_FILES`).

Each entry keeps the compiled program's optimized HLO text too (``<key>.hlo.gz``, gzip: a
full-size step's text is tens of MB, a few MB compressed), so a hit still gives what reads the
program after compiling: the predicted timeline (:mod:`harness.run.predicted`) simulates it.
Entries are written atomically; an unreadable entry is a miss. Delete the directory to start over.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.results.provenance import library_versions
from harness.run.spec import WorkerSpec

CACHE_VERSION = 2  # 2: entries keep the HLO text (version-1 entries had none)
LIBRARIES = ("jax", "jaxlib", "flax", "libtpu", "jax-cuda12-plugin", "jax-cuda12-pjrt")
_ROOT = Path(__file__).resolve().parents[2]
# Harness code that decides how a stage is compiled and how its program is read (files or folders).
CODE_FILES = ("harness/run/jax_stage.py", "harness/metrics", "harness/targets.py", "harness/run/compile_cache.py")


def _versions() -> dict[str, str | None]:
    return library_versions(LIBRARIES)


@functools.cache
def code_hash(root: Path = _ROOT) -> str:
    """sha256 over the model package and :data:`CODE_FILES` (paths and contents, sorted)."""
    files = sorted((root / "ltx2").rglob("*.py"))
    for name in CODE_FILES:
        files += sorted((root / name).rglob("*.py")) if (root / name).is_dir() else [root / name]
    h = hashlib.sha256()
    for path in files:
        if path.exists():
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


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
    """A directory of ``<key>.json`` files holding static-metric dicts (and ``<key>.hlo.gz`` their programs)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            value = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: Mapping[str, Any]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=key, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(value, f, default=str)
        os.replace(tmp, self.path(key))

    def hlo_path(self, key: str) -> Path:
        return self.directory / f"{key}.hlo.gz"

    def get_hlo(self, key: str) -> str | None:
        """The entry's optimized HLO text, None if it has none or it cannot be read."""
        try:
            return gzip.decompress(self.hlo_path(key).read_bytes()).decode()
        except (OSError, EOFError, UnicodeDecodeError):
            return None

    def put_hlo(self, key: str, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=key, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(gzip.compress(text.encode(), compresslevel=6))
        os.replace(tmp, self.hlo_path(key))
