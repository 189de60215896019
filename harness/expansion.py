"""Expansion: a manifest's variants resolved and checked against the model, the one place the plan
meets :mod:`harness.model` (above both in the import order: ``plan < model < expansion``).

The variants (:mod:`harness.plan.variants`) are where the model is asked what the TOML alone cannot
say: the preset and stage names exist, every config override is a valid field value (alone and
together), the mesh axes are ones the sharding strategies know, and the workload fits the latent
grid and divides over the mesh (:func:`ltx2.check_workload`). :func:`load_sweep` reads a manifest
and expands it once; everything downstream takes the :class:`~harness.plan.variants.Sweep`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import model, testing
from harness.catalogue import split_tolerance_key
from harness.model import PipelineConfig, WorkloadError
from harness.plan import manifest as mf
from harness.plan.overrides import PRESET_KEY, RULES_PREFIX, SETTING_PREFIXES
from harness.plan.toml import Invalid, KeyPath, type_name
from harness.plan.variants import Sweep, Variant, matrix_points, references, resolved_settings, variant_id


def load_sweep(path: str | Path) -> Sweep:
    """Read, validate and expand a manifest; any problem raises :class:`~harness.plan.manifest.ManifestError`."""
    manifest = mf.load_manifest(path)
    return Sweep(manifest, expand(manifest))


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
    wl = mf.parse_workload(raw)
    for i, stage in enumerate(wl.stages):
        try:
            model.check_stage(stage)
        except ValueError as e:
            raise Invalid(("stages", i), str(e)) from None
    return wl


def _preset(m: mf.Manifest, overrides: Mapping[str, Any], where: KeyPath) -> str:
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
    unknown = model.unknown_mesh_axes([a for a, _ in target.mesh])
    if unknown:
        path = where + ("target.mesh",) if "target.mesh" in overrides else ("target", "mesh")
        raise m.error(path, f"unknown mesh axes {unknown} (known: {model.known_mesh_axes()})")
    try:
        model.check_sizes(cfg, wl, target.mesh_shape)
    except WorkloadError as e:
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
