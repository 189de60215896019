"""The ``[search]`` table: parsed into a :class:`SearchSpace`, and every bad input an error naming
the file, the key and the reason -- what the TOML says (harness/plan/search_space.py) and what only
the model can say (harness/search/setup.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plan.manifest import ManifestError, parse_manifest
from harness.search.setup import load_search

HEAD = """\
schema_version = 1
[target]
mode = "compile"
devices = 8
mesh = { data = 2, context = 2, tensor = 2 }
[model]
preset = "tiny"
[workload]
height = 64
width = 64
num_frames = 17
batch = 2
text_tokens = 16
"""
SEARCH = """\
[search]
base = "naive"
meshes = [{ data = 2, context = 2, tensor = 2 }, { fsdp = 2, tensor = 4 }]
attention = ["xla", "splash"]
proxy_layers = 1
confirm = 2
[search.rules]
heads = [["tensor"], []]
embed = [["context", "fsdp"], "fsdp", []]
"""


def test_the_search_table_parses() -> None:
    space = parse_manifest(HEAD + SEARCH).search
    assert space is not None
    assert space.base == "naive" and space.attention == ("xla", "splash") and space.proxy_layers == 1
    assert space.meshes == ((("data", 2), ("context", 2), ("tensor", 2)), (("fsdp", 2), ("tensor", 4)))
    assert space.rules == (("heads", (("tensor",), ())), ("embed", (("context", "fsdp"), ("fsdp",), ())))
    assert space.confirm == 2 and space.size == 2 * 2 * 2 * 3


def test_a_manifest_without_one_has_none() -> None:
    assert parse_manifest(HEAD).search is None


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        (("confirm = 2", "confirm = 0"), "search.confirm", "must be > 0"),
        (("proxy_layers = 1", "proxy_layers = -2"), "search.proxy_layers", "must be > 0"),
        (("proxy_layers = 1", "proxy_layers = 1.5"), "search.proxy_layers", "expected an integer"),
        (("confirm = 2", "confirm = 2\nbeam = 3"), "search.beam", "unknown key"),
        (
            ('heads = [["tensor"], []]', 'heads = [["tensor"], ["tensor"]]'),
            "search.rules.heads",
            "duplicate candidates",
        ),
        (('heads = [["tensor"], []]', "heads = []"), "search.rules.heads", "non-empty array of candidates"),
        (
            ('heads = [["tensor"], []]', 'heads = [["tensor", "tensor"]]'),
            "search.rules.heads[0]",
            "repeats a mesh axis",
        ),
        (('heads = [["tensor"], []]', "heads = [[1]]"), "search.rules.heads[0]", "list of mesh axis names"),
        (("{ fsdp = 2, tensor = 4 }", "{ fsdp = 0, tensor = 4 }"), "search.meshes[1].fsdp", "positive integer"),
        (("{ fsdp = 2, tensor = 4 }", "{ data = 2, context = 2, tensor = 2 }"), "search.meshes", "duplicate meshes"),
        (('attention = ["xla", "splash"]', "attention = []"), "search.attention", "non-empty array"),
    ],
)
def test_bad_search_tables_name_file_key_and_reason(change: tuple[str, str], key: str, reason: str) -> None:
    with pytest.raises(ManifestError) as e:
        parse_manifest(HEAD + SEARCH.replace(*change), "m.toml")
    assert str(e.value).startswith("m.toml:") and e.value.key == key and reason in e.value.reason


def test_a_missing_rules_table_is_an_error() -> None:
    with pytest.raises(ManifestError) as e:
        parse_manifest(HEAD + SEARCH.split("[search.rules]")[0], "m.toml")
    assert e.value.key == "search.rules" and "non-empty table" in e.value.reason


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        (('base = "naive"', 'base = "nope"'), "search.base", "unknown sharding strategy 'nope'"),
        (
            ('heads = [["tensor"], []]', 'headz = [["tensor"], []]'),
            "search.rules.headz[0]",
            "unknown logical axis 'headz'",
        ),
        (
            ('heads = [["tensor"], []]', 'heads = [["tensr"], []]'),
            "search.rules.heads[0]",
            "unknown mesh axes ['tensr']",
        ),
        (("{ fsdp = 2, tensor = 4 }", "{ fsdp = 2, model = 4 }"), "search.meshes[1]", "unknown mesh axes ['model']"),
        (('attention = ["xla", "splash"]', 'attention = ["xla", "flash"]'), "search.attention[1]", "flash"),
    ],
)
def test_what_only_the_model_knows_is_checked_too(
    tmp_path: Path, change: tuple[str, str], key: str, reason: str
) -> None:
    path = tmp_path / "m.toml"
    path.write_text(HEAD + SEARCH.replace(*change))
    with pytest.raises(ManifestError) as e:
        load_search(path, tmp_path / "reports")
    assert e.value.file == str(path) and e.value.key == key and reason in e.value.reason


def test_search_needs_a_search_table(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(HEAD)
    with pytest.raises(ManifestError, match=r"has no \[search\] table"):
        load_search(path, tmp_path / "reports")
