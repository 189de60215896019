"""The typed record: lossless JSON round trip, version upgrades (on recorded version-1 records), building one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.expansion import load_sweep
from harness.plan.manifest import Run
from harness.results import record as rec
from harness.results.record import RECORD_VERSION, Outcome, Record, RecordError, build_record, parse, upgrade

FIXTURES = Path(__file__).parents[1] / "fixtures"


def version_1() -> list[dict[str, Any]]:
    """Records written by the harness at record_version 1 (the recorded fixture sweep)."""
    raw = [json.loads(line) for line in (FIXTURES / "sweep_cpu8.jsonl").read_text().splitlines() if line.strip()]
    assert {r["record_version"] for r in raw} == {1}
    return raw


def test_version_1_records_read_losslessly() -> None:
    for raw in version_1():
        record = Record.from_dict(raw)
        assert record.to_dict() == upgrade(raw)  # nothing dropped or renamed; the absent keys written as null
        assert Record.from_dict(record.to_dict()).to_dict() == record.to_dict()
        assert record.variant.name == raw["variant"]["name"] and record.target.mode_used == "measure"
    trillium = next(Record.from_dict(r) for r in version_1() if r["variant"]["name"] == "trillium-loop")
    step = trillium.stages["denoise_step"]
    assert trillium.ok and step.status == "ok" and len(step.measured["samples_s"]) == 12
    assert step.static["collectives"]["by_kind"]["all-gather"]["count"] == 38
    broken = next(Record.from_dict(r) for r in version_1() if r["variant"]["name"] == "broken")
    assert not broken.ok and "test workload raised on purpose" in broken.stages["denoise_step"].error


def test_upgrade_runs_each_step_on_version_1_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 2 writes the keys version 1 left out as null; a future version 3 that renames
    ``duration_s`` runs after it: version-1 records come out as version 3."""
    raw = version_1()[0]
    up = upgrade(raw)
    assert up["record_version"] == 2 and up["manifest"]["reference"] is None and "reference" not in raw["manifest"]
    assert all(e["predicted"] is None for e in up["stages"].values()) and upgrade(up) == up

    def to_3(raw: dict[str, Any]) -> dict[str, Any]:
        out = {**raw, "record_version": 3, "wall_s": raw["duration_s"]}
        del out["duration_s"]
        return out

    monkeypatch.setattr(rec, "RECORD_VERSION", 3)
    monkeypatch.setattr(rec, "UPGRADES", {**rec.UPGRADES, 2: to_3})
    up = upgrade(raw)
    assert up["record_version"] == 3 and up["wall_s"] == raw["duration_s"] and "duration_s" not in up
    assert raw["record_version"] == 1 and "duration_s" in raw  # the input is left alone
    monkeypatch.setattr(rec, "UPGRADES", {**rec.UPGRADES, 2: lambda r: {**r}})
    with pytest.raises(RecordError, match="upgrade from record_version 2 did not produce version 3"):
        upgrade(raw)


@pytest.mark.parametrize("version", [0, RECORD_VERSION + 1, "1", None, True])
def test_unreadable_versions_are_errors(version: object) -> None:
    raw = {**version_1()[0], "record_version": version}
    with pytest.raises(RecordError, match=f"here.jsonl:3: record_version {version!r} is not readable"):
        parse(raw, "here.jsonl:3")


def test_build_record_from_a_worker_outcome(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        "schema_version = 1\n[target]\ndevices = 4\nmesh = { data = -1, tensor = 2 }\n"
        '[model]\npreset = "test:ok"\n[[variants]]\nname = "v"\noverrides = { "test.x" = 1 }\n'
    )
    sweep = load_sweep(manifest)
    stage = {
        "status": "ok",
        "error": None,
        "notes": ["n"],
        "static": {"platform": "test"},
        "measured": None,
        "trace": {"log_dir": "reports/t/traces/v/denoise_step"},
        "phases_s": {"build": 0.1},
    }
    outcome = Outcome(
        "ok",
        None,
        {
            "stages": {"denoise_step": stage},
            "notes": [],
            "machine": {"backend": "cpu"},
            "mode_used": "measure",
            "config_resolved": None,
        },
        1.5,
        "t0",
        "t1",
    )
    context = {
        "machine": {"hostname": "h", "backend": None},
        "versions": {"jax": "0.10.2"},
        "git": {"commit": "abc", "dirty": False},
    }
    record = build_record(
        sweep_id="s",
        manifest=sweep.manifest,
        variant=sweep.variants[0],
        run=sweep.manifest.run,
        outcome=outcome,
        context=context,
        log_path=tmp_path / "v.log",
    )
    d = record.to_dict()
    assert set(d) == set(upgrade(version_1()[0]))  # the current schema, no more, no less
    assert d["target"] == {
        "platform": "cpu",
        "mode": "auto",
        "mesh": {"data": 2, "tensor": 2},
        "topology": None,
        "devices": 4,
        "mode_used": "measure",
        "compiler_options": None,
    }
    assert d["machine"] == {"hostname": "h", "backend": "cpu"}  # the worker's view of the devices wins
    assert d["variant"] == {"name": "v", "id": sweep.variants[0].id, "overrides": {"test.x": 1}, "description": ""} | {
        "reference": None
    }
    assert d["artifacts"] == {"log": str(tmp_path / "v.log"), "traces": {"denoise_step": stage["trace"]["log_dir"]}}
    assert d["stages"]["denoise_step"] == {**stage, "predicted": None} and d["config"]["run"]["repeats"] == 5
    assert Record.from_dict(d) == record


def test_a_variants_reference_is_recorded_and_old_records_read_without_one(tmp_path: Path) -> None:
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        'schema_version = 1\n[model]\npreset = "test:ok"\n[[variants]]\nname = "a"\n'
        '[[variants]]\nname = "b"\noverrides = { "test.x" = 1 }\n'
    )
    b = load_sweep(manifest).variants[1]
    assert b.reference == "a"  # the first variant before it with the same preset and workload
    outcome = Outcome("ok", None, {"stages": {}}, 0.1, "t0", "t1")
    context = {"machine": {}, "versions": {}, "git": {}}
    record = build_record(
        sweep_id="s",
        manifest=load_sweep(manifest).manifest,
        variant=b,
        run=Run(),
        outcome=outcome,
        context=context,
        log_path="l",
    )
    assert record.to_dict()["variant"]["reference"] == "a" and Record.from_dict(record.to_dict()) == record
    old = version_1()[0]
    assert "reference" not in old["variant"] and Record.from_dict(old).variant.reference is None
    assert Record.from_dict(old).to_dict()["variant"] == {**old["variant"], "reference": None}


def test_the_predicted_family_is_kept_and_older_stages_write_back_with_null() -> None:
    raw = version_1()[0]
    assert all("predicted" not in e for e in raw["stages"].values())
    assert all(e["predicted"] is None for e in parse(raw, "old").to_dict()["stages"].values())
    stage = next(iter(raw["stages"]))
    new = {**raw, "stages": {**raw["stages"], stage: {**raw["stages"][stage], "predicted": {"step_s": 0.5}}}}
    record = parse(new, "new")
    assert record.stages[stage].predicted == {"step_s": 0.5} and record.to_dict() == upgrade(new)
    bad = {**raw, "stages": {**raw["stages"], stage: {**raw["stages"][stage], "predicted": 3}}}
    with pytest.raises(RecordError, match=f"stages.{stage}.predicted: expected an object or null"):
        parse(bad, "bad")
