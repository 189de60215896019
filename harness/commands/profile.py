"""Predict the programs a real TPU profile ran and set them beside what it measured: per module
and per op by name, with the prediction's interval and notes (what it could not price).

The profile is an XSpace (``*.xplane.pb``) from ``jax.profiler`` or XProf on the target; its
``/host:metadata`` holds the scheduled HLO of every program it ran, which is what is predicted
(``harness.metrics.xprof.profile_programs``), on the target's spec for the slice the programs' device
assignments name (``--topology`` to say otherwise). Writes into ``--out``: ``profile.json`` (the
result; ``harness report <out>`` renders it again), ``profile.html``, and an XProf log folder
holding the real profile (run ``real``) and one predicted XSpace per module (runs
``predicted-<module>``): ``xprof --logdir <out>`` opens them side by side. Exit status 2 if the
file is not a profile or holds no programs."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HELP = "a real TPU profile's own programs predicted against what it measured"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("xspace", type=Path, help="the profile: a *.xplane.pb file")
    parser.add_argument("--target", required=True, choices=("v6e",), help="the TPU generation it ran on")
    parser.add_argument("--topology", help="the slice, e.g. v6e:2x4 (default: from the programs' device count)")
    parser.add_argument("--out", type=Path, help="output folder (default: reports/profile-<file name>)")


def _console(result: dict) -> str:
    from harness.fmt import fmt_time
    from harness.report.profile import policies

    label = result["label"]
    lines = [f"{result['profile']} on {result['topology']} ({label}, {policies(result)})"]
    lines.append(f"{'module':<28}{'measured':>12}{'predicted':>12}{'interval':>24}{'ratio':>8}  inside")
    for m in result["modules"]:
        lo, hi = m["interval_ms"]
        ratio = f"{m['ratio']:.2f}x" if m["ratio"] is not None else "-"
        interval = f"{fmt_time(lo / 1e3)}-{fmt_time(hi / 1e3)}"
        measured, predicted = fmt_time(m["measured_ms"] / 1e3), fmt_time(m["predicted_ms"] / 1e3)
        lines.append(
            f"{m['module']:<28}{measured:>12}{predicted:>12}{interval:>24}{ratio:>8}  {'yes' if m['inside'] else 'no'}"
        )
    s = result["score"]
    median = "inf" if s["median_abs_log_ratio"] is None else f"{s['median_abs_log_ratio']:.3f}"
    lines.append(f"ops holding {s['share']:.0%} of measured time: median |ln(pred/meas)| {median}")
    if s["predicted_zero"]:
        lines.append(f"  predicted at zero: {', '.join(s['predicted_zero'])}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from harness.metrics.xprof.profile_compare import RUNS, compare
    from harness.report.profile import PROFILE_JSON, write

    if not args.xspace.is_file():
        print(f"error: {args.xspace}: no such file", file=sys.stderr)
        return 2
    out = args.out or Path("reports") / f"profile-{args.xspace.name.split('.')[0]}"
    try:
        result = compare(args.xspace, args.target, args.topology, out)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    real = out / RUNS / "real" / args.xspace.name
    real.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.xspace, real)
    (out / PROFILE_JSON).write_text(json.dumps(result, indent=1))
    page = write(out / PROFILE_JSON)
    print(_console(result))
    print(f"wrote {out / PROFILE_JSON}, {page}; xprof --logdir {out} opens the real profile and the predicted ones")
    return 0
