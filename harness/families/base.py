"""The base of the typed record families (:mod:`harness.families`): a JSON object read into
typed fields or filled by its producer, and written back as one. How a field's JSON is read follows
its annotation: a family (``Memory | None``) is read into it, ``Mapping[str, F]`` each value,
``tuple[F, ...]`` each item; anything else is kept as JSON gives it."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self


@dataclass(frozen=True, eq=False, kw_only=True)
class Family(Mapping[str, Any]):
    """A JSON object read into typed fields (None where absent); ``raw`` is the object itself."""

    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.raw:  # filled by a producer: its JSON object from its fields
            fields = {n: getattr(self, n) for n in self.names()}
            object.__setattr__(self, "raw", {n: _json(v) for n, v in fields.items() if v is not None})

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls)) - {"raw"}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self:
        known = {}
        for k in cls.names() & raw.keys():
            v, (shape, inner) = raw[k], _shapes(cls).get(k, ("", Family))
            if shape == "one":
                v = read(inner, v)
            elif shape == "map" and isinstance(v, Mapping):
                v = {name: read(inner, x) for name, x in v.items()}
            elif shape == "list" and isinstance(v, list):
                v = tuple(read(inner, x) for x in v)
            known[k] = v
        return cls(raw=dict(raw), **known)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: as read, or as its producer filled it."""
        return dict(self.raw)

    def replace(self, **changes: Any) -> Self:
        """This family with some fields changed (its JSON object with them); TypeError on a name that is
        no field."""
        if unknown := changes.keys() - self.names():
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        return self.from_dict({**self.raw, **{k: _json(v) for k, v in changes.items()}})

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


@functools.cache
def _shapes(cls: type[Family]) -> dict[str, tuple[str, type[Family]]]:
    """Field -> how its JSON is read, from its annotation: ``one`` family, a ``map`` of them, a ``list``."""
    shapes = {}
    for name, hint in typing.get_type_hints(cls).items():
        for t in typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,):
            args = typing.get_args(t)
            if isinstance(t, type) and issubclass(t, Family):
                shapes[name] = ("one", t)
            elif typing.get_origin(t) is Mapping and _is_family(args[-1]):
                shapes[name] = ("map", args[-1])
            elif typing.get_origin(t) is tuple and args and _is_family(args[0]):
                shapes[name] = ("list", args[0])
    return shapes


def _is_family(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, Family)


def _json(value: Any) -> Any:
    if isinstance(value, Family):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    return [_json(v) for v in value] if isinstance(value, list | tuple) else value


def at(family: Family | None, path: str) -> Any:
    """The value at a dotted path of typed fields (``compile_cache.first.hit``; a catalogue metric's
    ``path``); None where a step is absent or not a family."""
    obj: Any = family
    for name in path.split("."):
        if not isinstance(obj, Family):
            return None
        obj = getattr(obj, name)
    return obj


def read(cls: type[Family], raw: Any) -> Any:
    """``raw`` read as ``cls`` when it is a JSON object (None and anything else as they are)."""
    return cls.from_dict(raw) if isinstance(raw, Mapping) and not isinstance(raw, Family) else raw
