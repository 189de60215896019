"""Variant expansion: explicit variants + matrix (product minus excludes), stable ids, selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.expansion import load_sweep
from harness.model import build_config
from harness.plan.variants import ID_LENGTH, Variant, matrix_points, select, variant_id

HEADER = """\
schema_version = 1
[target]
devices = 8
[model]
preset = "test:ok"
"""


def _variants(tmp_path: Path, body: str, name: str = "m.toml") -> list[Variant]:
    path = tmp_path / name
    path.write_text(HEADER + body)
    return list(load_sweep(path).variants)


def test_no_variants_means_one_base_variant(tmp_path: Path) -> None:
    (v,) = _variants(tmp_path, "")
    assert v.name == "base" and dict(v.overrides) == {} and v.target.mesh_shape == {"data": 8}


def test_matrix_is_the_product_minus_excludes(tmp_path: Path) -> None:
    body = """\
[matrix]
"test.a" = [1, 2, 3]
"test.b" = ["x", "y"]
exclude = [{ "test.a" = 2 }, { "test.a" = 3, "test.b" = "y" }]
"""
    variants = _variants(tmp_path, body)
    assert [v.name for v in variants] == ["a=1,b=x", "a=1,b=y", "a=3,b=x"]
    assert [dict(v.overrides) for v in variants] == [
        {"test.a": 1, "test.b": "x"},
        {"test.a": 1, "test.b": "y"},
        {"test.a": 3, "test.b": "x"},
    ]
    assert len({v.id for v in variants}) == 3


def test_matrix_names_keep_the_full_key_when_the_last_part_clashes(tmp_path: Path) -> None:
    variants = _variants(tmp_path, '[matrix]\n"test.x.n" = [1]\n"test.y.n" = [2]\n"workload.batch" = [1, 2]\n')
    assert [v.name for v in variants] == ["test.x.n=1,test.y.n=2,batch=1", "test.x.n=1,test.y.n=2,batch=2"]


def test_explicit_variants_come_first_then_the_matrix(tmp_path: Path) -> None:
    body = '[[variants]]\nname = "ref"\n[matrix]\n"test.a" = [1, 2]\n'
    assert [v.name for v in _variants(tmp_path, body)] == ["ref", "a=1", "a=2"]


def test_variant_overrides_reach_target_workload_and_preset(tmp_path: Path) -> None:
    body = """\
[workload]
batch = 4
[[variants]]
name = "v"
overrides = { "target.mesh" = { data = 2, tensor = -1 }, "workload.batch" = 1, "model.preset" = "test:raise" }
"""
    (v,) = _variants(tmp_path, body)
    assert v.target.mesh_shape == {"data": 2, "tensor": 4}
    assert v.workload.batch == 1 and v.preset == "test:raise"
    assert dict(v.config_overrides) == {}


def test_ids_depend_on_settings_not_on_names_order_or_where_they_are_written(tmp_path: Path) -> None:
    a = _variants(tmp_path, '[model.overrides]\n"test.k" = 1\n"test.j" = 2\n[[variants]]\nname = "one"\n', "a.toml")
    b = _variants(tmp_path, '[[variants]]\nname = "two"\noverrides = { "test.j" = 2, "test.k" = 1 }\n', "b.toml")
    c = _variants(tmp_path, '[matrix]\n"test.j" = [2]\n"test.k" = [1]\n', "c.toml")
    assert a[0].id == b[0].id == c[0].id
    assert len(a[0].id) == ID_LENGTH
    # the -1 mesh axis resolves to the same settings as the explicit size
    d = _variants(tmp_path, "", "d.toml")
    e = _variants(tmp_path, '[[variants]]\nname = "x"\noverrides = { "target.mesh" = { data = 8 } }\n', "e.toml")
    assert d[0].id == e[0].id


def test_ids_ignore_run_settings_and_mode(tmp_path: Path) -> None:
    (a,) = _variants(tmp_path, "[run]\nrepeats = 3\n", "a.toml")
    (b,) = _variants(tmp_path, "[run]\nrepeats = 9\ntrace = true\n", "b.toml")
    assert a.id == b.id


def test_any_setting_change_changes_the_id(tmp_path: Path) -> None:
    body = """\
[[variants]]
name = "base"
[[variants]]
name = "batch"
overrides = { "workload.batch" = 2 }
[[variants]]
name = "mesh"
overrides = { "target.mesh" = { data = 4, tensor = 2 } }
[[variants]]
name = "config"
overrides = { "test.x" = 1 }
[[variants]]
name = "preset"
overrides = { "model.preset" = "test:sleep" }
"""
    assert len({v.id for v in _variants(tmp_path, body)}) == 5


def test_variant_id_is_a_pure_function_of_settings() -> None:
    assert variant_id({"b": 1, "a": [1, 2]}) == variant_id({"a": [1, 2], "b": 1})
    assert variant_id({"a": 1}) != variant_id({"a": 1.5})


def test_matrix_points_directly() -> None:
    from harness.plan.manifest import Matrix

    m = Matrix((("x", (True, False)),), ({"x": False},))
    assert matrix_points(m) == [("x=true", {"x": True})]


def test_select_by_name_or_id_prefix(tmp_path: Path) -> None:
    variants = _variants(tmp_path, '[matrix]\n"test.a" = [1, 2, 3]\n')
    assert [v.name for v in select(variants, [])] == ["a=1", "a=2", "a=3"]
    assert [v.name for v in select(variants, ["a=2", variants[2].id[:6]])] == ["a=2", "a=3"]
    with pytest.raises(KeyError, match="no variant named or with an id starting with zzz"):
        select(variants, ["zzz"])


RULES = """\
schema_version = 1
[target]
mesh = { data = 2, context = 2, tensor = 2 }
[model]
preset = "tiny"
[workload]
height = 64
width = 64
num_frames = 17
batch = 2
text_tokens = 16
[[variants]]
name = "naive"
overrides = { "transformer.sharding" = "naive" }
"""


def test_sharding_rules_are_overrides_that_enter_the_id_and_the_built_config(tmp_path: Path) -> None:
    body = (
        RULES
        + """\
[[variants]]
name = "ffn"
reference = "naive"
[variants.overrides]
"transformer.sharding" = "naive"
"sharding.rules.mlp_in" = []
[[variants]]
name = "ffn-qkv"
reference = "ffn"
[variants.overrides]
"transformer.sharding" = "naive"
sharding.rules = { qkv_in = "fsdp", mlp_in = [] }
"""
    )
    path = tmp_path / "rules.toml"
    path.write_text(body)
    naive, ffn, both = load_sweep(path).variants
    assert dict(ffn.config_overrides) == {"transformer.sharding": "naive", "sharding.rules.mlp_in": []}
    assert both.config_overrides["sharding.rules.qkv_in"] == ["fsdp"]  # one axis name, normalised to a list
    assert len({naive.id, ffn.id, both.id}) == 3 and (ffn.reference, both.reference) == ("naive", "ffn")
    assert build_config(both.preset, both.config_overrides).transformer.sharding == "naive+mlp_in=-+qkv_in=fsdp"
    # the same rules written another way (list vs name, inline vs [model] overrides) are the same variant
    same = tmp_path / "same.toml"
    same.write_text(
        RULES.replace(
            'preset = "tiny"',
            'preset = "tiny"\noverrides = { "sharding.rules.qkv_in" = ["fsdp"], "sharding.rules.mlp_in" = [] }',
        )
    )
    (moved,) = load_sweep(same).variants
    assert moved.id == both.id


def test_a_sharding_rule_can_be_a_matrix_axis(tmp_path: Path) -> None:
    path = tmp_path / "matrix.toml"
    path.write_text(RULES.split("[[variants]]")[0] + '[matrix]\n"sharding.rules.mlp_in" = [[], ["context"]]\n')
    replicated, context = load_sweep(path).variants
    assert (replicated.name, context.name) == ("mlp_in=[]", 'mlp_in=["context"]') and replicated.id != context.id
    assert (
        build_config(context.preset, {"transformer.sharding": "naive", **context.config_overrides}).transformer.sharding
        == "naive+mlp_in=context"
    )
