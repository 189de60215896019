"""Perf gate: run a manifest (or take --results) and compare it with its committed baseline,
[gate] baseline, else reports/baselines/<manifest>-<backend key>.json (or --baseline).

Prints one line per failing metric (variant, stage, metric, baseline, now, ratio and
the test's verdict), writes index.html with the comparison and gate.json to the sweep's
folder (reports/<sweep-id>/; with --results, that sweep's folder, or reports/<sweep-id>/
for a file that is not a sweep's results.jsonl, e.g. a baseline), and exits

    0  no regression
    1  regression in at least one gated metric
    2  the gate could not run: bad manifest, missing or mismatched baseline, a failed
       variant, too few repeats for the timing test to fire, or any internal error
    3  the model changed: predicted metrics were priced by another timeline spec or simulator
       version than the baseline's (nothing else regressed); re-baseline on purpose, saying why

Timings are gated only when run and baseline come from the same kind of machine
(--timings auto); deterministic metrics (collectives, memory, FLOPs, recompiles)
always are. Tolerances, the timing ratio and alpha come from the manifest's [gate].

--against REV re-measures the baseline instead of reading it: REV is checked out in
a temporary git worktree, and each variant runs alternately from that tree and from
this one, --rounds times per side (base/head, then head/base, ...), so a busy or
throttled period of the machine hits both sides; timing samples are pooled per side."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from harness import revision
from harness.plan.manifest import ManifestError
from harness.results import baseline as bl
from harness.results import store as rec
from harness.results.lock import SweepLocked
from harness.results.record import Record

if TYPE_CHECKING:
    from harness.plan.variants import Sweep
    from harness.results.gate import GateResult

ERROR = 2  # == harness.results.gate.ERROR; the model, stats and plotting load only when the gate runs
TIMINGS = ("auto", "on", "off")
HELP = "compare a run with its committed baseline; exit 0 clean, 1 regression, 2 could not run"
FAILURE_KEYS = ("variant", "stage", "metric", "baseline", "now", "ratio", "verdict", "detail")  # gate.json's


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml")
    parser.add_argument(
        "--results", type=Path, metavar="PATH", help="gate these results (.jsonl or sweep dir) instead of a run"
    )
    parser.add_argument("--baseline", type=Path, metavar="PATH", help="baseline file (default: from the manifest)")
    parser.add_argument(
        "--baselines-dir",
        type=Path,
        default=bl.BASELINES_DIR,
        metavar="DIR",
        help=f"where named baselines live (default: {bl.BASELINES_DIR})",
    )
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")
    parser.add_argument("--sweep-id", help="results go to <reports>/<sweep-id>/ (default: <manifest>-gate)")
    parser.add_argument(
        "--timings",
        choices=TIMINGS,
        default="auto",
        help="gate timings: auto (only if same machine as the baseline), on, off",
    )
    parser.add_argument("--against", metavar="REV", help="re-measure the baseline at REV, interleaved with this tree")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per side with --against")


def _run_or_load(args: argparse.Namespace, sweep: Sweep) -> tuple[list[Record], Path]:
    if args.results is not None:
        records = list(rec.latest_by_variant(bl.load_records_any(args.results)).values())
        return records, rec.output_dir(args.results, args.reports, _sweep_id(args, sweep.name))
    from harness.run.runner import SweepOptions, run_sweep

    options = SweepOptions(reports_dir=args.reports, sweep_id=_sweep_id(args, sweep.name), rerun=True)
    result = run_sweep(sweep, options)
    return result.records, result.results_path.parent


REPO_ROOT = Path(__file__).resolve().parents[2]


def _sweep_id(args: argparse.Namespace, manifest_name: str) -> str:
    return rec.check_sweep_id(args.sweep_id or f"{manifest_name}-gate")


def missing_baseline(args: argparse.Namespace, path: Path) -> str:
    """Why the gate cannot run without a baseline, and the commands that write the one it reads, to paste."""
    write = ["python", "-m", "harness", "baseline", "update"]
    target = ["--manifest", str(args.manifest), "--out", str(path)]
    if args.results is not None:
        steps = [write + [str(args.results)] + target]
    else:
        reports, sweep_id = args.reports, _sweep_id(args, args.manifest.stem)
        steps = [
            ["python", "-m", "harness", "sweep", str(args.manifest), "--reports", str(reports), "--sweep-id", sweep_id],
            write + [str(rec.results_path(reports, sweep_id))] + target,
        ]
    return f"no baseline at {path}; write it on purpose from a run you trust, then commit it:\n  " + " && ".join(
        shlex.join(step) for step in steps
    )


def _latest(reports: Path, sweep_id: str) -> list[Record]:
    return list(rec.latest_by_variant(rec.load_records(rec.results_path(reports, sweep_id))).values())


def interleaved(
    sweep: Sweep, base_tree: Path, head_tree: Path, rounds: int, reports: Path, sweep_id: str
) -> tuple[list[Record], list[Record], Path]:
    """Baseline and head records measured alternately, variant by variant, pooled over rounds.

    Round r runs every variant once per side, base then head for even r and head then
    base for odd r, so that each variant's two sides are seconds apart and a slow
    period of the machine lands on both. Timing samples are pooled per side.
    """
    from harness.results.gate import pool_rounds

    if rounds < 1:
        raise ValueError(f"--rounds must be >= 1, got {rounds}")
    path, reports = sweep.manifest.path.resolve(), reports.resolve()
    names = [v.name for v in sweep.variants]
    for i in range(rounds):
        for name in names:
            sides = [("base", base_tree), ("head", head_tree)]
            for side, tree in sides if i % 2 == 0 else sides[::-1]:
                print(f"round {i + 1}/{rounds} {side}: {name}", file=sys.stderr, flush=True)
                revision.sweep_at(tree, path, reports, f"{sweep_id}-{side}-{i + 1}", name)
    base = pool_rounds([_latest(reports, f"{sweep_id}-base-{i + 1}") for i in range(rounds)])
    head = pool_rounds([_latest(reports, f"{sweep_id}-head-{i + 1}") for i in range(rounds)])
    out = reports / sweep_id
    out.mkdir(parents=True, exist_ok=True)
    (out / rec.RESULTS_FILE).write_text("".join(rec.to_line(r) for r in head))
    return base, head, out


def gate(args: argparse.Namespace) -> tuple[GateResult, Path | None]:
    from harness.expansion import load_sweep
    from harness.report import write_report
    from harness.results.gate import GateResult, evaluate, for_class

    sweep = load_sweep(args.manifest)
    manifest = sweep.manifest
    if args.against:
        sweep_id = _sweep_id(args, manifest.name)
        with revision.checkout(REPO_ROOT, args.against) as tree:
            base_records, records, out = interleaved(sweep, tree, REPO_ROOT, args.rounds, args.reports, sweep_id)
        label = f"{args.against} (re-measured, {args.rounds} interleaved rounds)"
    else:
        path = args.baseline or bl.path_for(manifest, args.baselines_dir)
        if not path.exists():  # known before running anything
            raise bl.BaselineError(missing_baseline(args, path))
        base = bl.load(path)
        expected = bl.sweep_key(sweep.variants)
        if base.key != expected:
            return GateResult(
                ERROR,
                None,
                problems=[
                    f"baseline {path} is for {base.key}, this manifest targets "
                    f"{expected}; baselines are per backend and topology"
                ],
            ), None
        records, out = _run_or_load(args, sweep)
        base_records, label = for_class(base.records, records), str(path)
    result = evaluate(base_records, records, manifest.gate, timings=args.timings)
    if records:
        write_report(
            records, out, baseline=base_records, baseline_label=label, gate=manifest.gate, timings=result.timings_gated
        )
        failures = [{k: getattr(c, k) for k in FAILURE_KEYS} for c in result.failures]
        summary = {"exit_code": result.exit_code, "baseline": label, "problems": result.problems, "failures": failures}
        summary |= {"model_changes": result.model_changes, "notes": result.notes}
        (out / "gate.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    return result, out


def run(args: argparse.Namespace) -> int:
    # Whatever goes wrong here is "could not run" (2), never a regression (1): an uncaught
    # Python exception would exit 1 and read as a perf regression in CI.
    try:
        result, out = gate(args)
    except (ManifestError, bl.BaselineError, rec.RecordError, SweepLocked, OSError, ValueError) as e:
        print(f"GATE ERROR  {e}", file=sys.stderr)
        print(f"gate could not run (exit {ERROR})")
        return ERROR
    except Exception:
        print("GATE ERROR  internal error:\n" + traceback.format_exc(), file=sys.stderr)
        print(f"gate could not run (exit {ERROR})")
        return ERROR
    print("\n".join(result.lines()))
    if out is not None:
        print(f"report: {out / 'index.html'}")
    return result.exit_code
