"""Gate baselines: ``reports/baselines/<name>.json``, committed, one per backend and topology.

CPU, TPU and GPU compile the same program differently (CPU upcasts bf16 collectives,
has no reduce-scatter, reports memory differently), so a baseline only ever
compares with runs of the same *backend key*: the target platform and its topology
(TPU slice name) or device count, e.g. ``cpu-8dev`` or ``tpu-v6e_2x4``; a manifest whose
variants target several (``target.topology`` per variant) has their keys joined by ``+``
(``tpu-tpu7x_2x2x1+tpu-v6e_2x4``). The default name is ``<manifest stem>-<backend key>``;
the file records its key and the gate refuses a baseline whose key differs from the run's.

A baseline file is the records of one sweep, unchanged (raw samples included, so
the gate can test timings), wrapped with where they came from::

    {"baseline_version": 1, "name": ..., "key": ..., "source": <results file>,
     "git": {...}, "machine": {...}, "records": [...]}

A manifest may instead name a results file (``[gate] baseline = "....jsonl"``): its
records are the baseline as they are, and the key is read from them.

Baselines are written only on purpose (``harness baseline update``), only from a
results file whose variants all succeeded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.plan.manifest import Manifest, Target
from harness.results import store as rec
from harness.results.record import Record, RecordError, parse
from harness.results.storage import write_atomic

BASELINE_VERSION = 1
BASELINES_DIR = Path("reports/baselines")


class BaselineError(ValueError):
    """A baseline that cannot be written or read (the gate exits 2 on it)."""


def backend_key(platform: str, topology: str | None, devices: int | None) -> str:
    where = topology if topology else (f"{devices}dev" if devices else "anydev")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{platform}-{where}")


def target_key(target: Target) -> str:
    return backend_key(target.platform, target.topology, target.devices)


def record_key(record: Record) -> str:
    t = record.target
    return backend_key(t.platform, t.topology, t.devices)


def joined_key(keys: Iterable[str]) -> str:
    """The key of a baseline whose variants target several backends (a variant overriding
    ``target.topology``): their keys, sorted, joined by ``+``. Variants are still compared by
    name, each with its own target (its id holds it)."""
    return "+".join(sorted(set(keys)))


def sweep_key(variants: Iterable[Any]) -> str:
    """The backend key of a sweep's variants (``Variant.target`` each): what its baseline must have."""
    return joined_key(target_key(v.target) for v in variants)


def default_name(manifest_path: str | Path, key: str) -> str:
    return f"{Path(manifest_path).stem}-{key}"


def baseline_path(name: str, directory: str | Path = BASELINES_DIR) -> Path:
    return Path(directory) / f"{name}.json"


def path_for(manifest: Manifest, directory: str | Path = BASELINES_DIR) -> Path:
    """Where a manifest's baseline lives: ``[gate] baseline`` as a path (if it has a ``/`` or
    a ``.json``/``.jsonl`` suffix) or a name in ``directory``; else ``<stem>-<backend key>``."""
    named = manifest.gate.baseline
    if named and ("/" in named or named.endswith((".json", ".jsonl"))):
        return Path(named)
    return baseline_path(named or default_name(manifest.path, target_key(manifest.target)), directory)


@dataclass(frozen=True)
class Baseline:
    name: str
    key: str
    records: list[Record]
    source: str
    path: Path | None = None

    @property
    def commit(self) -> str | None:
        return self.records[0].commit if self.records else None


def build(records: Sequence[Record], *, name: str | None = None, source: str = "") -> dict[str, Any]:
    """The JSON object of a new baseline from the (latest) records of one sweep.

    Refuses failed variants (a baseline must be something the gate can compare
    with) and records of more than one backend key.
    """
    latest = list(rec.latest_by_variant(records).values())
    if not latest:
        raise BaselineError(f"{source or 'results'}: no records to make a baseline from")
    failed = [f"{r.variant.name} ({r.status})" for r in latest if not r.ok]
    if failed:
        raise BaselineError(f"{source or 'results'}: refusing to baseline failed variants: {', '.join(failed)}")
    key = joined_key(record_key(r) for r in latest)
    name = name or default_name(latest[0].manifest.path or latest[0].sweep_id, key)
    return {
        "baseline_version": BASELINE_VERSION,
        "name": name,
        "key": key,
        "source": source,
        "git": latest[0].git.to_dict(),
        "machine": dict(latest[0].machine),
        "records": [r.to_dict() for r in latest],
    }


def write(path: str | Path, baseline: Mapping[str, Any]) -> Path:
    """Write a baseline atomically: the wrapped JSON object, or bare records for a ``.jsonl`` path."""
    if Path(path).suffix == ".jsonl":
        text = "".join(json.dumps(r, sort_keys=True, allow_nan=True) + "\n" for r in baseline["records"])
    else:
        text = json.dumps(baseline, indent=1, sort_keys=True, allow_nan=True) + "\n"
    return write_atomic(path, text)


def load(path: str | Path) -> Baseline:
    path = Path(path)
    if not path.exists():
        raise BaselineError(
            f"no baseline at {path}; write one on purpose from a run you trust with "
            f"`python -m harness baseline update <results.jsonl> --out {path}`"
        )
    if path.suffix == ".jsonl":
        return _load_results_file(path)
    try:
        text = path.read_text()
    except (OSError, ValueError) as e:
        raise BaselineError(f"{path}: not a readable baseline: {e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        what = "cut short" if e.pos >= len(text.rstrip()) else "not JSON"
        raise BaselineError(
            f"{path}: not a readable baseline: {what} ({len(text)} bytes; {e}); restore it from git "
            f"(git checkout -- {path}) or write it again with `python -m harness baseline update`"
        ) from None
    version = data.get("baseline_version") if isinstance(data, dict) else None
    if version != BASELINE_VERSION:
        raise BaselineError(
            f"{path}: baseline_version {version!r} is not readable by this harness (reads {BASELINE_VERSION})"
        )
    raw = data.get("records")
    if not isinstance(raw, list) or not raw:
        raise BaselineError(f"{path}: baseline has no records")
    try:
        records = [parse(r, f"{path}: records[{i}]") for i, r in enumerate(raw)]
    except RecordError as e:
        raise BaselineError(str(e)) from None
    return Baseline(data.get("name", path.stem), data.get("key", ""), records, data.get("source", ""), path)


def _load_results_file(path: Path) -> Baseline:
    records = list(rec.latest_by_variant(rec.load_records(path)).values())
    if not records:
        raise BaselineError(f"{path}: baseline has no records")
    return Baseline(path.stem, joined_key(record_key(r) for r in records), records, str(path), path)


def load_records_any(path: str | Path) -> list[Record]:
    """Records from a results file (``.jsonl``), a sweep directory, or a baseline (``.json``)."""
    path = Path(path)
    if path.is_dir():
        path = path / rec.RESULTS_FILE
    if path.suffix == ".json":
        return load(path).records
    if not path.exists():
        raise BaselineError(f"no results file at {path}")
    return rec.load_records(path)
