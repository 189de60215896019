"""Print the static metrics of one variant (collectives, memory, cost, compile time)
without timing it. The variant is compiled in its own worker process, exactly as a
sweep would, and nothing is appended to any results file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.vocabulary import Status

HELP = "static metrics of one variant, without timing"
MIB = 2**20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml")
    parser.add_argument("--variant", metavar="NAME|ID", help="variant name or id prefix (default: the first)")
    parser.add_argument("--json", action="store_true", help="print the stages as JSON")


def _mib(v: Any) -> str:
    return "-" if v is None else f"{v / MIB:.2f}"


def format_static(static: Mapping[str, Any]) -> list[str]:
    lines = []
    timing = static.get("timing") or {}
    if timing:
        lines.append(f"  compile: lower {timing['lower_seconds']:.2f} s, compile {timing['compile_seconds']:.2f} s")
    cost = static.get("cost") or {}
    if cost:
        lines.append(
            f"  cost per device: flops {cost.get('flops') or 0:.4g}, bytes accessed "
            f"{cost.get('bytes_accessed') or 0:.4g} (loop bodies counted once)"
        )
    if static.get("analytic_flops") is not None:
        lines.append(f"  analytic model flops: {static['analytic_flops']:.4g}")
    memory = static.get("memory") or {}
    if memory:
        lines.append(
            "  memory per device MiB: "
            + ", ".join(
                f"{k.removesuffix('_bytes')} {_mib(memory.get(k))}"
                for k in ("argument_bytes", "output_bytes", "temp_bytes", "peak_bytes", "bound_bytes")
            )
        )
    by_kind = (static.get("collectives") or {}).get("by_kind") or {}
    if by_kind:
        lines.append(f"  {'collective':<22}{'count':>7}{'operand MiB':>14}{'result MiB':>13}")
        for kind, c in by_kind.items():
            if c.get("count"):
                lines.append(f"  {kind:<22}{c['count']:>7}{_mib(c['operand_bytes']):>14}{_mib(c['result_bytes']):>13}")
    known = {"timing", "cost", "memory", "collectives", "analytic_flops", "platform"}
    lines += [f"  {k}: {v}" for k, v in static.items() if k not in known]
    return lines


def run(args: argparse.Namespace) -> int:
    from harness.plan.variants import load_sweep, select  # the model loads only when a verb needs it
    from harness.run.launcher import LocalLauncher
    from harness.run.runner import CACHE_DIR, worker_spec

    sweep = load_sweep(args.manifest)
    try:
        variant = select(sweep.variants, [args.variant])[0] if args.variant else sweep.variants[0]
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    static_only = dataclasses.replace(sweep.manifest.run, metrics=("static",), trace=False, warmup=0)
    with tempfile.TemporaryDirectory(prefix="harness-inspect-") as tmp:
        spec = worker_spec(variant, static_only, Path(tmp) / "traces", Path("reports") / CACHE_DIR)
        outcome = LocalLauncher().run(spec, log_path=Path(tmp) / "worker.log")
    stages = outcome.result.get("stages") or {}
    if args.json:
        print(
            json.dumps(
                {
                    "variant": {"name": variant.name, "id": variant.id},
                    "status": outcome.status,
                    "error": outcome.error,
                    "machine": outcome.result.get("machine"),
                    "stages": {
                        s: {k: e.get(k) for k in ("status", "error", "notes", "static")} for s, e in stages.items()
                    },
                },
                indent=2,
            )
        )
    else:
        mesh = variant.target.mesh_shape
        print(
            f"{variant.name} ({variant.id}): preset {variant.preset}, {variant.target.platform} mesh {mesh}, "
            f"mode {outcome.result.get('mode_used')}, {outcome.status}"
        )
        for name, entry in stages.items():
            print(f"stage {name}: {entry['status']}")
            for note in entry.get("notes") or []:
                print(f"  note: {note}")
            if entry.get("static"):
                print("\n".join(format_static(entry["static"])))
            if entry.get("error"):
                print("  " + entry["error"].strip().replace("\n", "\n  "))
        if outcome.status != Status.OK and not stages:
            print(outcome.error or "", file=sys.stderr)
    return 0 if outcome.status == Status.OK else 1
