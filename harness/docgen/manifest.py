"""The manifest reference: every key of :data:`harness.plan.keys.KEYS`, grouped by section, with its
type, default (read from the section's dataclass), allowed values, the ``ltx2`` knob it sets, and an
example."""

from __future__ import annotations

import dataclasses
from typing import Any

from harness.docgen.md import code, page
from harness.plan import manifest as mf
from harness.plan.keys import FULL_EXAMPLE, KEYS, SECTIONS, Key
from harness.plan.overrides import VariantSpec
from harness.plan.search_space import SearchSpace

# Section -> the dataclass whose field defaults are the section's defaults.
_DATACLASSES: dict[str, Any] = {
    "target": mf.Target,
    "workload": mf.Workload,
    "run": mf.Run,
    "gate": mf.Gate,
    "report": mf.Report,
    "variants[]": VariantSpec,
    "search": SearchSpace,
}


def section_of(path: str) -> str:
    """The section a key belongs to: the longest :data:`SECTIONS` prefix (``""`` for top-level keys)."""
    prefixes = [s for s in SECTIONS if s and path.startswith(s + ".")]
    return max(prefixes, key=len) if prefixes else ""


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, tuple | list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # a mesh / option table
            return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value) + " }"
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + " }"
    return "none" if value is None else repr(value)


def default_of(path: str, key: Key) -> str:
    """The key's default as TOML: stated in the table, else the section dataclass's field default."""
    if key.default is not None:
        return key.default
    section, name = section_of(path), path.rsplit(".", 1)[-1]
    if section == "" and key.type == "table":
        return "each key at its default"
    cls = _DATACLASSES.get(section)
    fields = {f.name: f for f in dataclasses.fields(cls)} if cls else {}
    if name not in fields:
        return "—"
    f = fields[name]
    if f.default is not dataclasses.MISSING:
        return _toml(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return _toml(f.default_factory())
    return "required"


def _entry(path: str, key: Key) -> str:
    facts = [f"*{key.type}*", f"default {code(default_of(path, key))}"]
    if key.allowed:
        facts.append("one of " + ", ".join(code(v) for v in key.allowed))
    facts.append(f"sets {code(key.sets)}")
    out = [f"### `{path}`\n", " · ".join(facts) + "\n", key.doc + "\n"]
    if key.example:
        out.append(f"```toml\n{key.example}\n```\n")
    return "\n".join(out)


def render() -> str:
    sections = []
    for section, title in SECTIONS.items():
        entries = [_entry(p, k) for p, k in KEYS.items() if section_of(p) == section]
        sections.append(f"## {title}\n\n" + "\n".join(entries))
    intro = (
        "A manifest is TOML. Unknown keys, wrong types and impossible meshes are errors naming the file, line "
        "and key before anything runs. *sets* says which knob a key reaches: `harness` for the harness's "
        "own settings, else the `ltx2` name (config overrides are listed in "
        "[config overrides](overrides.md)). A manifest using the sections without examples below:\n\n"
        f"```toml\n{FULL_EXAMPLE}```\n"
    )
    return page("Manifest keys", "harness/plan/keys.py", intro, *sections)
