"""The base of the typed record families (:mod:`harness.families`): a JSON object read into
typed fields or filled by its producer, and written back as one."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self


@dataclass(frozen=True, eq=False, kw_only=True)
class Family(Mapping[str, Any]):
    """A JSON object read into typed fields (None where absent); ``raw`` is the object itself."""

    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    NESTED: ClassVar[Mapping[str, type[Family]]] = {}  # field -> the family its object is read into
    MAPS: ClassVar[Mapping[str, type[Family]]] = {}  # field -> the family of each value of its object
    LISTS: ClassVar[Mapping[str, type[Family]]] = {}  # field -> the family of each object of its array

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
            v = raw[k]
            if k in cls.NESTED:
                v = read(cls.NESTED[k], v)
            elif k in cls.MAPS and isinstance(v, Mapping):
                v = {name: read(cls.MAPS[k], x) for name, x in v.items()}
            elif k in cls.LISTS and isinstance(v, list):
                v = tuple(read(cls.LISTS[k], x) for x in v)
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
