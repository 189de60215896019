"""The manifest reference against the parsers: every key a parser accepts has an entry in
harness/plan/keys.py, every entry's example parses, and the generated page shows every key."""

from __future__ import annotations

import dataclasses

import pytest

from harness.docgen import manifest as page
from harness.plan import manifest, overrides, reference, search_space
from harness.plan.keys import FULL_EXAMPLE, KEYS, SECTIONS

PARSERS = (manifest, overrides, search_space, reference)


def accepted_key_sets(monkeypatch: pytest.MonkeyPatch) -> list[frozenset[str]]:
    """The key tuples every parser checks against, recorded while parsing a manifest with every section."""
    seen: list[frozenset[str]] = []
    for module in PARSERS:
        original = module.check_keys

        def record(table, allowed, original=original):  # noqa: ANN001, ANN202
            seen.append(frozenset(allowed))
            return original(table, allowed)

        monkeypatch.setattr(module, "check_keys", record)
    text = (
        FULL_EXAMPLE
        + "\n[workload]\nsteps = 2\n[run]\nrepeats = 2\n[gate]\nalpha = 0.01\n[report]\nreference = 'naive'\n"
    )
    manifest.parse_manifest(text)
    return seen


def documented(section: str) -> frozenset[str]:
    return frozenset(p.rsplit(".", 1)[-1] for p in KEYS if page.section_of(p) == section)


def test_every_key_a_parser_accepts_is_documented(monkeypatch):
    sections = {s: documented(s) for s in SECTIONS}
    sets = accepted_key_sets(monkeypatch)
    assert len(sets) >= 10  # top, target, model, workload, run, gate, report, variants, search, reference, rung
    for allowed in sets:
        match = [s for s, keys in sections.items() if allowed <= keys]
        assert match, f"keys {sorted(allowed)} accepted by a parser have no section in harness/plan/keys.py"
        missing = allowed - sections[match[0]]
        assert not missing, f"undocumented manifest keys: {sorted(missing)}"


def test_section_dataclasses_and_documented_keys_agree():
    for section, cls in page._DATACLASSES.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        assert fields <= documented(section) | {"overrides"}, (section, fields - documented(section))


@pytest.mark.parametrize("path", [p for p, k in KEYS.items() if k.example])
def test_every_example_parses(path):
    example = KEYS[path].example
    head = "schema_version = 1\n" + ("" if "[model]" in example else "[model]\npreset = 'tiny'\n")
    manifest.parse_manifest(head + example + "\n")


def test_every_key_has_a_description_and_the_page_shows_it():
    text = page.render()
    for path, key in KEYS.items():
        assert key.doc.strip() and key.type.strip(), path
        assert f"### `{path}`" in text, path
    manifest.parse_manifest(FULL_EXAMPLE)
    assert "default `5`" in text  # run.repeats: read from the Run dataclass
