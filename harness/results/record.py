"""The result record: one self-describing, versioned JSON object per variant run, typed.

A :class:`Record` is what a run leaves behind (``record_version`` 2)::

    record_version  2
    sweep_id        "cpu"                      -> reports/<sweep_id>/results.jsonl
    manifest        {path, sha256, reference}   reference: the manifest's published [reference] table
    variant         {name, id, overrides, description, reference}   reference: the variant it is
                    compared with
    config          {preset, overrides, resolved, workload, run}
                    resolved: the full ltx2 config after overrides (null if it never got built)
    target          {platform, mode, mode_used, mesh, topology, devices, compiler_options}
    machine         {hostname, cpu, cpu_count, os, python, backend, device_kind, device_count}
    versions        {jax, jaxlib, flax, torch, numpy}      (null where not installed)
    git             {commit, dirty}
    started_at, finished_at   ISO-8601 UTC;  duration_s
    status          "ok" | "failed" | "timeout" | "crashed"
    error           text (tail of stderr for crashes) or null
    stages          {<stage>: {status, error, notes, static, measured, trace, phases_s, predicted}}
                    the families (static ... predicted) as :mod:`harness.families` declares them;
                    predicted null where nothing was compiled or the simulation failed
    notes           [...]
    artifacts       {log, traces: {<stage>: dir}}

Every key above is written, null where it has no value; keys a reader does not know are kept
(``extra``), so reading and writing a record loses nothing. This module and :mod:`harness.families`
are the only code that knows the JSON form. Reading always goes through :func:`parse`: an older
record is brought up to date by :func:`upgrade` (one step per version in :data:`UPGRADES`; 1 left out
the keys added after it where they had no value), a newer one is a :class:`NewerRecordError`; then
:func:`check_shape` checks the keys above with their JSON types and statuses, so a JSON object that
only looks like a record is a :class:`RecordError` here, not a ``KeyError`` downstream.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.families import Family, Git, Machine, Measured, Predicted, Static, Trace, Versions, read
from harness.plan.manifest import Manifest, Run
from harness.plan.reference import Reference
from harness.plan.variants import Variant
from harness.vocabulary import StageStatus, Status

RECORD_VERSION = 2
STATUSES: tuple[str, ...] = tuple(Status)
STAGE_STATUSES: tuple[str, ...] = tuple(StageStatus)
DOES_NOT_FIT = StageStatus.DOES_NOT_FIT


def _with_keys(obj: Any, keys: tuple[str, ...]) -> Any:
    """``obj`` with each of ``keys`` it lacks as null (anything but an object as it is: the shape check names it)."""
    return {**dict.fromkeys(keys), **obj} if isinstance(obj, Mapping) else obj


def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 1 left out the keys added after it where they had no value; version 2 writes them as null."""
    keys = {"manifest": ("reference",), "variant": ("reference",), "target": ("mode_used", "compiler_options")}
    out = {**raw, "record_version": 2, **{k: _with_keys(raw[k], v) for k, v in keys.items() if k in raw}}
    if isinstance(stages := raw.get("stages"), Mapping):
        out["stages"] = {n: _with_keys(e, ("phases_s", "predicted")) for n, e in stages.items()}
    return out


# record_version n -> a function turning a version-n record (a JSON object) into version n + 1.
UPGRADES: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


class RecordError(ValueError):
    """A record (or results file) that cannot be read."""


class NewerRecordError(RecordError):
    """A record written by a newer harness (a higher ``record_version``): valid, but not readable here."""


def upgrade(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A record as a JSON object of the current :data:`RECORD_VERSION`, whatever version it was written at."""
    out = dict(raw)
    version = out.get("record_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= RECORD_VERSION:
        error = NewerRecordError if isinstance(version, int) and version > RECORD_VERSION else RecordError
        raise error(f"record_version {version!r} is not readable by this harness (reads <= {RECORD_VERSION})")
    while version < RECORD_VERSION:
        out = UPGRADES[version](out)
        if out.get("record_version") != version + 1:
            raise RecordError(f"the upgrade from record_version {version} did not produce version {version + 1}")
        version += 1
    return out


_STR, _NUM, _OBJ, _LIST, _NONE = (str,), (int, float), (dict,), (list,), (type(None),)
# Top-level key -> (JSON types allowed, the keys its object must have with their types).
_SHAPE: dict[str, tuple[tuple[type, ...], dict[str, tuple[type, ...]]]] = {
    "sweep_id": (_STR, {}),
    "manifest": (_OBJ, {"path": _STR, "sha256": _STR}),
    "variant": (_OBJ, {"name": _STR, "id": _STR}),
    "config": (_OBJ, {"preset": _STR, "overrides": _OBJ, "resolved": _OBJ + _NONE, "workload": _OBJ, "run": _OBJ}),
    "target": (_OBJ, {"platform": _STR, "mode": _STR, "mesh": _OBJ}),
    "machine": (_OBJ, {}),
    "versions": (_OBJ, {}),
    "git": (_OBJ, {}),
    "started_at": (_STR, {}),
    "finished_at": (_STR, {}),
    "duration_s": (_NUM, {}),
    "status": (_STR, {}),
    "error": (_STR + _NONE, {}),
    "stages": (_OBJ, {}),
}
_OPTIONAL = {"notes": _LIST, "artifacts": _OBJ}
_STAGE_SHAPE = {
    "status": _STR,
    "error": _STR + _NONE,
    "notes": _LIST,
    "static": _OBJ + _NONE,
    "measured": _OBJ + _NONE,
    "trace": _OBJ + _NONE,
    "phases_s": _OBJ + _NONE,
    "predicted": _OBJ + _NONE,
}


_JSON_NAMES = {str: "a string", int: "a number", float: "a number", dict: "an object", list: "an array"}


def _kind(value: Any, types: tuple[type, ...], where: str) -> None:
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        names = " or ".join(dict.fromkeys(_JSON_NAMES.get(t, "null") for t in types))
        raise RecordError(f"{where}: expected {names}, got {type(value).__name__} ({str(value)[:40]!r})")


def check_shape(raw: Mapping[str, Any]) -> None:
    """A current-version record's JSON object has every key with its JSON type and known statuses;
    :class:`RecordError` names the first that does not."""
    missing = [k for k in _SHAPE if k not in raw]
    if missing:
        raise RecordError(f"missing {', '.join(missing)}")
    for key, (types, inner) in _SHAPE.items():
        _kind(raw[key], types, key)
        for sub, sub_types in inner.items():
            if sub not in raw[key]:
                raise RecordError(f"{key}: missing {sub}")
            _kind(raw[key][sub], sub_types, f"{key}.{sub}")
    for key, types in _OPTIONAL.items():
        if key in raw:
            _kind(raw[key], types, key)
    if raw["status"] not in STATUSES:
        raise RecordError(f"status: {raw['status']!r} is none of {', '.join(STATUSES)}")
    for name, entry in raw["stages"].items():
        _kind(entry, _OBJ, f"stages.{name}")
        if "status" not in entry:
            raise RecordError(f"stages.{name}: missing status")
        for key, types in _STAGE_SHAPE.items():
            if key in entry:
                _kind(entry[key], types, f"stages.{name}.{key}")
        if entry["status"] not in STAGE_STATUSES:
            raise RecordError(f"stages.{name}.status: {entry['status']!r} is none of {', '.join(STAGE_STATUSES)}")


def _known(cls: type, raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the fields of ``cls`` present in ``raw``, the rest)."""
    names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
    return {k: v for k, v in raw.items() if k in names}, {k: v for k, v in raw.items() if k not in names}


@dataclass(frozen=True)
class ManifestRef:
    """The manifest a record was run from, and what of it the report shows: its published
    ``[reference]`` table (:meth:`harness.plan.reference.Reference.to_dict`; None where the manifest
    has none)."""

    path: str
    sha256: str
    reference: Mapping[str, Any] | None = None

    def published(self) -> Reference | None:
        """The ``[reference]`` table, typed (None where the record carries none)."""
        return Reference.from_dict(self.reference) if self.reference else None


@dataclass(frozen=True)
class VariantRef:
    name: str
    id: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    reference: str | None = None


@dataclass(frozen=True)
class RunConfig:
    """What ran: preset and overrides as declared, the config they resolved to, workload and run settings."""

    preset: str
    overrides: Mapping[str, Any]
    resolved: Mapping[str, Any] | None
    workload: Mapping[str, Any]
    run: Mapping[str, Any]


@dataclass(frozen=True)
class TargetInfo:
    """The manifest's target (mesh resolved) and the mode the worker used."""

    platform: str
    mode: str
    mesh: Mapping[str, int]
    topology: str | None
    devices: int | None
    mode_used: str | None = None
    compiler_options: Mapping[str, Any] | None = None  # only where the variant sets some


@dataclass(frozen=True)
class StageEntry:
    """One stage of a run: its verdict and the metric families the manifest asked for."""

    status: str
    error: str | None = None
    notes: tuple[str, ...] = ()
    static: Static | None = None  # each family given as its JSON object, read (harness/families/__init__.py)
    measured: Measured | None = None
    trace: Trace | None = None
    phases_s: Mapping[str, float] | None = None
    predicted: Predicted | None = None  # likewise
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "static", read(Static, self.static))
        object.__setattr__(self, "measured", read(Measured, self.measured))
        object.__setattr__(self, "trace", read(Trace, self.trace))
        object.__setattr__(self, "predicted", read(Predicted, self.predicted))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StageEntry:
        known, extra = _known(cls, raw)
        return cls(**{**known, "notes": tuple(known.get("notes") or ())}, extra=extra)

    @property
    def verdict(self) -> str:
        """The status reports and the gate read: ``does-not-fit`` also for a compile-only stage whose
        on-target analysis says its memory exceeds the device's (records written before the worker
        said so there have ``status`` "ok" and the fit only in ``static.target``)."""
        target = self.static.target if self.static is not None else None
        if self.status == "ok" and target is not None and target.fits is False:
            return DOES_NOT_FIT
        return self.status

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out = {k: v.to_dict() if isinstance(v, Family) else v for k, v in out.items()}
        return {**out, "notes": list(self.notes), **self.extra}


@dataclass(frozen=True)
class Artifacts:
    log: str
    traces: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Record:
    """One variant run (see the module docstring for the JSON form)."""

    sweep_id: str
    manifest: ManifestRef
    variant: VariantRef
    config: RunConfig
    target: TargetInfo
    machine: Machine
    versions: Versions
    git: Git
    started_at: str
    finished_at: str
    duration_s: float
    status: str
    error: str | None
    stages: Mapping[str, StageEntry]
    notes: tuple[str, ...] = ()
    artifacts: Artifacts = field(default_factory=lambda: Artifacts(""))
    record_version: int = RECORD_VERSION
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "machine", read(Machine, self.machine))
        object.__setattr__(self, "versions", read(Versions, self.versions))
        object.__setattr__(self, "git", read(Git, self.git))

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def commit(self) -> str | None:
        return self.git.commit

    @property
    def dirty(self) -> bool:
        return bool(self.git.dirty)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Record:
        """A record from its JSON object (upgraded to the current version first, then its shape checked)."""
        current = upgrade(raw)
        try:
            check_shape(current)
        except RecordError as e:
            raise RecordError(f"not a result record: {e}") from None
        known, extra = _known(cls, current)
        return cls(
            **{
                **known,
                "manifest": ManifestRef(**known["manifest"]),
                "variant": VariantRef(**known["variant"]),
                "config": RunConfig(**known["config"]),
                "target": TargetInfo(**known["target"]),
                "stages": {name: StageEntry.from_dict(e) for name, e in (known.get("stages") or {}).items()},
                "notes": tuple(known.get("notes") or ()),
                "artifacts": Artifacts(**known.get("artifacts", {"log": ""})),
            },
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, exactly as read (``from_dict(d).to_dict() == d`` for a current-version ``d``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        for name in ("manifest", "variant", "config", "target", "artifacts"):
            out[name] = {k: _plain(v) for k, v in dataclasses.asdict(out[name]).items()}
        out["stages"] = {name: e.to_dict() for name, e in self.stages.items()}
        for name in ("machine", "versions", "git"):
            out[name] = getattr(self, name).to_dict()
        return {**out, "notes": list(self.notes), **self.extra}

    def replace(self, **changes: Any) -> Record:
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------- building


@dataclass
class Outcome:
    """What one worker run produced: its verdict (or how it died), its ``out.json``, and when."""

    status: str
    error: str | None
    result: dict[str, Any]  # the worker's out.json: stages, notes, machine, mode_used, config_resolved
    duration_s: float
    started_at: str
    finished_at: str


def build_record(
    *,
    sweep_id: str,
    manifest: Manifest,
    variant: Variant,
    run: Run,
    outcome: Outcome,
    context: Mapping[str, Any],
    log_path: str | Path,
) -> Record:
    """The record of one variant run: the plan's settings, the worker's outcome, where it ran
    (``context``: the sweep's machine, versions and git; the worker adds what it saw of the devices)."""
    result = outcome.result
    stages = {name: StageEntry.from_dict(e) for name, e in (result.get("stages") or {}).items()}
    traces = {name: str(e.trace["log_dir"]) for name, e in stages.items() if e.trace and e.trace.get("log_dir")}
    target = variant.target.resolved()
    return Record(
        sweep_id=sweep_id,
        manifest=ManifestRef(
            str(manifest.path), manifest.sha256, manifest.reference.to_dict() if manifest.reference else None
        ),
        variant=VariantRef(variant.name, variant.id, dict(variant.overrides), variant.description, variant.reference),
        config=RunConfig(
            variant.preset,
            dict(variant.config_overrides),
            result.get("config_resolved"),
            variant.workload.to_dict(),
            run.to_dict(),
        ),
        target=TargetInfo(
            target.platform,
            target.mode,
            dict(target.mesh),
            target.topology,
            target.devices,
            result.get("mode_used"),
            dict(target.compiler_options) or None,
        ),
        machine=Machine.from_dict({**context["machine"], **(result.get("machine") or {})}),
        versions=Versions.from_dict(context["versions"]),
        git=Git.from_dict(context["git"]),
        started_at=outcome.started_at,
        finished_at=outcome.finished_at,
        duration_s=outcome.duration_s,
        status=outcome.status,
        error=outcome.error,
        stages=stages,
        notes=tuple(result.get("notes") or ()),
        artifacts=Artifacts(str(log_path), traces),
    )


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def parse(raw: Any, where: str) -> Record:
    """The one way a record is read: a JSON object -> :class:`Record`; ``where`` names it in errors."""
    if not isinstance(raw, Mapping):
        raise RecordError(f"{where}: not a JSON object")
    try:
        return Record.from_dict(raw)
    except NewerRecordError as e:
        raise NewerRecordError(f"{where}: {e}") from None
    except RecordError as e:
        raise RecordError(f"{where}: {e}") from None
    except (KeyError, TypeError) as e:  # a shape check_shape does not cover (e.g. an unknown key in manifest)
        raise RecordError(f"{where}: not a result record ({type(e).__name__}: {e})") from None
