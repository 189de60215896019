"""One markdown row per (record, variant) of a compile-only sweep: the predicted step [interval],
matmul FLOPs, HBM traffic, collective operand bytes by kind and peak memory, per device and step.

A ``denoise_loop`` variant named ``...-loop`` or ``...-loop-<suffix>`` (one scanned program of the
workload's steps) is divided by the workload's steps, so it reads per step. With ``--repredicted`` (JSON lines of
``variant``, ``new_ms``, ``interval_ms``, ``new_traffic_gb``: a re-prediction of older records from
their cached programs), those replace the record's step, interval and traffic.

    python benchmarks/step_table.py <results.jsonl> <variant> [--repredicted <jsonl>]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

KINDS = ("all-gather", "all-reduce", "all-to-all")


def row(record: dict[str, Any], replaced: dict[str, Any] | None = None) -> str:
    name = record["variant"]["name"]
    stage, entry = next(iter(record["stages"].items()))
    static, predicted = entry["static"], entry["predicted"]
    looped = name.endswith("-loop") or "-loop-" in name
    per = record["config"]["workload"]["steps"] if stage == "denoise_loop" and looped else 1
    if replaced:
        step, (lo, hi), traffic = replaced["new_ms"], replaced["interval_ms"], replaced["new_traffic_gb"]
    else:
        step, traffic = predicted["step_s"] * 1e3, static["memory_traffic_bytes"] / 1e9
        lo, hi = (v * 1e3 for v in predicted["uncertainty"]["interval_s"])
    kinds = (static.get("collectives") or {}).get("by_kind") or {}
    coll = " / ".join(f"{(kinds.get(k) or {}).get('operand_bytes', 0) / 1e9 / per:.1f}" for k in KINDS)
    peak = (static.get("memory") or {}).get("peak_bytes", 0) / 2**30
    tflop, when = static.get("matmul_flops", 0) / 1e12 / per, f"{step / per:.1f} [{lo / per:.1f}-{hi / per:.1f}]"
    return f"| {name} | {when} | {tflop:.1f} | {traffic / per:.1f} | {coll} | {peak:.1f} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path)
    p.add_argument("variant")
    p.add_argument("--repredicted", type=Path)
    args = p.parse_args()
    replaced = {}
    if args.repredicted:
        replaced = {r["variant"]: r for r in map(json.loads, args.repredicted.read_text().splitlines()) if r}
    for line in args.results.read_text().splitlines():
        record = json.loads(line)
        if record["variant"]["name"] == args.variant and record.get("stages"):
            print(row(record, replaced.get(args.variant)))


if __name__ == "__main__":
    main()
