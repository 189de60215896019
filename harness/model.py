"""The model as the harness sees it: a variant's :class:`ltx2.PipelineConfig` (a preset with a
manifest's dotted overrides applied) and the checks expanding a manifest asks of the model (stage
names, mesh axes, workload sizes against the latent grid and the mesh). Outside ``run/`` and
``search/``, the one module that imports ``ltx2``: reading a manifest (:mod:`harness.plan`) loads
neither it nor JAX; expanding one (:func:`harness.expansion.expand`) imports this module then.

``transformer.sharding = "context"`` replaces one field of one component config; each
replace re-validates that component, and :func:`build_config` checks the components together
(linked fields such as latent channels must still agree). Test presets
(:mod:`harness.testing`) take only ``test.*`` keys and have no config.

``sharding.rules.<logical> = [mesh axes]`` (``[]``: replicated) replaces one rule of the
transformer's strategy: the rules together derive a strategy registered under a name that spells
them (``naive+mlp_in=-``), which every component naming the transformer's strategy then names
(:meth:`ltx2.PipelineConfig.with_sharding_rules`). They are config overrides like any other, so
they enter the variant id, the compile-cache key and the record.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from harness import testing
from harness.plan.manifest import Workload
from harness.plan.overrides import RULES_PREFIX
from ltx2 import (
    MESH_AXES,
    PRESETS,
    STAGES,
    PipelineConfig,
    check_workload,
    strategy_names,
    with_overrides,
)
from ltx2 import Workload as ModelWorkload
from ltx2 import WorkloadError as WorkloadError  # expansion catches it through this module


def rules_of(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The ``sharding.rules.*`` overrides as ``logical -> mesh axes``."""
    return {k.removeprefix(RULES_PREFIX): v for k, v in overrides.items() if k.startswith(RULES_PREFIX)}


def check_rule(key: str, value: Any) -> list[str]:
    """One ``sharding.rules.<logical>`` override checked (logical name, mesh axes, type): its mesh axes."""
    logical = key.removeprefix(RULES_PREFIX)
    if not isinstance(value, list | str):
        raise TypeError(f"a rule is a list of mesh axes ([] replicates) or one axis name, got {value!r}")
    return list(with_overrides("replicated", {logical: value}).rules[logical])


def preset_names() -> list[str]:
    """The model presets (``ltx2.PRESETS``, the constructors of ``PipelineConfig``)."""
    return list(PRESETS)


def check_preset(preset: str) -> str:
    if not testing.is_test_preset(preset) and preset not in PRESETS:
        raise ValueError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    return preset


@functools.cache
def base_config(preset: str) -> PipelineConfig:
    """The preset's config (built once per process: configs are frozen)."""
    return PipelineConfig.preset(preset)


def components(cfg: PipelineConfig) -> dict[str, Any]:
    """Component configs by override prefix (``transformer``, ``video_vae``, ``pipeline``...)."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def _coerce(current: Any, value: Any) -> Any:
    """A TOML value converted to the type of the field it replaces."""
    if isinstance(current, bool) or isinstance(value, bool):
        if not (isinstance(current, bool) and isinstance(value, bool)):
            raise TypeError(f"expected {type(current).__name__}, got {type(value).__name__} ({value!r})")
        return value
    if isinstance(current, int | float) and isinstance(value, int | float):
        if isinstance(current, int) and not isinstance(value, int):
            raise TypeError(f"expected int, got {type(value).__name__} ({value!r})")
        return type(current)(value)
    if isinstance(current, tuple) and isinstance(value, list):
        return tuple(value)
    if current is None or isinstance(value, type(current)):
        return value
    if isinstance(value, str) and not isinstance(current, str | int | float | tuple | list):
        return value  # dtype-like fields accept their name; the config validates it
    raise TypeError(f"expected {type(current).__name__}, got {type(value).__name__} ({value!r})")


def _replace_path(obj: Any, parts: list[str], value: Any, key: str) -> Any:
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise KeyError(f"unknown config key {key!r}: {type(obj).__name__} has no fields")
    names = [f.name for f in dataclasses.fields(obj)]
    name = parts[0]
    if name not in names:
        raise KeyError(f"unknown config key {key!r}: {type(obj).__name__} has no field {name!r}")
    current = getattr(obj, name)
    new = _coerce(current, value) if len(parts) == 1 else _replace_path(current, parts[1:], value, key)
    return dataclasses.replace(obj, **{name: new})


def _check_strategy(key: str, value: Any) -> None:
    if key.rsplit(".", 1)[-1] == "sharding" and value not in strategy_names():
        raise ValueError(f"unknown sharding strategy {value!r} (known: {', '.join(strategy_names())})")


def apply_overrides(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Component configs with dotted overrides applied (each replace re-validates the component)."""
    out = dict(config)
    for key, value in overrides.items():
        if key.startswith(RULES_PREFIX):
            continue  # applied to the built config (build_config)
        component, *rest = key.split(".")
        if component not in out or not rest:
            raise KeyError(f"unknown config key {key!r} (components: {', '.join(out)})")
        _check_strategy(key, value)
        out[component] = _replace_path(out[component], rest, value, key)
    return out


def check_override(preset: str, key: str, value: Any) -> Any:
    """Validate one config override against the preset; returns the value normalised (e.g. int -> float)."""
    if testing.is_test_preset(preset):
        testing.check_override(key)
        return value
    if key.startswith(RULES_PREFIX):
        return check_rule(key, value)
    if key.split(".", 1)[0] == "sharding":
        raise KeyError(f"unknown key {key!r}: sharding rules are written {RULES_PREFIX}<logical axis> = [mesh axes]")
    config = apply_overrides(components(base_config(preset)), {key: value})
    component, *rest = key.split(".")
    obj = config[component]
    for part in rest:
        obj = getattr(obj, part)
    return list(obj) if isinstance(obj, tuple) else obj


def build_config(preset: str, overrides: Mapping[str, Any]) -> PipelineConfig:
    """The preset's config with overrides applied, its components checked together, and the
    ``sharding.rules.*`` overrides applied to the transformer's strategy (registering the derived one)."""
    cfg = PipelineConfig(**apply_overrides(components(base_config(preset)), overrides))
    return cfg.with_sharding_rules(rules_of(overrides))


def config_dict(cfg: PipelineConfig) -> dict[str, Any]:
    """JSON-friendly resolved config for the record (dtypes and other objects as strings)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        return v if isinstance(v, bool | int | float | str) or v is None else str(v)

    return {name: plain(c) for name, c in components(cfg).items()}


def model_workload(wl: Workload) -> ModelWorkload:
    """The manifest's workload as the model's :class:`ltx2.Workload` (its size; the stage list stays here)."""
    return ModelWorkload(**{f.name: getattr(wl, f.name) for f in dataclasses.fields(ModelWorkload)})


# --------------------------------------------------------------------------- what expansion asks


def check_stage(stage: str) -> None:
    """A ``[workload] stages`` entry (or a stage-qualified tolerance key) names a model stage."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r} (known: {', '.join(STAGES)})")


def unknown_mesh_axes(axes: list[str]) -> list[str]:
    """Mesh axis names no sharding strategy knows (``ltx2.MESH_AXES``)."""
    return [a for a in axes if a not in MESH_AXES]


def known_mesh_axes() -> str:
    return ", ".join(MESH_AXES)


def check_sizes(cfg: PipelineConfig, wl: Workload, mesh_shape: Mapping[str, int]) -> None:
    """The workload's sizes fit the latent grid and divide over the mesh (:func:`ltx2.check_workload`);
    raises :class:`ltx2.WorkloadError` (its ``fields`` and ``sharded`` say what is at fault)."""
    check_workload(cfg, model_workload(wl), dict(mesh_shape), wl.stages)
