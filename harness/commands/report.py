"""Render reports/<sweep-id>/index.html (self-contained: inline CSS, embedded plots) and
results.csv from a results file, optionally compared with a baseline: a committed
baseline (reports/baselines/<name>.json), another results file or a sweep directory.
The report is a pure function of the records: nothing is re-run or re-parsed.
It goes next to a sweep's own results (reports/<sweep-id>/); for any other file (a
baseline, a copied .jsonl) to <reports>/<its name>-report/, never next to that file.
Exit status 2 if a file cannot be read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.plan.manifest import Gate, load_manifest
from harness.results import store as rec
from harness.results.baseline import BaselineError, load_records_any

HELP = "HTML report and CSV of a results file, optionally against a baseline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results", type=Path, help="results.jsonl or its sweep folder, a profile.json, a search.json")
    parser.add_argument("--baseline", type=Path, metavar="PATH", help="a baseline .json, results .jsonl or sweep dir")
    parser.add_argument(
        "--out", type=Path, metavar="DIR", help="default: the sweep's folder, else <reports>/<file name>-report/"
    )
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")
    parser.add_argument(
        "--reference",
        metavar="VARIANT",
        help="variant that speedups are relative to (default: the first that succeeded)",
    )
    parser.add_argument("--manifest", type=Path, help="take the comparison's thresholds from this manifest's [gate]")
    parser.add_argument("--title", help="page title (default: Sweep <sweep-id>)")


def _profile_result(path: Path) -> Path | None:
    """A ``harness profile`` result (``profile.json``, or a folder with one and no sweep results)."""
    from harness.report.profile import PROFILE_JSON

    if path.name == PROFILE_JSON:
        return path
    if path.is_dir() and (path / PROFILE_JSON).is_file() and not (path / "results.jsonl").exists():
        return path / PROFILE_JSON
    return None


def run(args: argparse.Namespace) -> int:
    from harness.report import write_report  # plotting and statistics load only when a report is made
    from harness.report.search import SEARCH_JSON
    from harness.report.search import write as write_search
    from harness.results.gate import same_machine

    profile = _profile_result(args.results)
    if profile is not None or args.results.name == SEARCH_JSON:  # a real profile predicted, a search: own pages
        from harness.report.profile import write as write_profile

        try:
            write = write_search if profile is None else write_profile
            print(f"wrote {write(profile or args.results, args.out)}")
        except (ValueError, KeyError, OSError) as e:
            print(f"error: {profile or args.results}: {e}", file=sys.stderr)
            return 2
        return 0

    try:
        records = list(rec.latest_by_variant(load_records_any(args.results)).values())
        if not records:
            print(f"error: no records in {args.results}", file=sys.stderr)
            return 2
        baseline = list(rec.latest_by_variant(load_records_any(args.baseline)).values()) if args.baseline else None
    except (BaselineError, rec.RecordError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    gate = load_manifest(args.manifest).gate if args.manifest else Gate()
    out = args.out or rec.output_dir(args.results, args.reports, f"{args.results.stem}-report")
    try:
        files = write_report(
            records,
            out,
            baseline=baseline,
            baseline_label=str(args.baseline or ""),
            gate=gate,
            reference=args.reference,
            title=args.title,
            timings=baseline is None or same_machine(baseline, records),
        )
    except KeyError as e:
        print(f"error: {e.args[0]}", file=sys.stderr)
        return 2
    from harness.report.console import summary_table
    from harness.report.xprof import console

    print(summary_table(records))
    published = console(records)
    if published:
        print(published)
    print(f"wrote {files.index} and {files.csv}")
    if files.comparison is not None:
        c = files.comparison
        print(
            f"against {args.baseline}: {len(c.regressions)} gated regressions, "
            f"{len(c.by_verdict('improved'))} improved, {len(c.by_verdict('noise'))} noise"
        )
    return 0
