"""Perf gate: run a manifest (or take --results) and compare it with its committed baseline,
[gate] baseline, else reports/baselines/<manifest>-<backend key>.json (or --baseline).

Prints one line per failing metric (variant, stage, metric, baseline, now, ratio and
the test's verdict), writes index.html with the comparison and gate.json next to the
results, and exits

    0  no regression
    1  regression in at least one gated metric
    2  the gate could not run: bad manifest, missing or mismatched baseline, a failed
       variant, too few repeats for the timing test to fire, or any internal error

Timings are gated only when run and baseline come from the same kind of machine
(--timings auto); deterministic metrics (collectives, memory, FLOPs, recompiles)
always are. Tolerances, the timing ratio and alpha come from the manifest's [gate]."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import baseline as bl
from harness import records as rec
from harness.manifest import Manifest, ManifestError, load_manifest

if TYPE_CHECKING:
    from harness.gate import GateResult

ERROR = 2  # == harness.gate.ERROR; stats and plotting load only when the gate runs
TIMINGS = ("auto", "on", "off")
HELP = "compare a run with its committed baseline; exit 0 clean, 1 regression, 2 could not run"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml")
    parser.add_argument("--results", type=Path, metavar="PATH",
                        help="gate these results (.jsonl or sweep dir) instead of running the manifest")
    parser.add_argument("--baseline", type=Path, metavar="PATH", help="baseline file (default: from the manifest)")
    parser.add_argument("--baselines-dir", type=Path, default=bl.BASELINES_DIR, metavar="DIR",
                        help=f"where named baselines live (default: {bl.BASELINES_DIR})")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")
    parser.add_argument("--sweep-id", help="results go to <reports>/<sweep-id>/ (default: <manifest>-gate)")
    parser.add_argument("--timings", choices=TIMINGS, default="auto",
                        help="gate timings: auto (only if same machine as the baseline), on, off")


def _run_or_load(args: argparse.Namespace, manifest: Manifest) -> tuple[list[dict[str, Any]], Path]:
    if args.results is not None:
        records = list(rec.latest_by_variant(bl.load_records_any(args.results)).values())
        out = args.results if args.results.is_dir() else args.results.parent
        return records, out
    from harness.runner import SweepOptions, run_sweep

    options = SweepOptions(reports_dir=args.reports, sweep_id=args.sweep_id or f"{manifest.name}-gate", rerun=True)
    result = run_sweep(manifest, options)
    return result.records, result.results_path.parent


def gate(args: argparse.Namespace) -> tuple[GateResult, Path | None]:
    from harness.gate import GateResult, evaluate
    from harness.report import write_report

    manifest = load_manifest(args.manifest)
    path = args.baseline or bl.path_for(manifest, args.baselines_dir)
    base = bl.load(path)  # before running anything: a missing baseline is known up front
    expected = bl.target_key(manifest.target)
    if base.key != expected:
        return GateResult(ERROR, None, problems=[f"baseline {path} is for {base.key}, this manifest targets "
                                                 f"{expected}; baselines are per backend and topology"]), None
    records, out = _run_or_load(args, manifest)
    result = evaluate(base.records, records, manifest.gate, timings=args.timings)
    if records:
        write_report(records, out, baseline=base.records, baseline_label=str(path), gate=manifest.gate,
                     timings=result.timings_gated)
        (out / "gate.json").write_text(json.dumps({
            "exit_code": result.exit_code, "baseline": str(path), "problems": result.problems,
            "failures": [{"variant": c.variant, "stage": c.stage, "metric": c.metric, "baseline": c.baseline,
                          "now": c.now, "ratio": c.ratio, "verdict": c.verdict, "detail": c.detail}
                         for c in result.failures],
            "notes": result.notes}, indent=1, default=str) + "\n")
    return result, out


def run(args: argparse.Namespace) -> int:
    # Whatever goes wrong here is "could not run" (2), never a regression (1): an uncaught
    # Python exception would exit 1 and read as a perf regression in CI.
    try:
        result, out = gate(args)
    except (ManifestError, bl.BaselineError, rec.RecordError, OSError) as e:
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
