"""Print the static metrics of one variant without timing it: compile time, cost, memory, tokens,
the on-target analysis, collectives, the top scopes by FLOPs / bytes / collective bytes and the top
collective sites with their cause, as tables within 120 columns (``--json``: the record a sweep would
append, raw). The variant is compiled in its own worker process, exactly as a sweep would, and nothing
is appended to any results file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import textwrap
from pathlib import Path

from harness.vocabulary import Status

HELP = "static metrics of one variant, without timing"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml")
    parser.add_argument("--variant", metavar="NAME|ID", help="variant name or id prefix (default: the first)")
    parser.add_argument("--json", action="store_true", help="print the raw record (JSON) instead of tables")
    parser.add_argument("--top", type=int, default=8, help="rows per top-N table (default: 8)")


def run(args: argparse.Namespace) -> int:
    from harness.expansion import load_sweep  # the model loads only when a verb needs it
    from harness.plan.variants import select
    from harness.report.static_text import format_static
    from harness.results.record import build_record
    from harness.run.launcher import LocalLauncher
    from harness.run.runner import CACHE_DIR, context, worker_spec

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
    record = build_record(
        sweep_id=sweep.manifest.name,
        manifest=sweep.manifest,
        variant=variant,
        run=static_only,
        outcome=outcome,
        context=context(),
        log_path="",
    )
    if args.json:
        print(json.dumps(record.to_dict(), indent=2))
    else:
        mesh = variant.target.mesh_shape
        print(
            f"{variant.name} ({variant.id}): preset {variant.preset}, {variant.target.platform} mesh {mesh}, "
            f"mode {record.target.mode_used}, {outcome.status}"
        )
        for name, entry in record.stages.items():
            print(f"\nstage {name}: {entry.status}")
            for note in entry.notes:
                print("\n".join(textwrap.wrap(note, 118, initial_indent="  note: ", subsequent_indent="    ")))
            if entry.static:
                print("\n".join(format_static(entry.static, top=args.top)))
            if entry.error:
                print("  " + entry.error.strip().replace("\n", "\n  "))
        if outcome.status != Status.OK and not record.stages:
            print(outcome.error or "", file=sys.stderr)
    return 0 if outcome.status == Status.OK else 1
