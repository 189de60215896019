"""Run a manifest: every variant in its own process, one record each, appended to
reports/<sweep-id>/results.jsonl. Re-running resumes: variants with an ok record are
skipped unless --rerun, or unless [run] changed what their samples are (repeats, warmup,
trace, metrics): those run again, and the sweep says so. One sweep at a time per sweep id
(a second one exits 2 naming the first). At the end the sweep's report (index.html,
results.csv) is written from every record in the file. A variant whose compiled memory
per device exceeds the device's is recorded as does-not-fit, not run.

Exit status: 0 every variant that ran succeeded (or did not fit), 1 one did not, 2 bad
manifest / results file / sweep id, or the sweep id is in use; 130 / 143 on SIGINT /
SIGTERM, after stopping the running worker and removing its temporary files (records
already written stay; run the same command again to resume)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.plan.manifest import Manifest

HELP = "run a manifest's variants and append their results"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml")
    parser.add_argument("--sweep-id", help="results go to <reports>/<sweep-id>/ (default: manifest name)")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")
    parser.add_argument("--rerun", action="store_true", help="run variants that already have an ok record")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME|ID",
                        help="run only these variants (repeatable; name or id prefix)")
    parser.add_argument("--list", action="store_true", help="list the variants and their ids, run nothing")
    parser.add_argument("--no-report", action="store_true", help="do not write index.html / results.csv at the end")


def run(args: argparse.Namespace) -> int:
    from harness.plan.variants import load_sweep, select  # the model loads only when a verb needs it
    from harness.run.runner import SweepOptions, run_sweep

    sweep = load_sweep(args.manifest)
    try:
        variants = select(sweep.variants, args.variant)
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    if args.list:
        for v in variants:
            print(f"{v.id}  {v.name}")
        return 0
    options = SweepOptions(reports_dir=args.reports, sweep_id=args.sweep_id, rerun=args.rerun,
                           only=tuple(args.variant))
    result = run_sweep(sweep, options)
    if not args.no_report:
        write_sweep_report(result.results_path, sweep.manifest)
    return 0 if result.ok else 1


def write_sweep_report(results_path: Path, manifest: Manifest) -> None:
    """The sweep's report from all its records (the latest per variant). A report that cannot be
    written is a warning: the records are already safe on disk and `harness report` can retry."""
    from harness.report import write_report  # matplotlib loads only here
    from harness.results import store as rec

    try:
        latest = list(rec.latest_by_variant(rec.load_records(results_path)).values())
        if not latest:
            return
        files = write_report(latest, results_path.parent, gate=manifest.gate, title=f"Sweep {results_path.parent.name}")
    except Exception as e:  # noqa: BLE001 - the sweep's results matter more than its page
        print(f"warning: could not write the report ({type(e).__name__}: {e}); "
              f"retry with: python -m harness report {results_path}", file=sys.stderr)
        return
    print(f"report: {files.index}")
