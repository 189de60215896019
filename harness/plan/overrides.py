"""What a manifest changes: the model's preset and config overrides, ``[[variants]]`` and the ``[matrix]``.

Parsed as written (flattened dotted overrides, origins kept for located errors);
:mod:`harness.plan.variants` expands them and asks the model about the keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.plan.toml import Invalid, KeyPath, canonical, check_keys, flatten_origins, get, type_name

# Override prefixes that address the manifest rather than the ltx2 config.
SETTING_PREFIXES = ("target.", "workload.")
PRESET_KEY = "model.preset"
# ``sharding.rules.<logical axis> = [mesh axes]``: one rule of the transformer's sharding strategy.
RULES_PREFIX = "sharding.rules."


@dataclass(frozen=True)
class Model:
    preset: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class VariantSpec:
    """One ``[[variants]]`` entry as written (flattened dotted overrides)."""

    name: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""
    reference: str | None = None  # the variant it is compared with


@dataclass(frozen=True)
class Matrix:
    """Named axes (override key -> values) and partial assignments to leave out."""

    axes: tuple[tuple[str, tuple[Any, ...]], ...]
    exclude: tuple[Mapping[str, Any], ...] = ()


def parse_variants(raw: Any, origins: dict[KeyPath, KeyPath]) -> tuple[VariantSpec, ...]:
    if not isinstance(raw, list):
        raise Invalid(("variants",), f"expected an array of tables ([[variants]]), got {type_name(raw)}")
    if not raw:
        raise Invalid(
            ("variants",),
            "is empty: declare [[variants]] tables, or leave the key out to run the "
            "manifest's own settings as one variant named 'base'",
        )
    specs: list[VariantSpec] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw):
        try:
            if not isinstance(entry, dict):
                raise Invalid((), f"expected a table, got {type_name(entry)}")
            check_keys(entry, ("name", "overrides", "description", "reference"))
            name = get(entry, "name", "str")
            if not name.strip():
                raise Invalid(("name",), "must not be empty")
            if name in seen:
                raise Invalid(("name",), f"duplicate variant name {name!r} (also variants[{seen[name]}])")
            seen[name] = i
            overrides = flatten_origins(get(entry, "overrides", "table", {}), ("variants", i, "overrides"), origins)
            reference = get(entry, "reference", "str", None)
            if reference == name:
                raise Invalid(("reference",), f"variant {name!r} cannot be its own reference")
            specs.append(VariantSpec(name, overrides, get(entry, "description", "str", ""), reference))
        except Invalid as e:
            raise Invalid(("variants", i) + e.path, e.reason) from None
    return tuple(specs)


def parse_matrix(raw: Any, origins: dict[KeyPath, KeyPath]) -> Matrix:
    if not isinstance(raw, dict):
        raise Invalid(("matrix",), f"expected a table, got {type_name(raw)}")
    raw = dict(raw)
    exclude_raw = raw.pop("exclude", [])
    axes = flatten_origins(raw, ("matrix",), origins)
    if not axes:
        raise Invalid(("matrix",), "needs at least one axis")
    for key, values in axes.items():
        if not isinstance(values, list) or not values:
            raise Invalid(("matrix", key), f"an axis is a non-empty array of values, got {values!r}")
        if len({canonical(v) for v in values}) != len(values):
            raise Invalid(("matrix", key), "duplicate values")
    if not isinstance(exclude_raw, list):
        raise Invalid(("matrix", "exclude"), f"expected an array of tables, got {type_name(exclude_raw)}")
    excludes = []
    for i, entry in enumerate(exclude_raw):
        if not isinstance(entry, dict) or not entry:
            raise Invalid(("matrix", "exclude", i), "expected a non-empty table of axis = value")
        flat = flatten_origins(entry, ("matrix", "exclude", i), origins)
        for key, value in flat.items():
            if key not in axes:
                raise Invalid(("matrix", "exclude", i, key), f"not a matrix axis (axes: {', '.join(axes)})")
            if canonical(value) not in {canonical(v) for v in axes[key]}:
                raise Invalid(("matrix", "exclude", i, key), f"{value!r} is not a value of this axis")
        excludes.append(flat)
    return Matrix(tuple((k, tuple(v)) for k, v in axes.items()), tuple(excludes))


def parse_model(raw: Mapping[str, Any], origins: dict[KeyPath, KeyPath]) -> Model:
    """The preset name and ltx2-config overrides as written (the model checks them in variants)."""
    check_keys(raw, ("preset", "overrides"))
    preset = get(raw, "preset", "str")
    flat = flatten_origins(get(raw, "overrides", "table", {}), ("model", "overrides"), origins)
    for key in flat:
        if key == PRESET_KEY or key.startswith(SETTING_PREFIXES):
            raise Invalid(("overrides", key), "set manifest settings in their own section, not in [model] overrides")
    return Model(preset, flat)
