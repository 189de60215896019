"""Manage gate baselines in reports/baselines/ (committed; one per backend and topology).

    baseline update <results>   write a baseline from a results file, on purpose
                                (refuses failed variants); where: --out PATH, else where
                                --manifest's gate reads it, else <dir>/<name>.json
    baseline update <manifest>  run the manifest afresh (every variant, reports/<stem>-baseline/)
                                and write the baseline where its gate reads it: one command to
                                re-baseline, e.g. after the timeline spec changed (commit the
                                file saying why)
    baseline show <name|path>   what a baseline holds

The default name is <manifest>-<backend key>, e.g. nightly-cpu-8dev, which is the
name `harness gate experiments/nightly.toml` looks for on that backend. Exit status
2 if nothing could be written or read."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.plan.manifest import ManifestError, load_manifest
from harness.results import baseline as bl
from harness.results import store as rec
from harness.results.lock import SweepLocked

HELP = "write (update) or show a gate baseline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    update = actions.add_parser("update", help="write a baseline from a results file")
    update.add_argument("results", type=Path, help="results.jsonl or its sweep folder, or a manifest (.toml) to run")
    update.add_argument("--reports", type=Path, default=Path("reports"), help="where a manifest's run goes")
    update.add_argument("--name", help="baseline name (default: <manifest>-<backend key>)")
    update.add_argument("--manifest", type=Path, help="write where its gate looks; refuses another backend's records")
    update.add_argument("--out", type=Path, metavar="PATH", help="this file (.json: a baseline, .jsonl: bare records)")
    update.add_argument("--dir", type=Path, default=bl.BASELINES_DIR, help=f"default: {bl.BASELINES_DIR}")
    show = actions.add_parser("show", help="summarise a baseline")
    show.add_argument("baseline", help="a name in --dir or a path to a .json")
    show.add_argument("--dir", type=Path, default=bl.BASELINES_DIR, help=f"default: {bl.BASELINES_DIR}")


def _run_manifest(manifest: Path, reports: Path) -> Path:
    """Run every variant of ``manifest`` afresh; its results file (BaselineError if one failed)."""
    from harness.expansion import load_sweep
    from harness.run.runner import SweepOptions, run_sweep

    sweep = load_sweep(manifest)
    sweep_id = rec.check_sweep_id(f"{sweep.name}-baseline")
    result = run_sweep(sweep, SweepOptions(reports_dir=reports, sweep_id=sweep_id, rerun=True))
    return result.results_path


def update(args: argparse.Namespace) -> int:
    if args.results.suffix == ".toml":
        args.manifest = args.manifest or args.results
        if args.manifest != args.results:
            raise bl.BaselineError(f"a manifest to run ({args.results}) and --manifest {args.manifest} disagree")
        args.results = _run_manifest(args.results, args.reports)
    records = bl.load_records_any(args.results)
    data = bl.build(records, name=args.name, source=str(args.results))
    path = bl.baseline_path(data["name"], args.dir)
    if args.manifest is not None:
        from harness.expansion import load_sweep

        manifest = load_manifest(args.manifest)
        expected = bl.sweep_key(load_sweep(args.manifest).variants)
        if data["key"] != expected:
            raise bl.BaselineError(f"{args.results} ran on {data['key']}, {args.manifest} targets {expected}")
        if not args.name:
            path = bl.path_for(manifest, args.dir)
    if args.out is not None:
        path = args.out
    data["name"] = path.stem
    path = bl.write(path, data)
    commit = (data.get("git") or {}).get("commit") or "unknown commit"
    print(
        f"wrote {path}: {len(data['records'])} variants, backend {data['key']}, from {args.results} "
        f"({commit[:12]}); commit it to make it the gate's reference"
    )
    return 0


def show(args: argparse.Namespace) -> int:
    from harness.report.tables import stage_rows

    path = (
        Path(args.baseline)
        if args.baseline.endswith((".json", ".jsonl"))
        else bl.baseline_path(args.baseline, args.dir)
    )
    base = bl.load(path)
    print(
        f"{path}: {base.name}, backend {base.key}, {len(base.records)} variants, commit {base.commit}, "
        f"from {base.source or '?'}"
    )
    for row in stage_rows(base.records):
        time = f"{row.time.median * 1e3:.3f} ms (n={row.time.n})" if row.time else "-"
        print(f"  {row.variant:<24} {row.stage:<14} {time:>22}  collectives {row.collective_count or 0:g}")
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return update(args) if args.action == "update" else show(args)
    except (bl.BaselineError, rec.RecordError, ManifestError, SweepLocked, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
