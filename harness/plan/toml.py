"""Reading values out of parsed TOML tables, finding the line a key was written on, and writing values
back (:func:`toml_value`, :func:`toml_key`: the search's winners manifest, bisect's cut manifest).

Every value a manifest gives is read through :func:`get` (one kind check per key, numbers
included), so a rule about numbers or strings is added in one place. Numbers are also checked
once for the whole document (:func:`check_finite`): TOML spells ``nan`` and ``inf``, and no
manifest value means anything with them (a ``nan`` timeout never fires, a ``nan`` tolerance
passes everything), wherever they are written, config overrides and matrix values included.
Problems raise :class:`Invalid` with a key path relative to the table being read; the manifest
parser prefixes the section and :func:`locate` finds the line in the text. :func:`decode` turns
a file's bytes into text (UTF-8, a byte order mark allowed).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

KeyPath = tuple[str | int, ...]

# Override keys whose value is a table and must not be flattened further.
TABLE_VALUED = frozenset({"target.mesh", "target.compiler_options"})


class Invalid(Exception):
    """Raised by the section parsers with a path relative to the section; located later."""

    def __init__(self, path: KeyPath, reason: str):
        super().__init__(reason)
        self.path, self.reason = path, reason


# --------------------------------------------------------------------------- typed reads

REQUIRED = object()

_TYPE_NAMES = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a float"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)
_KINDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "int": (int, "an integer"),
    "float": ((int, float), "a number"),
    "str": (str, "a string"),
    "bool": (bool, "a boolean"),
    "table": (dict, "a table"),
    "array": (list, "an array"),
}


def type_name(value: object) -> str:
    return next((name for t, name in _TYPE_NAMES if isinstance(value, t)), f"a {type(value).__name__}")


def is_kind(value: object, kind: str) -> bool:
    """Whether ``value`` is of ``kind`` (``int``, ``float``, ``str``, ``bool``, ``table``, ``array``);
    a boolean is never a number."""
    if isinstance(value, bool) and kind in ("int", "float"):
        return False
    return isinstance(value, _KINDS[kind][0])


def get(table: Mapping[str, Any], key: str, kind: str, default: Any = REQUIRED) -> Any:
    """``table[key]`` checked to be of ``kind``; missing -> default (or an error if required)."""
    if key not in table:
        if default is REQUIRED:
            raise Invalid((key,), "missing required key")
        return default
    value = table[key]
    if not is_kind(value, kind):
        raise Invalid((key,), f"expected {_KINDS[kind][1]}, got {type_name(value)} ({value!r})")
    return float(value) if kind == "float" else value


def check_finite(value: Any, path: KeyPath = ()) -> None:
    """Raise :class:`Invalid` at the first ``nan`` or ``inf`` anywhere in a parsed TOML value."""
    if isinstance(value, float) and not math.isfinite(value):
        raise Invalid(path, f"not a finite number ({value!r}); manifests take finite numbers only")
    if isinstance(value, dict):
        for key, item in value.items():
            check_finite(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_finite(item, path + (i,))


def at_most(value: float, key: str, limit: float, why: str) -> Any:
    if value > limit:
        raise Invalid((key,), f"{value!r} is more than this harness accepts (at most {limit:g}: {why})")
    return value


def check_keys(table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in table:
        if key not in allowed:
            raise Invalid((key,), f"unknown key (allowed: {', '.join(allowed)})")


def choice(value: str, key: str, choices: tuple[str, ...] | list[str], what: str) -> str:
    if value not in choices:
        raise Invalid((key,), f"unknown {what} {value!r} (known: {', '.join(choices)})")
    return value


def positive(value: float, key: str, *, zero_ok: bool = False) -> Any:
    if value < 0 or (value == 0 and not zero_ok):
        raise Invalid((key,), f"must be {'>= 0' if zero_ok else '> 0'}, got {value!r}")
    return value


def str_list(
    table: Mapping[str, Any], key: str, choices: tuple[str, ...] | None, default: tuple[str, ...]
) -> tuple[str, ...]:
    """An array of distinct strings, each one of ``choices`` (any string when ``choices`` is None)."""
    values = get(table, key, "array", None)
    if values is None:
        return default
    for i, v in enumerate(values):
        if not isinstance(v, str):
            raise Invalid((key, i), f"expected a string, got {type_name(v)} ({v!r})")
        if choices is not None and v not in choices:
            raise Invalid(
                (key, i), f"unknown {key[:-1] if key.endswith('s') else key} {v!r} (known: {', '.join(choices)})"
            )
    if len(set(values)) != len(values):
        raise Invalid((key,), "duplicate entries")
    return tuple(values)


_OPTION_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")  # an XLA / libtpu flag name without its "--"


def option_table(raw: Any, key: str) -> tuple[tuple[str, bool | int | float | str], ...]:
    """A table of compiler options (``name = value``, names as ``Lowered.compile(compiler_options=...)``
    takes them: no leading ``--``; values booleans, numbers or strings), sorted by name."""
    if not isinstance(raw, dict):
        raise Invalid((key,), f"expected a table of option = value, got {type_name(raw)}")
    for name, value in raw.items():
        if not _OPTION_NAME.match(name):
            hint = " (write the name without the leading --)" if name.startswith("-") else ""
            raise Invalid((key, name), f"not an XLA option name: a letter, then letters, digits and _{hint}")
        if not any(is_kind(value, k) for k in ("bool", "int", "float", "str")):
            raise Invalid((key, name), f"expected a boolean, number or string, got {type_name(value)} ({value!r})")
    return tuple(sorted(raw.items()))


def canonical(value: Any) -> str:
    """A value's canonical JSON (for comparing TOML values of any type)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------- text

BOM = b"\xef\xbb\xbf"


class NotUTF8(ValueError):
    """Manifest bytes that are not UTF-8; ``line`` is where the first bad byte is."""

    def __init__(self, line: int, reason: str):
        super().__init__(reason)
        self.line = line


def decode(data: bytes) -> str:
    """A manifest's bytes as text: UTF-8 (as TOML requires), a leading byte order mark dropped.
    :class:`NotUTF8` names the first byte that is not UTF-8 by line, column and offset."""
    body = data[len(BOM) :] if data.startswith(BOM) else data
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        offset = e.start + len(data) - len(body)
        line = data.count(b"\n", 0, offset) + 1
        column = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
        raise NotUTF8(
            line,
            f"not UTF-8 text: byte 0x{data[offset]:02x} at line {line}, column {column} (offset "
            f"{offset}); a manifest is TOML, which is UTF-8: re-save it as UTF-8",
        ) from None


# --------------------------------------------------------------------------- dotted keys


def flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables -> dotted keys (``a.b = 1`` and ``"a.b" = 1`` mean the same)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and dotted not in TABLE_VALUED:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def flatten_origins(table: Mapping[str, Any], base: KeyPath, out: dict[KeyPath, KeyPath]) -> dict[str, Any]:
    """:func:`flatten`, also recording where each dotted key was written (for error lines)."""

    def walk(t: Mapping[str, Any], written: KeyPath, prefix: str) -> None:
        for key, value in t.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, dict) and dotted not in TABLE_VALUED:
                walk(value, written + (key,), dotted + ".")
            else:
                out[base + (dotted,)] = written + (key,)

    walk(table, base, "")
    return flatten(table)


# --------------------------------------------------------------------------- locating keys

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")
_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|'[^']*')"""
_DOTTED = rf"{_KEY_PART}(?:\s*\.\s*{_KEY_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[|\[)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_ASSIGN = re.compile(rf"^\s*({_DOTTED})\s*=")


def format_path(path: KeyPath) -> str:
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            part = seg if _BARE.match(seg) else f'"{seg}"'
            out += f".{part}" if out else part
    return out


def _split_key(dotted: str) -> list[str]:
    return [p.strip().strip("\"'") for p in re.findall(_KEY_PART, dotted)]


def _definitions(text: str) -> list[tuple[int, KeyPath]]:
    """(line, full key path) for every table header and ``key =`` line of a TOML text."""
    defs: list[tuple[int, KeyPath]] = []
    counts: dict[KeyPath, int] = {}
    table: KeyPath = ()
    for n, line in enumerate(text.splitlines(), start=1):
        if m := _HEADER.match(line):
            *parents, last = _split_key(m.group(2))
            resolved: KeyPath = ()
            for part in parents:
                resolved += (part,)
                if resolved in counts:  # inside the latest element of an array of tables
                    resolved += (counts[resolved] - 1,)
            resolved += (last,)
            if m.group(1) == "[[":
                counts[resolved] = counts.get(resolved, 0) + 1
            if resolved in counts:
                resolved += (counts[resolved] - 1,)
            table = resolved
            defs.append((n, table))
        elif m := _ASSIGN.match(line):
            defs.append((n, table + tuple(_split_key(m.group(1)))))
    return defs


def locate(text: str, path: KeyPath) -> int | None:
    """Best-effort line of a key path: the longest defined prefix, then a search inside inline tables."""
    if not text:
        return None
    defs = _definitions(text)
    best, best_len, best_idx = None, 0, -1
    for i, (line, key) in enumerate(defs):
        n = len(key)
        if n > best_len and path[:n] == key:
            best, best_len, best_idx = line, n, i
    if best is None:
        return None
    lines = text.splitlines()
    stop = defs[best_idx + 1][0] - 1 if best_idx + 1 < len(defs) else len(lines)
    for seg in path[best_len:]:
        if isinstance(seg, int):
            continue
        pat = re.compile(rf"""(?:^|[\s{{,.])(?:{re.escape(seg)}|"{re.escape(seg)}"|'{re.escape(seg)}')\s*=""")
        for n in range(best, stop + 1):
            if pat.search(lines[n - 1]):
                best = n
                break
    return best


# --------------------------------------------------------------------------- writing


def toml_value(value: Any) -> str:
    """A TOML value (strings, booleans, numbers, ``nan`` / ``inf`` included, arrays, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__} ({value!r})")


def toml_key(key: str) -> str:
    """A key as written: bare where TOML allows it (ASCII letters, digits, ``_``, ``-``), else quoted."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)
