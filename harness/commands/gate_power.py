"""The timing gate's error rates on this machine: python -m harness gate-power MANIFEST.

Runs the manifest --runs times (or reads --results files of such runs: the same code each time, an
A/A history), then resamples each gated timing's samples to estimate, for a grid of repeats, timing
thresholds and alphas, how often the gate would fail on two runs of the same code (false alarm) and
how often it catches a --slowdown of one stage (power). Prints the manifest's current setting, the
grid's best settings and the recommendation: the fewest repeats with false alarms <= --false-alarm
and power >= --power, then the largest threshold. Runs of the same code on a quiet machine are
what the numbers mean: measure on the runner type the gate lives on.

Exit status: 0 a setting meets the target, 1 none in the grid does, 2 bad input."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.plan.manifest import Gate, load_manifest
from harness.results import store
from harness.results.baseline import load_records_any
from harness.results.power import Cell, find, grid, recommend, sample_runs
from harness.results.record import Record

HELP = "estimate the timing gate's false-alarm rate and power on this machine; recommend repeats and thresholds"
REPEATS = (5, 10, 15, 20, 30)
THRESHOLDS = (1.02, 1.03, 1.04, 1.05, 1.10, 1.25, 1.5, 2.0)  # the last two: machines whose runs drift by tens of %
ALPHAS = (0.001, 0.01, 0.05)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="experiments/<name>.toml (its [run] repeats and [gate])")
    parser.add_argument("--results", type=Path, action="append", default=[], help="A/A results (repeatable)")
    parser.add_argument("--runs", type=int, default=3, help="without --results: run the manifest this many times")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="runs go to <reports>/<name>-power-<i>/")
    parser.add_argument("--slowdown", type=float, default=0.05, help="injected slowdown to detect (0.05 = 5 %%)")
    parser.add_argument("--false-alarm", type=float, default=0.01, help="target: most false alarms per gate run")
    parser.add_argument("--power", type=float, default=0.95, help="target: least detection rate of the slowdown")
    parser.add_argument("--trials", type=int, default=400, help="resampled gate runs per setting")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write every setting's rates as JSON")


def _records(args: argparse.Namespace) -> list[Record]:
    if args.results:
        return [r for path in args.results for r in load_records_any(path)]
    from harness.expansion import load_sweep
    from harness.run.runner import SweepOptions, run_sweep

    sweep = load_sweep(args.manifest)
    out: list[Record] = []
    for i in range(args.runs):
        sweep_id = store.check_sweep_id(f"{sweep.manifest.name}-power-{i + 1}")
        print(f"run {i + 1}/{args.runs}: {sweep_id}", file=sys.stderr, flush=True)
        out += run_sweep(sweep, SweepOptions(reports_dir=args.reports, sweep_id=sweep_id, rerun=True)).records
    return out


def row(label: str, c: Cell | None) -> str:
    if c is None:
        return f"{label:<14} (not in the grid)"
    return (
        f"{label:<14} repeats {c.repeats:>3}  threshold {c.threshold:.2f}x  alpha {c.alpha:<6g} "
        f"false alarms {c.false_alarm:7.2%}  power {c.power:7.2%}"
    )


def report(
    cells: list[Cell], gate: Gate, repeats: int, args: argparse.Namespace, runs: int
) -> tuple[list[str], Cell | None]:
    best = recommend(cells, args.false_alarm, args.power)
    timings = sorted(cells[0].per_timing)
    lines = [
        f"{len(timings)} gated timings, {runs} runs each; {args.trials} resampled gate runs per setting; "
        f"slowdown {args.slowdown:.0%} in one stage; target false alarms <= {args.false_alarm:.1%}, "
        f"power >= {args.power:.0%}",
        row("current", find(cells, repeats, gate.timing_ratio, gate.alpha)),
        row("recommended", best),
    ]
    top = best or max(cells, key=lambda c: (c.false_alarm <= args.false_alarm, c.power, -c.repeats))
    if best is None:
        lines.append(row("closest", top) + "  (no setting of the grid meets the target)")
    if runs < 2:
        lines.append("note: one run per timing: the noise between runs is not in these numbers; use --runs >= 3")
    for key in timings:
        r = top.per_timing[key]
        lines.append(f"  {key[0]} / {key[1]}: false alarms {r.false_alarm:.2%}, power {r.power:.2%}")
    return lines, best


def run(args: argparse.Namespace) -> int:
    try:
        manifest = load_manifest(args.manifest)
        if args.runs < 1 or args.trials < 1 or not 0 < args.slowdown < 10:
            raise ValueError("--runs and --trials must be >= 1 and --slowdown in (0, 10)")
        records = _records(args)
        dropped: list[tuple[str, str]] = []
        runs = sample_runs(records, dropped)
        if not runs:
            raise ValueError("no timing samples taken without load: every run was measured beside other work")
        repeats = sorted({*REPEATS, manifest.run.repeats})
        thresholds = sorted({*THRESHOLDS, manifest.gate.timing_ratio})
        alphas = sorted({*ALPHAS, manifest.gate.alpha})
        cells = grid(runs, repeats, thresholds, alphas, args.slowdown, trials=args.trials)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lines, best = report(cells, manifest.gate, manifest.run.repeats, args, min(len(v) for v in runs.values()))
    if dropped:
        lines.append(
            f"left out: {len(dropped)} timing run(s) measured under load (other processes kept >= a quarter of "
            "the cores busy): " + ", ".join(f"{v} / {s}" for v, s in dropped)
        )
    print("\n".join(lines))
    if args.json is not None:
        keys = ("repeats", "threshold", "alpha", "false_alarm", "power")
        args.json.write_text(json.dumps([{k: getattr(c, k) for k in keys} for c in cells], indent=1) + "\n")
    return 0 if best is not None else 1
