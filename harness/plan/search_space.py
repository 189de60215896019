"""A manifest's ``[search]`` table: the layout space ``python -m harness search`` explores. No model import.
Its keys are described in :mod:`harness.plan.keys` (``search.*``; docs/search.md has an example).

This module checks what the TOML alone says (keys, kinds, positive sizes, no duplicate options);
whether the logical names, mesh axes, strategy and attention kernels exist, and whether a mesh
spans the target's devices, is the model's to say (:mod:`harness.search.space`), with the same
located errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.plan.toml import Invalid, canonical, check_keys, get, is_kind, positive, type_name

MeshShape = tuple[tuple[str, int], ...]
AxesOption = tuple[str, ...]


@dataclass(frozen=True)
class SearchSpace:
    """The declared space: per logical axis its candidate mesh-axes lists, meshes, kernels, proxy."""

    rules: tuple[tuple[str, tuple[AxesOption, ...]], ...]
    meshes: tuple[MeshShape, ...]
    attention: tuple[str, ...] = ("xla",)
    base: str = "replicated"
    proxy_layers: int | None = None  # None: every candidate compiles at full depth
    confirm: int = 1

    @property
    def size(self) -> int:
        """Points of the declared product (before pruning)."""
        n = len(self.meshes) * len(self.attention)
        for _, options in self.rules:
            n *= len(options)
        return n


_KEYS = ("base", "meshes", "attention", "proxy_layers", "confirm", "rules")


def _axes_option(value: Any, path: tuple[str | int, ...]) -> AxesOption:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise Invalid(path, f"a candidate is a list of mesh axis names ([] = replicated), got {value!r}")
    if len(set(value)) != len(value):
        raise Invalid(path, f"repeats a mesh axis: {value!r}")
    return tuple(value)


def _rules(raw: Any) -> tuple[tuple[str, tuple[AxesOption, ...]], ...]:
    if not isinstance(raw, dict) or not raw:
        raise Invalid(("rules",), "expected a non-empty table of logical axis = [candidate mesh-axes lists]")
    out = []
    for logical, options in raw.items():
        if not isinstance(options, list) or not options:
            raise Invalid(("rules", logical), f"expected a non-empty array of candidates, got {type_name(options)}")
        parsed = tuple(_axes_option(o, ("rules", logical, i)) for i, o in enumerate(options))
        if len(set(parsed)) != len(parsed):
            raise Invalid(("rules", logical), "duplicate candidates")
        out.append((logical, parsed))
    return tuple(out)


def _meshes(raw: Any) -> tuple[MeshShape, ...]:
    if not isinstance(raw, list) or not raw:
        raise Invalid(("meshes",), "expected a non-empty array of mesh tables, e.g. [{ fsdp = 2, tensor = 4 }]")
    out = []
    for i, mesh in enumerate(raw):
        if not isinstance(mesh, dict) or not mesh:
            raise Invalid(("meshes", i), f"expected a non-empty table of axis = size, got {mesh!r}")
        for axis, size in mesh.items():
            if not is_kind(size, "int") or size < 1:
                raise Invalid(("meshes", i, axis), f"axis size must be a positive integer, got {size!r}")
        out.append(tuple(mesh.items()))
    if len({canonical(dict(m)) for m in out}) != len(out):
        raise Invalid(("meshes",), "duplicate meshes")
    return tuple(out)


def parse_search(raw: Mapping[str, Any]) -> SearchSpace:
    """The ``[search]`` table as written, checked for kinds and shape (see the module docstring)."""
    check_keys(raw, _KEYS)
    attention = get(raw, "attention", "array", ["xla"])
    if not attention or not all(isinstance(a, str) for a in attention) or len(set(attention)) != len(attention):
        raise Invalid(("attention",), f"expected a non-empty array of distinct kernel names, got {attention!r}")
    proxy = get(raw, "proxy_layers", "int", None)
    return SearchSpace(
        rules=_rules(raw.get("rules")),
        meshes=_meshes(raw.get("meshes")),
        attention=tuple(attention),
        base=get(raw, "base", "str", "replicated"),
        proxy_layers=None if proxy is None else positive(proxy, "proxy_layers"),
        confirm=positive(get(raw, "confirm", "int", 1), "confirm"),
    )
