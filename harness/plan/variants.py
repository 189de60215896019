"""Variants: what expansion (:mod:`harness.expansion`) makes of a manifest, model-free.

A matrix is a cartesian product of named axes minus the points that match any ``exclude`` entry (a
partial assignment). Explicit variants and matrix points are listed together (explicit first); a
manifest with neither runs one ``base`` variant. Expanding asks the model, so it sits above
:mod:`harness.model` in :mod:`harness.expansion`; nothing here imports the model.

Each variant gets its reference (the variant reports compare it with): its own ``reference``,
else ``[report] reference`` if that one runs the same preset and workload sizes and a stage in
common, else the first variant before it that does, else none; a name that is no variant is an
error naming the key.

Each variant gets a stable id: a short sha256 of the canonical JSON of its resolved settings
(preset, merged config overrides, target with the mesh resolved and its compiler options,
workload). Names, order, key order, the manifest file, ``target.mode`` and ``[run]`` do not enter
it (they change how a variant is measured, not what it is), so the same settings have the same id
in any manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.plan import manifest as mf
from harness.plan.toml import KeyPath

ID_LENGTH = 12


@dataclass(frozen=True)
class Variant:
    """One runnable point: its own overrides as declared and the settings they resolve to."""

    name: str
    overrides: Mapping[str, Any]
    id: str
    preset: str
    config_overrides: Mapping[str, Any]
    target: mf.Target
    workload: mf.Workload
    description: str = ""
    origin: KeyPath = field(default=(), compare=False)
    reference: str | None = None  # the variant reports compare this one with (not part of the id)

    def settings(self) -> dict[str, Any]:
        return resolved_settings(self.preset, self.config_overrides, self.target, self.workload)


@dataclass(frozen=True)
class Sweep:
    """A manifest and its variants, expanded and checked once."""

    manifest: mf.Manifest
    variants: tuple[Variant, ...]

    @property
    def name(self) -> str:
        return self.manifest.name


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def resolved_settings(
    preset: str, config_overrides: Mapping[str, Any], target: mf.Target, wl: mf.Workload
) -> dict[str, Any]:
    """What a variant is, in canonical form: the input of its id."""
    mesh = target.mesh_shape
    return {
        "preset": preset,
        "config": dict(sorted(config_overrides.items())),
        "target": {
            "platform": target.platform,
            "mesh": [[axis, size] for axis, size in mesh.items()],  # order matters: device layout
            "topology": target.topology,
            "devices": target.devices,
            # only when set: one process (the default) keeps the ids variants had before processes existed
            **({"processes": target.processes} if target.processes != 1 else {}),
            # likewise only when set: what the compiler is told changes the program
            **({"compiler_options": dict(target.compiler_options)} if target.compiler_options else {}),
        },
        "workload": wl.to_dict(),
    }


def variant_id(settings: Mapping[str, Any]) -> str:
    return hashlib.sha256(canonical_json(settings).encode()).hexdigest()[:ID_LENGTH]


# --------------------------------------------------------------------------- matrix


def _label(key: str, keys: Sequence[str]) -> str:
    short = key.rsplit(".", 1)[-1]
    return short if sum(k.rsplit(".", 1)[-1] == short for k in keys) == 1 else key


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "x".join(f"{k}{v}" for k, v in value.items())
    return canonical_json(value)


def _excluded(point: Mapping[str, Any], excludes: Iterable[Mapping[str, Any]]) -> bool:
    return any(all(canonical_json(point[k]) == canonical_json(v) for k, v in ex.items()) for ex in excludes)


def matrix_points(matrix: mf.Matrix) -> list[tuple[str, dict[str, Any]]]:
    """(name, overrides) for every point of the product that no exclude matches."""
    keys = [k for k, _ in matrix.axes]
    points = []
    for combo in itertools.product(*(values for _, values in matrix.axes)):
        point = dict(zip(keys, combo, strict=True))
        if not _excluded(point, matrix.exclude):
            name = ",".join(f"{_label(k, keys)}={_show(v)}" for k, v in point.items())
            points.append((name, point))
    return points


def comparable(a: Variant, b: Variant) -> bool:
    """Same model and workload sizes, and at least one stage both run (the others may differ): a speedup
    or an accuracy between them means something."""

    def sizes(v: Variant) -> dict[str, Any]:
        return {k: x for k, x in v.workload.to_dict().items() if k != "stages"}

    shared = set(a.workload.stages) & set(b.workload.stages)
    return a.preset == b.preset and sizes(a) == sizes(b) and bool(shared)


def references(m: mf.Manifest, variants: Sequence[Variant]) -> tuple[Variant, ...]:
    """Each variant with its reference resolved (see the module docstring); unknown names are errors."""
    names = [v.name for v in variants]
    known = ", ".join(names)
    default = m.report.reference
    if default is not None and default not in names:
        raise m.error(("report", "reference"), f"no variant named {default!r} (variants: {known})")
    declared = {spec.name: (i, spec.reference) for i, spec in enumerate(m.variants)}
    out = []
    for k, v in enumerate(variants):
        i, ref = declared.get(v.name, (-1, None))
        if ref is not None and ref not in names:
            raise m.error(("variants", i, "reference"), f"no variant named {ref!r} (variants: {known})")
        if ref is None and default is not None and default != v.name and comparable(v, variants[names.index(default)]):
            ref = default
        if ref is None:
            ref = next((w.name for w in variants[:k] if comparable(v, w)), None)
        out.append(dataclasses.replace(v, reference=ref))
    return tuple(out)


def select(variants: Sequence[Variant], wanted: Sequence[str]) -> list[Variant]:
    """Variants whose name equals, or whose id starts with, one of ``wanted`` (all if empty)."""
    if not wanted:
        return list(variants)
    chosen = [v for v in variants if any(w == v.name or v.id.startswith(w) for w in wanted)]
    missing = [w for w in wanted if not any(w == v.name or v.id.startswith(w) for v in variants)]
    if missing:
        known = ", ".join(f"{v.name} ({v.id})" for v in variants)
        raise KeyError(f"no variant named or with an id starting with {', '.join(missing)} (known: {known})")
    return chosen
