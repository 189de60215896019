"""Gate baselines: keys per backend and topology, writing on purpose, reading back, the CLI verb."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness import cli
from harness.plan.manifest import parse_manifest
from harness.results import baseline as bl
from harness.results.record import Record

FIXTURES = Path(__file__).parents[1] / "fixtures"
RECORDED = FIXTURES / "sweep_cpu8.jsonl"


def records(path: Path = RECORDED) -> list[Record]:
    return [Record.from_dict(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def ok_records() -> list[Record]:
    return [r for r in records() if r.ok]


@pytest.mark.parametrize(
    ("platform", "topology", "devices", "key"),
    [("cpu", None, 8, "cpu-8dev"), ("tpu", "v6e:2x4", 8, "tpu-v6e_2x4"), ("gpu", None, None, "gpu-anydev")],
)
def test_backend_key(platform, topology, devices, key):
    assert bl.backend_key(platform, topology, devices) == key


def manifest(gate: str = "") -> object:
    text = (FIXTURES / "sweep_cpu8.toml").read_text().replace("[gate]", f"[gate]\n{gate}")
    return parse_manifest(text, "experiments/nightly.toml")


def test_path_for_a_manifest():
    assert bl.path_for(manifest()) == Path("reports/baselines/nightly-cpu-8dev.json")
    assert bl.path_for(manifest('baseline = "cpu-smoke"'), "b") == Path("b/cpu-smoke.json")
    assert bl.path_for(manifest('baseline = "reports/baselines/nightly.jsonl"')) == Path(
        "reports/baselines/nightly.jsonl"
    )


def test_build_refuses_failed_variants_and_joins_the_keys_of_several_backends():
    with pytest.raises(bl.BaselineError, match=r"refusing to baseline failed variants: broken \(failed\)"):
        bl.build(records())
    mixed = ok_records()
    mixed[0] = mixed[0].replace(target=dataclasses.replace(mixed[0].target, devices=4))
    assert bl.build(mixed)["key"] == "cpu-4dev+cpu-8dev"  # each variant still compared with its own


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_write_and_load_round_trip(tmp_path, suffix):
    data = bl.build(ok_records(), source="x.jsonl")
    assert data["name"] == "sweep_cpu8-cpu-8dev" and data["key"] == "cpu-8dev"
    path = bl.write(tmp_path / f"b{suffix}", data)
    base = bl.load(path)
    assert base.key == "cpu-8dev" and [r.variant.name for r in base.records] == ["replicated", "naive", "trillium-loop"]
    assert [r.to_dict() for r in base.records] == data["records"] and base.records == ok_records()
    assert base.commit == ok_records()[0].git["commit"]
    assert bl.load_records_any(path) == base.records


def test_load_errors(tmp_path):
    with pytest.raises(bl.BaselineError, match="no baseline at .* baseline update"):
        bl.load(tmp_path / "missing.json")
    (tmp_path / "v9.json").write_text(json.dumps({"baseline_version": 9, "records": []}))
    with pytest.raises(bl.BaselineError, match="baseline_version 9"):
        bl.load(tmp_path / "v9.json")
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(bl.BaselineError, match="not a readable baseline"):
        bl.load(tmp_path / "junk.json")


def test_cli_update_and_show(tmp_path, capsys):
    results = tmp_path / "sweep" / "results.jsonl"
    results.parent.mkdir()
    results.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in ok_records()))
    assert cli.main(["baseline", "update", str(results.parent), "--dir", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "sweep_cpu8-cpu-8dev.json: 3 variants, backend cpu-8dev" in out
    assert cli.main(["baseline", "show", "sweep_cpu8-cpu-8dev", "--dir", str(tmp_path / "b")]) == 0
    shown = capsys.readouterr().out
    assert "trillium-loop" in shown and "collectives 213" in shown


def test_cli_update_refuses_failures_with_exit_2(tmp_path, capsys):
    assert cli.main(["baseline", "update", str(RECORDED), "--dir", str(tmp_path)]) == 2
    assert "refusing to baseline failed variants" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_cli_update_for_a_manifest_of_another_backend_exits_2(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in ok_records()))
    other = tmp_path / "other.toml"
    other.write_text(
        (FIXTURES / "sweep_cpu8.toml").read_text().replace("devices = 8", "devices = 4").replace("data = 2, ", "")
    )
    assert cli.main(["baseline", "update", str(results), "--manifest", str(other), "--dir", str(tmp_path)]) == 2
    assert "ran on cpu-8dev" in capsys.readouterr().err
