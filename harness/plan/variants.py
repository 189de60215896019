"""Variants: the explicit ``[[variants]]`` plus every point of the ``[matrix]``, checked against the model.

A matrix is a cartesian product of named axes minus the points that match any
``exclude`` entry (a partial assignment). Explicit variants and matrix points are
listed together (explicit first); a manifest with neither runs one ``base`` variant.

Expansion is where the model is asked what the TOML alone cannot say: the preset and
stage names exist, every config override is a valid field value (alone and together),
the mesh axes are ones the sharding strategies know, and the workload fits the latent
grid and divides over the mesh (:func:`ltx2.check_workload`). The model is asked through
:mod:`harness.model`, imported by the functions that ask it: importing this module, like reading a
manifest, loads neither the model nor JAX. :func:`load_sweep` reads a manifest and expands it once;
everything downstream takes the :class:`Sweep`.

Each variant gets its reference (the variant reports compare it with): its own ``reference``,
else ``[report] reference`` if that one runs the same preset and workload sizes, else the first
variant before it that does, else none; a name that is no variant is an error naming the key.

Each variant gets a stable id: a short sha256 of the canonical JSON of its resolved
settings (preset, merged config overrides, target with the mesh resolved and its compiler
options, workload).
Names, declaration order, key order and the manifest file do not enter the id, so
the same settings have the same id in any manifest; ``target.mode`` and ``[run]``
don't either (they change how a variant is measured, not what it is).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import testing
from harness.catalogue import split_tolerance_key
from harness.plan import manifest as mf
from harness.plan.overrides import PRESET_KEY, RULES_PREFIX, SETTING_PREFIXES
from harness.plan.toml import Invalid, KeyPath, type_name

if TYPE_CHECKING:
    from harness.model import PipelineConfig, WorkloadError

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


def load_sweep(path: str | Path) -> Sweep:
    """Read, validate and expand a manifest; any problem raises :class:`~harness.plan.manifest.ManifestError`."""
    manifest = mf.load_manifest(path)
    return Sweep(manifest, expand(manifest))


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


# --------------------------------------------------------------------------- resolution


def _reason(e: BaseException) -> str:
    return str(e.args[0]) if e.args else str(e)


def _section(m: mf.Manifest, section: str, overrides: Mapping[str, Any], where: KeyPath, parser: Any) -> Any:
    raw = dict(m.raw.get(section, {}))
    prefix = section + "."
    mine = {k[len(prefix) :]: v for k, v in overrides.items() if k.startswith(prefix)}
    raw.update(mine)
    try:
        return parser(raw)
    except Invalid as e:
        head = e.path[0] if e.path else None
        if head in mine:
            raise m.error(where + (prefix + str(head),) + e.path[1:], e.reason) from None
        raise m.error((section,) + e.path, e.reason) from None


def _workload(raw: Mapping[str, Any]) -> mf.Workload:
    """The workload section, its stages checked against the model's stage names."""
    from harness import model

    wl = mf.parse_workload(raw)
    for i, stage in enumerate(wl.stages):
        try:
            model.check_stage(stage)
        except ValueError as e:
            raise Invalid(("stages", i), str(e)) from None
    return wl


def _preset(m: mf.Manifest, overrides: Mapping[str, Any], where: KeyPath) -> str:
    from harness import model

    preset = overrides.get(PRESET_KEY, m.model.preset)
    path = where + (PRESET_KEY,) if PRESET_KEY in overrides else ("model", "preset")
    try:
        if not isinstance(preset, str):
            raise ValueError(f"expected a string, got {type_name(preset)} ({preset!r})")
        return model.check_preset(preset)
    except ValueError as e:
        raise m.error(path, str(e)) from None


def _config(
    m: mf.Manifest, preset: str, overrides: Mapping[str, Any], where: KeyPath
) -> tuple[dict[str, Any], PipelineConfig | None]:
    """The merged config overrides, normalised, and the config they build (None for test presets)."""
    from harness import model

    own = {k: v for k, v in overrides.items() if k != PRESET_KEY and not k.startswith(SETTING_PREFIXES)}
    merged = {**m.model.overrides, **own}
    out = {}
    for key, value in merged.items():
        path = where + (key,) if key in own else ("model", "overrides", key)
        try:
            out[key] = model.check_override(preset, key, value)
        except (KeyError, TypeError, ValueError) as e:
            raise m.error(path, _reason(e)) from None
    if testing.is_test_preset(preset):
        return out, None
    try:  # fields that are valid alone but not together
        return out, model.build_config(preset, out)
    except (KeyError, TypeError, ValueError) as e:
        raise m.error(where if own else ("model", "overrides"), f"invalid config: {_reason(e)}") from None


def _check_with_model(
    m: mf.Manifest,
    cfg: PipelineConfig,
    target: mf.Target,
    wl: mf.Workload,
    overrides: Mapping[str, Any],
    where: KeyPath,
) -> None:
    """What only the model can say: mesh axis vocabulary, workload sizes vs. the latent grid and mesh."""
    from harness import model

    unknown = model.unknown_mesh_axes([a for a, _ in target.mesh])
    if unknown:
        path = where + ("target.mesh",) if "target.mesh" in overrides else ("target", "mesh")
        raise m.error(path, f"unknown mesh axes {unknown} (known: {model.known_mesh_axes()})")
    try:
        model.check_sizes(cfg, wl, target.mesh_shape)
    except model.WorkloadError as e:
        raise m.error(_blame(overrides, where, e), str(e)) from None


def _blame(overrides: Mapping[str, Any], where: KeyPath, e: WorkloadError) -> KeyPath:
    """The setting a workload error is about: the variant's own override of a field at fault (or, for a
    dim that does not divide its shards, of the mesh or a strategy), else the [workload] field."""
    fields = {f"workload.{f}" for f in e.fields}
    for key in overrides:
        if key in fields or (
            e.sharded and (key == "target.mesh" or key.endswith(".sharding") or key.startswith(RULES_PREFIX))
        ):
            return where + (key,)
    return ("workload", e.fields[0]) if e.fields else ("workload",)


def resolve(
    m: mf.Manifest, name: str, overrides: Mapping[str, Any], where: KeyPath = (), description: str = ""
) -> Variant:
    """One variant's settings: manifest sections with the variant's overrides applied, validated."""
    preset = _preset(m, overrides, where)
    target = _section(m, "target", overrides, where, mf.parse_target)
    wl = _section(m, "workload", overrides, where, _workload)
    config, cfg = _config(m, preset, overrides, where)
    if cfg is not None:
        _check_with_model(m, cfg, target, wl, overrides, where)
    settings = resolved_settings(preset, config, target, wl)
    return Variant(name, dict(overrides), variant_id(settings), preset, config, target, wl, description, where)


def _check_tolerance_stages(m: mf.Manifest) -> None:
    """A stage-qualified ``[gate] tolerances`` key names a stage of the model."""
    from harness import model

    for key in m.gate.tolerances:
        stage, _ = split_tolerance_key(key)
        if stage is None:
            continue
        try:
            model.check_stage(stage)
        except ValueError as e:
            raise m.error(("gate", "tolerances", key), str(e)) from None


def expand(m: mf.Manifest) -> tuple[Variant, ...]:
    """All variants of a manifest, validated; duplicate names or settings are errors."""
    _preset(m, {}, ())  # the [model] section itself, even when every variant overrides the preset
    _check_tolerance_stages(m)
    points: list[tuple[str, dict[str, Any], KeyPath, str]] = [
        (v.name, dict(v.overrides), ("variants", i, "overrides"), v.description) for i, v in enumerate(m.variants)
    ]
    if m.matrix is not None:
        in_matrix = matrix_points(m.matrix)
        if not in_matrix:
            raise m.error(("matrix", "exclude"), "excludes every point of the matrix: nothing of it would run")
        points += [(name, ov, ("matrix",), "") for name, ov in in_matrix]
    if not points:
        points = [("base", {}, (), "")]
    variants: list[Variant] = []
    by_name: dict[str, Variant] = {}
    by_id: dict[str, Variant] = {}
    for name, overrides, where, description in points:
        v = resolve(m, name, overrides, where, description)
        if name in by_name:
            raise m.error(where, f"duplicate variant name {name!r}")
        if v.id in by_id:
            raise m.error(where, f"variant {name!r} resolves to the same settings as {by_id[v.id].name!r} (id {v.id})")
        by_name[name], by_id[v.id] = v, v
        variants.append(v)
    return references(m, variants)


def comparable(a: Variant, b: Variant) -> bool:
    """Same model and workload sizes (the stages run may differ): a speedup between them means something."""

    def sizes(v: Variant) -> dict[str, Any]:
        return {k: x for k, x in v.workload.to_dict().items() if k != "stages"}

    return a.preset == b.preset and sizes(a) == sizes(b)


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
