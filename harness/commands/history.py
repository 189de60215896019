"""Change points over the nightly history: python -m harness history HISTORY --manifest M.

HISTORY is the folder the nightly runs are kept in (in CI the ``perf-history`` branch checked out):
``<HISTORY>/<manifest name>/<UTC start>-<commit12>.jsonl``, one file per run, the run's records.
``--append RESULTS`` first adds a run (a sweep's results.jsonl). Then, per variant, stage and gated
metric, one value per run (a timing's median and fastest call: runs are the unit), and its change
points: timings by E-divisive means over the runs' fastest calls, each split judged by Student's
t-test and a minimum magnitude (Matteson & James 2014; Fleming et al. 2023, as Otava runs it;
:mod:`harness.results.changepoint`), deterministic metrics wherever the value changed. A timing
series with fewer runs than a change point needs is reported as too little data.

Each change point is handed on: its ``harness diff`` between the runs around it is written to
``<HISTORY>/diffs/<change>.json``; the exact ``harness bisect`` command between their commits is
printed, and with ``--bisect`` run for the change points whose later run is among the last
``--recent`` (a change point shows once 3 runs follow it) that have no result yet (kept as
``<HISTORY>/bisect/<change>.json``). The trend page (``--html``, default
``<HISTORY>/<manifest name>.html``) shows every gated series with its change points, linked to both.

Exit status: 0 done, 1 a bisect that ran could not name a commit, 2 bad input."""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
from pathlib import Path
from urllib.parse import quote

from harness.plan.manifest import load_manifest
from harness.results import changepoint
from harness.results import history as hist
from harness.results.diff import diff_records
from harness.results.record import Record

HELP = "change points of every gated metric over the nightly history; trend page; hand them to bisect"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("history", type=Path, help="the history folder (the perf-history branch's checkout)")
    parser.add_argument("--manifest", type=Path, required=True, help="experiments/<name>.toml whose runs to read")
    parser.add_argument("--append", type=Path, metavar="RESULTS", help="first add this run's results.jsonl")
    parser.add_argument("--metric", default="*", help="only series whose 'variant / stage / metric' matches")
    parser.add_argument("--alpha", type=float, default=changepoint.ALPHA, help="t-test's level per change point")
    parser.add_argument(
        "--min-magnitude",
        type=float,
        default=changepoint.MIN_MAGNITUDE,
        help="smallest relative move of a timing reported as a change point",
    )
    parser.add_argument("--html", type=Path, help="trend page path (default <HISTORY>/<manifest name>.html)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the change points as JSON")
    parser.add_argument("--bisect", action="store_true", help="run harness bisect for recent change points")
    parser.add_argument("--recent", type=int, default=6, help="with --bisect: only changes among the last N runs")


def _write_diff(history: Path, a: hist.Analysis, c: hist.Change, runs: list[hist.Run]) -> None:
    def record(i: int) -> Record | None:
        return next((r for r in runs[i].records if r.variant.name == a.series.variant), None)

    base, head = record(c.before), record(c.after)
    if base is None or head is None:
        return
    path = history / "diffs" / f"{hist.change_name(a.series, c, runs)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    diffs = [d.to_dict() for d in diff_records(base, head) if d.stage == a.series.stage]
    path.write_text(json.dumps(diffs, indent=1) + "\n")


def _bisect(history: Path, command: str, name: str) -> int:
    import shlex

    from harness import cli

    out = history / "bisect" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"  running: {command}", flush=True)
    return cli.main([*shlex.split(command)[3:], "--json", str(out)])


def _lines(a: hist.Analysis, runs: list[hist.Run], manifest: str, history: Path) -> list[str]:
    if a.status == hist.TOO_LITTLE:
        return [f"{a.series.key}: too little data ({a.note})"]
    out = [f"{a.series.key}: {len(a.changes)} change point(s) over {len(a.series.points)} runs"]
    for c in a.changes:
        b, h = runs[c.before], runs[c.after]
        p = "exact" if c.p_value is None else f"p = {c.p_value:.2g}"
        out.append(f"  between {b.path} and {h.path}: x{c.ratio:.3f} ({p})")
        command = hist.bisect_command(a.series, c, runs, manifest)
        out.append(f"    bisect: {command or 'none (the same commit on both sides: the machine changed)'}")
        out.append(f"    diff:   {hist.diff_command(a.series, c, runs, history)}")
    return out


def run(args: argparse.Namespace) -> int:
    from harness.report.trend import render_trend

    try:
        manifest = load_manifest(args.manifest)
        if args.append is not None:
            print(f"appended {hist.append(args.history, manifest.name, args.append)}")
        runs = hist.load(args.history, manifest.name)
        chosen = [s for s in hist.series(runs) if fnmatch.fnmatchcase(s.key, args.metric)]
        analyses = [hist.analyse(s, alpha=args.alpha, min_magnitude=args.min_magnitude) for s in chosen]
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    code = 0
    for a in analyses:
        if a.changes or a.status == hist.TOO_LITTLE:
            print("\n".join(_lines(a, runs, str(args.manifest), args.history)))
        for c in a.changes:
            _write_diff(args.history, a, c, runs)
            command = hist.bisect_command(a.series, c, runs, str(args.manifest))
            name = hist.change_name(a.series, c, runs)
            recent = c.after >= len(runs) - args.recent
            if args.bisect and command and recent and not (args.history / "bisect" / f"{name}.json").exists():
                code = max(code, 1 if _bisect(args.history, command, name) != 0 else 0)
    quiet = sum(1 for a in analyses if not a.changes and a.status != hist.TOO_LITTLE)
    print(f"{len(runs)} runs, {len(analyses)} gated series: {quiet} without a change point")
    kept = {str(p.relative_to(args.history)) for p in args.history.glob("*/*.json")}
    page = args.html or args.history / f"{manifest.name}.html"
    base = os.path.relpath(args.history, page.parent)
    page.parent.mkdir(parents=True, exist_ok=True)

    def link(rel: str) -> str:  # a file under the history folder, from the page
        return quote("/".join(part for part in (base, rel) if part != "."))

    page.write_text(render_trend(manifest.name, (str(args.manifest), str(args.history)), runs, analyses, kept, link))
    print(f"trend page: {page}")
    if args.json is not None:
        args.json.write_text(hist.dumps(hist.summary(analyses, runs)))
    return code
