"""Does the timeline simulator, on this CPU's measured constants, predict what the CPU measures?

Runs experiments/calibration-cpu.toml (each single-device program of cpu.toml on a one-device
mesh: compiled, predicted, timed) and writes the predicted-against-measured table, Spearman rank
correlation and median |ln(predicted / measured)| to
benchmarks/results/timeline-calibration-<date>.md. The CPU constants (matmul FLOP/s, copy
bandwidth, per-op overhead) are measured in the same sweep and never fitted to these numbers.

    python benchmarks/timeline_calibration.py                       # run the sweep, then score it
    python benchmarks/timeline_calibration.py --results R.jsonl     # score a sweep that ran already
    python benchmarks/timeline_calibration.py --also reports/cpu/results.jsonl   # + multi-device rows

``--also`` adds another sweep's points to the table (shown, not scored). ``--held-out R.jsonl`` scores
a sweep whose programs the constants never saw (cpu.toml's, 8 simulated devices included: their
spec is measured with 8 devices sharing the cores) against the held-out acceptance: median
|ln(pred/meas)| <= ln 1.5, none worse than 3x, Spearman >= 0.9.

    python benchmarks/timeline_calibration.py --results R.jsonl --held-out reports/cpu/results.jsonl

Exit status 0 when the target (the documented bars of :mod:`harness.calibration.check`: Spearman >= 0.9,
median |ln ratio| <= ln 1.5, worst <= ln 3; and the held-out acceptance, when given) is met, 1 when missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.calibration import check as calibration  # no JAX: records and statistics only
from harness.results.store import load_records

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "experiments" / "calibration-cpu.toml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results", type=Path, help="a calibration sweep's results.jsonl (default: run the sweep)")
    p.add_argument("--also", type=Path, action="append", default=[], help="more results.jsonl files to tabulate")
    p.add_argument("--held-out", type=Path, help="a held-out sweep's results.jsonl to score (cpu.toml's)")
    p.add_argument("--reports", type=Path, default=ROOT / "reports", help="where the sweep writes (default reports/)")
    p.add_argument(
        "--out", type=Path, help="the markdown file (default benchmarks/results/timeline-calibration-<date>.md)"
    )
    return p.parse_args(argv)


def run_sweep(reports: Path) -> Path:
    """Run the calibration manifest (its variants re-run: a fresh measurement) and return its results file."""
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        str(MANIFEST),
        "--reports",
        str(reports),
        "--sweep-id",
        "timeline-calibration",
        "--rerun",
    ]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    return reports / "timeline-calibration" / "results.jsonl"


def _ms(s: float) -> str:
    return f"{s * 1e3:.3g}"


def markdown(
    points: Sequence[calibration.Point],
    summary: calibration.Summary | None,
    constants: dict[str, Any] | None,
    sources: Sequence[str],
) -> str:
    lines = [
        f"# Timeline simulator against CPU measurements ({datetime.date.today().isoformat()})",
        "",
        f"Results: {', '.join(sources)}. One call of each compiled program; predicted = "
        "`harness.metrics.timeline.predict` on the `cpu` spec built from constants measured in the same sweep "
        "(`harness/calibration/cpu.py`), never fitted to these numbers.",
        "",
    ]
    if constants:
        lines += [
            f"Constants: matmul {constants['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s, copy "
            f"{constants['copy_bytes_per_s'] / 1e9:.2f} GB/s, per-op overhead "
            f"{constants['op_overhead_s'] * 1e6:.2f} us ({constants['source']}).",
            "",
        ]
    lines += [
        "| variant | stage | devices | predicted ms | measured ms | pred / meas | scored |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    lines += [
        f"| {p.variant} | {p.stage} | {p.devices} | {_ms(p.predicted_s)} | {_ms(p.measured_s)} | "
        f"{p.ratio:.2f} | {'yes' if p.gated else 'no (its spec did not model its devices)'} |"
        for p in points
    ]
    lines.append("")
    if summary is None:
        lines.append("Scores below." if not points or any(p.gated for p in points) else "No program to score.")
    else:
        s = summary
        lines.append(
            f"**Scored ({s.n} programs): Spearman {s.spearman:.2f} (target >= "
            f"{calibration.TARGET_SPEARMAN}), median |ln(pred/meas)| {s.median_abs_log_ratio:.3f} = "
            f"{s.typical_factor:.2f}x (target <= ln 1.5 = {calibration.TARGET_LOG_RATIO:.3f}), worst "
            f"{s.worst_abs_log_ratio:.3f} = {s.worst_factor:.2f}x (target <= ln 3 = "
            f"{calibration.TARGET_WORST_LOG_RATIO:.3f}): {'met' if s.met else 'missed'}.**"
        )
    return "\n".join(lines) + "\n"


HELD_OUT_SPEARMAN = 0.9
HELD_OUT_WORST = math.log(3.0)


def held_out(points: Sequence[calibration.Point]) -> dict[str, Any]:
    """The held-out acceptance over the scored points: Spearman, median and worst |ln(pred/meas)|."""
    scored = [p for p in points if p.gated]
    if not scored:
        return {"n": 0, "met": False}
    logs = sorted(abs(math.log(p.ratio)) for p in scored)
    s = calibration.summarize(scored)
    spearman = s.spearman if s else math.nan
    median = s.median_abs_log_ratio if s else math.inf
    met = spearman >= HELD_OUT_SPEARMAN and median <= calibration.TARGET_LOG_RATIO and logs[-1] <= HELD_OUT_WORST
    return {
        "n": len(scored),
        "unscored": len(points) - len(scored),
        "spearman": spearman,
        "median_abs_log_ratio": median,
        "worst_factor": math.exp(logs[-1]),
        "met": bool(met),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = args.results or run_sweep(args.reports)
    records = load_records(results)
    points = calibration.points(records)
    summary = calibration.summarize(points)
    for extra in args.also:  # tabulated, never scored
        points += [dataclasses.replace(p, gated=False) for p in calibration.points(load_records(extra))]
    constants = next(
        (
            (e.predicted or {}).get("calibration")
            for r in records
            for e in r.stages.values()
            if (e.predicted or {}).get("calibration")
        ),
        None,
    )
    text = markdown(points, summary, constants, [str(results), *map(str, args.also)])
    held = None
    if args.held_out:
        held_points = calibration.points(load_records(args.held_out))
        held = held_out(held_points)
        text += "\n## Held out: " + str(args.held_out) + "\n\n" + markdown(held_points, None, None, [])
        text += (
            f"\n**Held out ({held['n']} scored, {held.get('unscored', 0)} not): Spearman "
            f"{held.get('spearman', math.nan):.2f} (>= {HELD_OUT_SPEARMAN}), median |ln(pred/meas)| "
            f"{held.get('median_abs_log_ratio', math.nan):.3f} (<= ln 1.5), worst "
            f"{held.get('worst_factor', math.nan):.2f}x (<= 3x): {'met' if held['met'] else 'missed'}.**\n"
        )
    out = args.out or ROOT / "benchmarks" / "results" / f"timeline-calibration-{datetime.date.today().isoformat()}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(
        json.dumps(
            {
                "out": str(out),
                "met": bool(summary and summary.met),
                "spearman": None if summary is None else summary.spearman,
                "median_abs_log_ratio": None if summary is None else summary.median_abs_log_ratio,
                "held_out": held,
            }
        )
    )
    ok = summary is not None and summary.met and not math.isnan(summary.spearman)
    return 0 if ok and (held is None or held["met"]) else 1


if __name__ == "__main__":
    sys.exit(main())
