"""Records written before the catalogue and the typed records read the same today: the committed
gate baseline, every committed record fixture and a v6e and a v7x record (``tpu_b181d3b.jsonl``:
compile-only ``tiny`` sweeps on v6e:2x4 and tpu7x:2x2x1 written by the harness at b181d3b from an
export without git, so their ``git`` fields are null) flatten to exactly the metrics and values the
harness at b181d3b flattened them to (``flattened_b181d3b.json``, written by that harness), and
write back to the very JSON they were read from. Metrics catalogued since (:data:`SINCE`, read from
fields the records already had: HBM traffic, matmul FLOPs, the per-scope attribution) are left out
of that comparison and checked apart; baselines written since (:data:`WRITTEN_SINCE`) are not from
before.

Every committed results file (baselines, fixtures, the history fixture's runs) was written at
``record_version`` 1: each record is migrated to the current version on reading, writes back as
exactly that migration, and it and its written-back form flatten to exactly what the harness at
record_version 1 flattened them to (``flattened_v1.json``, written by the harness at 17a1824)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import catalogue
from harness.results.compare import flatten_record
from harness.results.record import RECORD_VERSION, parse, upgrade

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "harness" / "fixtures"
FILES = {
    "nightly_amd_v1.jsonl": FIXTURES / "nightly_amd_v1.jsonl",
    "sweep_cpu8.jsonl": FIXTURES / "sweep_cpu8.jsonl",
    "rerun_cpu8.jsonl": FIXTURES / "rerun_cpu8.jsonl",
    "tpu_b181d3b.jsonl": FIXTURES / "tpu_b181d3b.jsonl",
}
# The CPU baseline's version-1 records (its AMD EPYC class) left it when it was re-written for the
# attention normalised after the value matmul (issue 45): kept verbatim in nightly_amd_v1.jsonl.
BEFORE = json.loads((FIXTURES / "flattened_b181d3b.json").read_text())
BEFORE["nightly_amd_v1.jsonl"] = BEFORE.pop("nightly.jsonl")
V1 = json.loads((FIXTURES / "flattened_v1.json").read_text())
V1["tests/harness/fixtures/nightly_amd_v1.jsonl"] = V1["reports/baselines/nightly.jsonl"]
WRITTEN_SINCE = {"nightly-tpu.jsonl", "nightly.jsonl"}  # the gates' baselines, re-written by design
SINCE = {
    "traffic.hbm_bytes",
    "cost.matmul_flops",
    "scope.<scope>.traffic_bytes",
    "scope.<scope>.flops",
    "scope.<scope>.collectives.<kind>.count",
    "scope.<scope>.collectives.<kind>.bytes",
    "predicted.scope.<scope>.time_s",
    *(CATALOGUED_SINCE_V1 := {"predicted.flops_utilization"}),  # read from the XProf profile the records had
}


def _lines(path: Path) -> list[dict]:
    """The file's records written at ``record_version`` 1, in order; records appended since (the
    nightly baseline's ``vae-decode-context``, 8fbe0a9) are at the current version and not from before."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert {raw["record_version"] for raw in lines} <= {1, RECORD_VERSION}
    assert [raw["record_version"] for raw in lines] == sorted(raw["record_version"] for raw in lines)
    return [raw for raw in lines if raw["record_version"] == 1]


def _flat(record) -> dict[str, list]:
    return {
        f"{stage}|{metric}": [v.value, len(v.samples), round(sum(v.samples), 12), len(v.rounds), v.loaded]
        for (stage, metric), v in sorted(flatten_record(record).items())
        if catalogue.template(metric) not in SINCE
    }


def test_every_committed_results_file_is_covered() -> None:
    committed = {p.name for p in (ROOT / "reports" / "baselines").glob("*.jsonl")} - WRITTEN_SINCE | {
        p.name for p in FIXTURES.glob("*.jsonl")
    }
    assert committed == set(FILES) == set(BEFORE)


@pytest.mark.parametrize("name", sorted(FILES))
def test_records_from_before_read_identically(name: str) -> None:
    lines = _lines(FILES[name])
    records = [parse(raw, f"{name}:{i + 1}") for i, raw in enumerate(lines)]
    assert [r.to_dict() for r in records] == [upgrade(raw) for raw in lines]
    assert [{"variant": r.variant.name, "metrics": _flat(r)} for r in records] == BEFORE[name]
    assert sum(len(r["metrics"]) for r in BEFORE[name]) >= 30 * len(lines) // 2


def test_metrics_catalogued_since_come_from_fields_the_records_had() -> None:
    raw = json.loads(FILES["nightly_amd_v1.jsonl"].read_text().splitlines()[0])
    record = parse(raw, "nightly_amd_v1.jsonl:1")
    static = raw["stages"]["denoise_step"]["static"]
    flat = {metric: v.value for (_, metric), v in flatten_record(record).items()}
    assert flat["traffic.hbm_bytes"] == static["memory_traffic_bytes"]
    assert flat["cost.matmul_flops"] == static["matmul_flops"]


def _full(record) -> dict[str, list]:
    return {
        f"{s}|{m}": [v.value, len(v.samples), round(sum(v.samples), 12), len(v.rounds), v.loaded, v.model, v.program]
        for (s, m), v in sorted(flatten_record(record).items())
        if m not in CATALOGUED_SINCE_V1
    }


def test_the_flops_utilization_catalogued_since_is_the_xprof_profiles() -> None:
    raw = json.loads((ROOT / "reports" / "baselines" / "nightly-tpu.jsonl").read_text().splitlines()[0])
    flat = {metric: v.value for (_, metric), v in flatten_record(parse(raw, "nightly-tpu.jsonl:1")).items()}
    root = raw["stages"]["denoise_step"]["predicted"]["xprof"]["root"]
    assert flat["predicted.flops_utilization"] == root["flops_utilization"] > 0


def test_every_committed_results_file_was_flattened_at_version_1() -> None:
    committed = [*ROOT.glob("reports/baselines/*.jsonl"), *FIXTURES.glob("**/*.jsonl")]
    assert sorted(str(p.relative_to(ROOT)) for p in committed) == sorted(V1)
    assert len(V1) >= 29 and sum(len(m) for recs in V1.values() for m in recs) >= 2500


@pytest.mark.parametrize("rel", sorted(V1))
def test_records_of_version_1_migrate_and_flatten_identically(rel: str) -> None:
    lines = _lines(ROOT / rel)
    if not lines and Path(rel).name in WRITTEN_SINCE:  # the gates' baselines are re-written by design
        pytest.skip(f"{rel}: re-baselined at record_version {RECORD_VERSION} since; no version-1 record left")
    assert lines
    records = [parse(raw, f"{rel}:{i + 1}") for i, raw in enumerate(lines)]
    written = [r.to_dict() for r in records]
    assert {w["record_version"] for w in written} == {RECORD_VERSION} != {1}
    assert written == [upgrade(raw) for raw in lines]
    again = [parse(w, rel) for w in written]
    assert [_full(r) for r in records] == [_full(r) for r in again] == V1[rel]
