"""Run a manifest: every variant in its own process, one record each, appended to
reports/<sweep-id>/results.jsonl. Re-running resumes: variants with an ok record are
skipped unless --rerun, or unless [run] changed what their samples are (repeats, warmup,
trace, metrics): those run again, and the sweep says so. One sweep at a time per sweep id
(a second one exits 2 naming the first). At the end the sweep's report (index.html,
results.csv) is written from every record in the file. A variant whose compiled memory
per device exceeds the device's is recorded as does-not-fit, not run. Compile-only variants run
side by side (--jobs N; by default as many as the cores and memory allow), before the measured
ones, which always run alone; records and ids are the same as one at a time.

Exit status: 0 every variant that ran succeeded (or did not fit), 1 one did not, 2 bad
manifest / results file / sweep id, or the sweep id is in use; 3 the disk refused a write
(full, read-only, the folder vanished or is a file: one line names the cause and the path;
records already written stay whole); 130 / 143 on SIGINT / SIGTERM, after stopping the
running worker and removing its temporary files (records already written stay; run the
same command again to resume).

On a cluster: --launcher xpk submits one `xpk workload create` per variant (--cluster,
--tpu-type, --docker-image, --results-dir: a folder this machine and the workloads share, e.g.
a GCS FUSE mount); `python -m harness collect <results-dir>/<sweep-id>` makes the records.
--dry-run prints the xpk commands and writes nothing. Re-running skips variants submitted
or collected already."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from harness.plan.manifest import Manifest

HELP = "run a manifest's variants and append their results"
LAUNCHERS = ("local", "xpk")
XPK_REQUIRED = ("cluster", "tpu_type", "docker_image", "results_dir")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml")
    parser.add_argument("--sweep-id", help="results go to <reports>/<sweep-id>/ (default: manifest name)")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")
    parser.add_argument("--rerun", action="store_true", help="run variants that already have an ok record")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME|ID",
        help="run only these (repeatable; name or id prefix)",
    )
    parser.add_argument("--list", action="store_true", help="list the variants and their ids, run nothing")
    parser.add_argument("--no-report", action="store_true", help="do not write index.html / results.csv at the end")
    parser.add_argument(
        "--jobs",
        type=_positive,
        metavar="N",
        help="compile-only variants at once (default: as many as the cores and the memory allow, sized by "
        "the peak memory of earlier compiles); measured variants always run alone",
    )
    cluster = parser.add_argument_group("cluster launchers")
    cluster.add_argument("--launcher", choices=LAUNCHERS, default="local", help="where variants run (default: local)")
    cluster.add_argument("--cluster", help="xpk: the GKE cluster")
    cluster.add_argument("--tpu-type", help="xpk: the slice per variant, e.g. v6e-16")
    cluster.add_argument("--docker-image", help="xpk: an image with this checkout installed")
    cluster.add_argument("--results-dir", type=Path, help="xpk: shared folder; the sweep goes to <dir>/<sweep-id>/")
    cluster.add_argument("--project", help="xpk: GCP project (default: gcloud's)")
    cluster.add_argument("--zone", help="xpk: GCP zone (default: gcloud's)")
    cluster.add_argument("--dry-run", action="store_true", help="print the launcher's commands, run nothing")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number >= 1, got {text!r}")
    return n


def _xpk(args: argparse.Namespace, sweep_id: str) -> Any:
    """The xpk launcher the flags describe; ValueError naming what is missing."""
    from harness.run.launcher_xpk import XpkLauncher, XpkOptions

    missing = [f"--{k.replace('_', '-')}" for k in XPK_REQUIRED if not getattr(args, k)]
    if missing:
        raise ValueError(f"--launcher xpk needs {', '.join(missing)}")
    options = XpkOptions(args.cluster, args.tpu_type, args.docker_image, args.results_dir, args.project, args.zone)
    return XpkLauncher(options, sweep_id, dry_run=args.dry_run)


def run(args: argparse.Namespace) -> int:
    from harness.expansion import load_sweep  # the model loads only when a verb needs it
    from harness.plan.variants import select
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
    options = SweepOptions(
        reports_dir=args.reports, sweep_id=args.sweep_id, rerun=args.rerun, only=tuple(args.variant), jobs=args.jobs
    )
    launcher = None
    if args.launcher == "xpk":
        from harness.results.store import check_sweep_id
        from harness.run.runner import worker_spec

        sweep_id = check_sweep_id(args.sweep_id or sweep.manifest.name)
        try:
            launcher = _xpk(args, sweep_id)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if args.dry_run:  # the exact commands, nothing written
            for v in variants:
                launcher.run(worker_spec(v, sweep.manifest.run, Path()), log_path=Path(os.devnull))
            return 0
        options = dataclasses.replace(options, reports_dir=args.results_dir, sweep_id=sweep_id)
        launcher.sweep_dir.mkdir(parents=True, exist_ok=True)
        (launcher.sweep_dir / "manifest.toml").write_text(sweep.manifest.source)
    elif args.dry_run:
        print("error: --dry-run prints a cluster launcher's commands: use it with --launcher xpk", file=sys.stderr)
        return 2
    result = run_sweep(sweep, options, launcher=launcher)
    if not args.no_report:
        write_sweep_report(result.results_path, sweep.manifest)
    return 0 if result.ok else 1


def write_sweep_report(results_path: Path, manifest: Manifest) -> None:
    """The sweep's report from all its records (the latest per variant). A report that cannot be
    rendered is a warning: the records are already safe on disk and `harness report` can retry; one
    the disk refuses is a :class:`~harness.results.storage.StorageError` (exit 3), the old page kept."""
    from harness.report import write_report  # matplotlib loads only here
    from harness.results import store as rec
    from harness.results.storage import StorageError

    try:
        latest = list(rec.latest_by_variant(rec.load_records(results_path)).values())
        if not latest:
            return
        files = write_report(latest, results_path.parent, gate=manifest.gate, title=f"Sweep {results_path.parent.name}")
    except OSError as e:  # the machine's storage: exit 3 naming the file; the same command again writes it
        raise StorageError(
            getattr(e, "cause", e),
            getattr(e, "path", None) or e.filename or results_path.parent,
            getattr(e, "doing", "writing the report in"),
            f"{getattr(e, 'hint', '') or 'then run the same command again'} (the records are safe in "
            f"{results_path}; or: python -m harness report {results_path})",
        ) from e
    except Exception as e:  # noqa: BLE001 - the sweep's results matter more than its page
        print(
            f"warning: could not write the report ({type(e).__name__}: {e}); "
            f"retry with: python -m harness report {results_path}",
            file=sys.stderr,
        )
        return
    print(f"report: {files.index}")
