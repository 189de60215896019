"""Run a manifest: every variant in its own process, one record each, appended to
reports/<sweep-id>/results.jsonl. Re-running resumes: variants with an ok record are
skipped unless --rerun. Exit status 1 if any variant that ran did not succeed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.manifest import load_manifest
from harness.runner import SweepOptions, run_sweep
from harness.variants import select

HELP = "run a manifest's variants and append their results"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml")
    parser.add_argument("--sweep-id", help="results go to <reports>/<sweep-id>/ (default: manifest name)")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")
    parser.add_argument("--rerun", action="store_true", help="run variants that already have an ok record")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME|ID",
                        help="run only these variants (repeatable; name or id prefix)")
    parser.add_argument("--list", action="store_true", help="list the variants and their ids, run nothing")


def run(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.manifest)
    try:
        variants = select(manifest.expand(), args.variant)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        for v in variants:
            print(f"{v.id}  {v.name}")
        return 0
    options = SweepOptions(reports_dir=args.reports, sweep_id=args.sweep_id, rerun=args.rerun,
                           only=tuple(args.variant))
    return 0 if run_sweep(manifest, options).ok else 1
