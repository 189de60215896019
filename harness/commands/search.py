"""Search a manifest's ``[search]`` space (sharding rule per logical axis, mesh shape, attention
kernel) for the layout with the fastest predicted step that fits the device's memory.

Candidates are pruned before compiling (mesh size, axis used twice in one array, divisibility, the
convolution rule, weights that cannot fit), ordered by an analytic estimate, then compiled
compile-only through the sweep machinery -- at the space's proxy depth, scaled per block -- in a
local search of at most --budget evaluations, the best ``confirm`` again at full depth. The
manifest's own [[variants]] (hand-written layouts) are compiled at full depth as references, and
those the space can express are where the search starts (with the best analytic candidate).
Everything is stored in <reports>/<sweep id>/results.jsonl: a re-run reads it and compiles only
what is new. Written next to it: search.json, search.html (the ranked table) and winners.toml (the
best layouts as variants with per-rule overrides: `nox -s sweep -- <winners.toml>` runs them).

Exit status: 0 a layout that fits was found, 1 none was, 2 bad manifest or [search] table."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HELP = "search sharding rules, mesh shapes and attention kernels for the fastest predicted step"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="a manifest with a [search] table")
    parser.add_argument("--budget", type=int, default=40, help="evaluations at most (proxies + confirmations)")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")
    parser.add_argument("--sweep-id", help="results go to <reports>/<sweep-id>/ (default: manifest name)")
    parser.add_argument("--winners", type=int, default=3, help="how many layouts winners.toml gets")


def run(args: argparse.Namespace) -> int:
    from harness.report.search import agreement_text, console_table
    from harness.report.search import write as write_page
    from harness.results import store
    from harness.search.output import rank_agreement, rows, write_outputs
    from harness.search.references import reference_rows
    from harness.search.setup import load_search
    from harness.search.strategy import search

    if args.budget < 1 or args.winners < 1:
        print("error: --budget and --winners must be at least 1", file=sys.stderr)
        return 2
    started = time.monotonic()
    s = load_search(args.manifest, args.reports, args.sweep_id)
    path = s.evaluator.results_path
    before = len(store.load_records(path))
    result = search(s.space, s.facts, s.devices, s.hardware, s.evaluator, args.budget, seeds=s.seeds)
    compiled = len(store.load_records(path)) - before
    references = reference_rows(s)
    pruned = ", ".join(f"{k}: {len(v)}" for k, v in result.pruned.items()) or "none"
    print(
        f"{result.declared} candidates declared, pruned {pruned}; {result.evaluations} evaluated "
        f"({compiled} compiled now, the rest read from {path}); {len(references)} references"
    )
    paths = write_outputs(path.parent, s.manifest, result, s.space.base, args.winners, references)
    print(console_table(rows(result), references))
    print(agreement_text(rank_agreement(rows(result))))
    page = write_page(paths["json"])
    print(f"search: {page}\nwinners: {paths['winners']}\nwall time {time.monotonic() - started:.0f} s")
    return 0 if any(sc.usable for sc in [*result.proxy.values(), *result.confirmed.values()]) else 1
