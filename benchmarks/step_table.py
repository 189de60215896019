"""One markdown row per record of a variant of a compile-only sweep (:func:`harness.report.export.step_row`:
predicted step [interval], matmul FLOPs, HBM traffic, collective operand bytes by kind and peak
memory, per device and step). With ``--repredicted`` (JSON lines of ``variant``, ``new_ms``,
``interval_ms``, ``new_traffic_gb``: a re-prediction of older records from their cached programs),
those replace the record's step, interval and traffic.

    python benchmarks/step_table.py <results.jsonl> <variant> [--repredicted <jsonl>]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.report.export import step_row
from harness.results.store import load_records


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path)
    p.add_argument("variant")
    p.add_argument("--repredicted", type=Path)
    args = p.parse_args()
    replaced = {}
    if args.repredicted:
        replaced = {r["variant"]: r for r in map(json.loads, args.repredicted.read_text().splitlines()) if r}
    for record in load_records(args.results):
        if record.variant.name == args.variant and record.stages:
            print(step_row(record, replaced.get(args.variant)))


if __name__ == "__main__":
    main()
