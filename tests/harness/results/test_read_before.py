"""Records written before the catalogue and the typed records read the same today: the committed
gate baseline, every committed record fixture and a v6e and a v7x record (``tpu_b181d3b.jsonl``:
compile-only ``tiny`` sweeps on v6e:2x4 and tpu7x:2x2x1 written by the harness at b181d3b from an
export without git, so their ``git`` fields are null) flatten to exactly the metrics and values the
harness at b181d3b flattened them to (``flattened_b181d3b.json``, written by that harness), and
write back to the very JSON they were read from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.results.compare import flatten_record
from harness.results.record import parse

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "harness" / "fixtures"
FILES = {
    "nightly.jsonl": ROOT / "reports" / "baselines" / "nightly.jsonl",
    "sweep_cpu8.jsonl": FIXTURES / "sweep_cpu8.jsonl",
    "rerun_cpu8.jsonl": FIXTURES / "rerun_cpu8.jsonl",
    "tpu_b181d3b.jsonl": FIXTURES / "tpu_b181d3b.jsonl",
}
BEFORE = json.loads((FIXTURES / "flattened_b181d3b.json").read_text())


def _flat(record) -> dict[str, list]:
    return {
        f"{stage}|{metric}": [v.value, len(v.samples), round(sum(v.samples), 12), len(v.rounds), v.loaded]
        for (stage, metric), v in sorted(flatten_record(record).items())
    }


def test_every_committed_results_file_is_covered() -> None:
    committed = {p.name for p in (ROOT / "reports" / "baselines").glob("*.jsonl")} | {
        p.name for p in FIXTURES.glob("*.jsonl")
    }
    assert committed == set(FILES) == set(BEFORE)


@pytest.mark.parametrize("name", sorted(FILES))
def test_records_from_before_read_identically(name: str) -> None:
    lines = [json.loads(line) for line in FILES[name].read_text().splitlines() if line.strip()]
    records = [parse(raw, f"{name}:{i + 1}") for i, raw in enumerate(lines)]
    assert [r.to_dict() for r in records] == lines
    assert [{"variant": r.variant.name, "metrics": _flat(r)} for r in records] == BEFORE[name]
    assert sum(len(r["metrics"]) for r in BEFORE[name]) >= 30 * len(lines) // 2
