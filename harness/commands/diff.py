"""What changed between two variants, by model scope and time category: per stage, the step's
time, compute / each collective kind / idle and each scope's time per step (means over the traced
steps) with a 95 % bootstrap interval of the delta and its share of the step's delta, then the
collective count and bytes deltas by scope (static). The speedup is shown only when both ran the
same model and workload sizes, else "n/a (different workload)".

Three forms:

  python -m harness diff A B --results reports/cpu          variant A (base) vs variant B (head)
  python -m harness diff OLD.jsonl NEW.jsonl [--variant X]  the same variants in two results files
  python -m harness diff MANIFEST --against REV --variant X X run from git revision REV (base) and
                                                           from this tree (head), in turn

Intervals need per-step samples: the variants must have been traced (``[run] trace = true``).
Exit status: 0 printed, 2 bad input (unknown variant, no records, no variant in common)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from harness.results import store
from harness.results.baseline import load_records_any
from harness.results.diff import StageDiff, diff_records
from harness.results.record import Record

HELP = "per-scope and per-category time deltas (with intervals) and collective deltas between variants"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "targets", nargs="+", metavar="A_B_OR_FILES", help="two variants, two results files, or a manifest"
    )
    parser.add_argument("--results", type=Path, metavar="PATH", help="results (.jsonl or sweep dir) holding A and B")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME",
        help="with two files or --against: only these variants (repeatable; default: all in both)",
    )
    parser.add_argument("--stage", action="append", default=[], metavar="NAME", help="only these stages (repeatable)")
    parser.add_argument("--depth", type=int, metavar="N", help="cut scope paths to their first N components")
    parser.add_argument("--top", type=int, default=15, metavar="N", help="scopes shown per stage (by |delta|)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the diffs as JSON")
    parser.add_argument("--against", metavar="REV", help="base: the manifest's variants run from git revision REV")
    parser.add_argument("--rounds", type=int, default=1, help="with --against: interleaved runs per side")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="with --against: reports directory")


class DiffInputError(ValueError):
    pass


def _latest(path: Path) -> dict[str, Record]:
    records = {r.variant.name: r for r in store.latest_by_variant(load_records_any(path)).values()}
    if not records:
        raise DiffInputError(f"no records in {path}")
    return records


def _pick(records: dict[str, Record], name: str, where: Path) -> Record:
    if name not in records:
        raise DiffInputError(f"no variant {name!r} in {where} (variants: {', '.join(records)})")
    return records[name]


def _pairs_by_name(
    base: dict[str, Record], head: dict[str, Record], names: list[str], where: str
) -> list[tuple[Record, Record]]:
    common = [n for n in head if n in base]
    wanted = names or common
    missing = [n for n in wanted if n not in common]
    if missing or not wanted:
        raise DiffInputError(f"variants not in both {where}: {', '.join(missing) or '(none in common)'}")
    return [(base[n], head[n]) for n in wanted]


def _against(args: argparse.Namespace) -> list[tuple[Record, Record]]:
    from harness import revision
    from harness.commands.gate import REPO_ROOT, interleaved
    from harness.expansion import load_sweep

    sweep = load_sweep(Path(args.targets[0]))
    if args.variant:
        unknown = [n for n in args.variant if n not in {v.name for v in sweep.variants}]
        if unknown:
            raise DiffInputError(f"no variant {', '.join(map(repr, unknown))} in {args.targets[0]}")
        sweep = dataclasses.replace(sweep, variants=tuple(v for v in sweep.variants if v.name in args.variant))
    sweep_id = store.check_sweep_id(f"{sweep.manifest.name}-diff")
    with revision.checkout(REPO_ROOT, args.against) as tree:
        base, head, _ = interleaved(sweep, tree, REPO_ROOT, args.rounds, args.reports, sweep_id)
    by = {r.variant.name: r for r in base}, {r.variant.name: r for r in head}
    return _pairs_by_name(by[0], by[1], list(args.variant), f"{args.against} and this tree")


def pairs(args: argparse.Namespace) -> list[tuple[Record, Record]]:
    """(base, head) records the arguments name."""
    targets = args.targets
    if args.against:
        if len(targets) != 1:
            raise DiffInputError("--against takes one manifest: python -m harness diff MANIFEST --against REV")
        return _against(args)
    if len(targets) != 2:
        raise DiffInputError(f"expected two variants or two results files, got {len(targets)} arguments")
    if args.results is not None:
        records = _latest(args.results)
        return [(_pick(records, targets[0], args.results), _pick(records, targets[1], args.results))]
    a, b = Path(targets[0]), Path(targets[1])
    if not (a.exists() and b.exists()):
        raise DiffInputError(
            f"{targets[0]} and {targets[1]} are not both results files; to diff two variants "
            "of one sweep pass --results PATH"
        )
    return _pairs_by_name(_latest(a), _latest(b), list(args.variant), f"{a} and {b}")


def run(args: argparse.Namespace) -> int:
    from harness.report.console import format_diff
    from harness.report.xprof import pair_lines

    try:
        chosen = pairs(args)
    except (DiffInputError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    diffs: list[StageDiff] = []
    for base, head in chosen:
        for d in diff_records(base, head, depth=args.depth):
            if not args.stage or d.stage in args.stage:
                diffs.append(d)
                xprof = pair_lines(base, head, d.stage)
                print(format_diff(d, args.top) + ("\n" + xprof if xprof else "") + "\n")
    if not diffs:
        print("no stage in common to compare", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps([d.to_dict() for d in diffs], indent=1))
    return 0
