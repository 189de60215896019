"""Step and XProf all-gather wasted share of each rung of a compile-only sweep, priced twice on the same
cached programs: a chip's ICI ports divided by its devices (the rule before SIMULATOR_VERSION 4) and by
the collective's groups on the chip (:mod:`harness.metrics.timeline.groups`). One simulation each, no
interval (benchmarks/results/maxdiffusion-ladder-2026-11-29.md):

    PYTHONPATH=$PWD python benchmarks/chip_ports_before_after.py <sweep>/results.jsonl <reports>/aot-cache out.json
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

from harness.metrics.hlo import parse
from harness.metrics.hlo.model import Groups
from harness.metrics.timeline import build_program, groups, simulate
from harness.metrics.timeline.specs import TimelineSpec, spec_from_dict
from harness.metrics.xprof.predicted import program_costs, xprof_entry


def _program_file(stage: dict[str, Any], cache: Path) -> Path:
    """The cached program whose static collectives are the stage's (one, or a clear error)."""
    found = [
        f.with_suffix("").with_suffix(".hlo.gz")
        for f in cache.glob("*.json")
        if not f.name.endswith(".predicted.json")
        and f.with_suffix("").with_suffix(".hlo.gz").exists()
        and json.loads(f.read_text()).get("static", {}).get("collectives") == stage["static"]["collectives"]
    ]
    if len(found) != 1:
        raise SystemExit(f"{cache}: {len(found)} cached programs match the stage's collectives, expected 1")
    return found[0]


def _per_device(found: Groups, spec: TimelineSpec) -> list[int | None]:
    """The old rule: no group count, so each route divides by the chip's devices."""
    return [None] * len(found)


def before_after(results: Path, cache: Path, stage_name: str = "denoise_loop") -> dict[str, Any]:
    """Per variant: ``before`` / ``after`` step (s) and AG wasted share, and the record's own."""
    out: dict[str, Any] = {}
    rule = groups.groups_sharing_chips
    for line in results.read_text().splitlines():
        record = json.loads(line)
        stage = record["stages"][stage_name]
        predicted = stage["predicted"]
        spec = spec_from_dict(predicted["spec"])
        program = build_program(parse(gzip.open(_program_file(stage, cache), "rt").read()))
        costs, opcodes = program_costs(program.ops)
        peaks = {"peak_flops_per_s": spec.value("peak_flops_per_s"), "hbm_bytes_per_s": spec.value("hbm_bytes_per_s")}
        row: dict[str, Any] = {}
        try:
            for label, sharing in (("before", _per_device), ("after", rule)):
                groups.groups_sharing_chips = sharing  # type: ignore[assignment]
                pred = simulate(program, spec)
                share = xprof_entry(pred.events, costs, opcodes, **peaks)["all_gather_wasted_fraction"]
                row[label] = {"step_s": pred.step_ns / 1e9, "ag_wasted": share}
        finally:
            groups.groups_sharing_chips = rule
        row["record"] = {"step_s": predicted["step_s"], "ag_wasted": predicted["xprof"]["all_gather_wasted_fraction"]}
        out[record["variant"]["name"]] = row
        print(record["variant"]["name"], json.dumps(row), flush=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    Path(sys.argv[3]).write_text(json.dumps(before_after(Path(sys.argv[1]), Path(sys.argv[2])), indent=1))
