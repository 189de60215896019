"""Time one measured stage of this tree against the code the baseline was recorded from, in one run.

The reference is the commit of the newest record in the baseline (``--baseline``, default the
nightly gate's), or ``--against REV``. It is checked out in a temporary git worktree; the
manifest's variant (one stage) is built by ``--workers`` long-lived processes per tree and called in
pairs, rotating through them, the order in each pair drawn by a seeded coin (:mod:`harness.run.ab`). The verdict is an
exact sign test on the pairs' ratios with a minimum effect (:mod:`harness.results.sign_test`): a
regression when significantly more than half of the pairs have this tree slower than
``1 + --min-effect``; the test's false-alarm rate is printed, computed from the binomial tail.
Everything is saved to ``<reports>/<manifest>-ab/ab.json`` (every call's seconds, the coin, both
commits, the load average). Exits

    0  no regression (the line says how many pairs were slower and how many were needed)
    1  this tree is slower: the stage, the metric (seconds per call), the median ratio and the counts
    2  cannot compare, naming why: no baseline or no commit in it, a reference record from a
       dirty tree, a commit this clone lacks, other run-time dependency pins than this tree's,
       a reference tree without the stage API, a shallow clone, a worker that failed, too few pairs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from harness import revision
from harness.plan.manifest import ManifestError
from harness.results import store
from harness.results.provenance import git_info, machine_info, now
from harness.results.record import Record
from harness.results.sign_test import min_pairs, sign_test
from harness.results.storage import write_atomic

HELP = "time a stage against the baseline's code, interleaved in one run; exit 0 clean, 1 slower, 2 cannot compare"
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BASELINE = Path("reports/baselines/nightly.jsonl")
PAIRS = 150
CALLS = 3
WORKERS = 2
MIN_EFFECT = 0.03
ALPHA = 0.001
CANNOT = 2


class CannotCompare(ValueError):
    """The two sides cannot be compared; the message says why."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("manifest", type=Path, help="a manifest with one measured CPU variant and one stage")
    parser.add_argument("--variant", help="the variant to time (default: the manifest's only one)")
    parser.add_argument("--against", metavar="REV", help="reference commit (default: the newest baseline record's)")
    parser.add_argument("--baseline", type=Path, default=DEFAULT_BASELINE, help=f"default: {DEFAULT_BASELINE}")
    parser.add_argument("--pairs", type=int, default=PAIRS, help=f"pairs of calls (default {PAIRS})")
    parser.add_argument("--min-effect", type=float, default=MIN_EFFECT, help=f"default {MIN_EFFECT}")
    parser.add_argument("--alpha", type=float, default=ALPHA, help=f"bound of the false-alarm rate (default {ALPHA})")
    parser.add_argument("--calls", type=int, default=CALLS, help=f"calls a side a pair, fastest kept (default {CALLS})")
    parser.add_argument("--workers", type=int, default=WORKERS, help=f"processes a side (default {WORKERS})")
    parser.add_argument("--warmup", type=int, default=5, help="calls per side before the pairs (default 5)")
    parser.add_argument("--seed", type=int, default=0, help="the coin's seed (default 0)")
    parser.add_argument("--reports", type=Path, default=Path("reports"), help="reports directory")


def reference_of(baseline: Path) -> tuple[str, str]:
    """The commit of the baseline's newest record, and what it is (for the messages)."""
    if not baseline.exists():
        raise CannotCompare(f"no baseline at {baseline}: nothing says which code to compare with (or give --against)")
    records = store.load_records(baseline)
    if not records:
        raise CannotCompare(f"{baseline} holds no records")
    newest: Record = max(records, key=lambda r: r.finished_at)
    what = f"{baseline}'s newest record ({newest.variant.name}, {newest.finished_at})"
    if not newest.commit:
        raise CannotCompare(f"{what} names no git commit")
    if newest.dirty:
        raise CannotCompare(
            f"{what} was measured from a dirty tree at {newest.commit[:12]}: its code is not that commit's; "
            "re-baseline from a clean checkout, or compare with the commit that committed the baseline: "
            f"--against $(git log -1 --format=%H -- {baseline})"
        )
    return newest.commit, what


def runtime_pins(pyproject: str, where: str) -> list[str]:
    """``[project] dependencies`` of a pyproject.toml text: what the measured code runs on."""
    try:
        return sorted(tomllib.loads(pyproject)["project"]["dependencies"])
    except (tomllib.TOMLDecodeError, KeyError) as e:
        raise CannotCompare(f"{where}: no readable [project] dependencies ({e})") from e


def check_pins(reference: str) -> None:
    """Both trees run in this environment, so they must pin the same run-time dependencies."""
    try:
        theirs = runtime_pins(revision.git(REPO_ROOT, "show", f"{reference}:pyproject.toml"), f"{reference[:12]}")
    except revision.GitError as e:
        raise CannotCompare(f"{reference[:12]} has no pyproject.toml ({e})") from e
    ours = runtime_pins((REPO_ROOT / "pyproject.toml").read_text(), "pyproject.toml")
    if theirs != ours:
        changed = sorted(set(theirs) ^ set(ours))
        raise CannotCompare(
            f"{reference[:12]} pins other run-time dependencies than this tree ({', '.join(changed)}): "
            "one environment cannot run both as they were pinned"
        )


def stage_spec(args: argparse.Namespace) -> tuple[dict[str, Any], int, str, str]:
    """What both workers build (:mod:`harness.run.ab_worker`), the device count, variant and stage."""
    from harness.expansion import load_sweep
    from harness.model import model_workload

    sweep = load_sweep(args.manifest)
    names = [v.name for v in sweep.variants]
    if args.variant is None and len(names) != 1:
        raise CannotCompare(f"{args.manifest}: {len(names)} variants ({', '.join(names)}); name one with --variant")
    variant = next((v for v in sweep.variants if args.variant in (None, v.name)), None)
    if variant is None:
        raise CannotCompare(f"{args.manifest}: no variant {args.variant!r} (known: {', '.join(names)})")
    target = variant.target.resolved()
    if target.platform != "cpu" or len(variant.workload.stages) != 1:
        raise CannotCompare(f"{args.manifest}: {variant.name} must run one stage on cpu (ab times calls here)")
    spec = {
        "preset": variant.preset,
        "config_overrides": dict(variant.config_overrides),
        "workload": dataclasses.asdict(model_workload(variant.workload)),
        "mesh": dict(target.mesh),
        "stage": variant.workload.stages[0],
        "seed": 0,
        "warmup": args.warmup,
    }
    return spec, int(target.devices or 1), variant.name, variant.workload.stages[0]


def progress(total: int, min_effect: float) -> Any:
    def show(done: int, pairs: list[Any]) -> None:
        if done % 25 and done != total:
            return
        ratios = [p.ratio for p in pairs]
        slower = sum(r > 1 + min_effect for r in ratios)
        print(
            f"  pairs {done}/{total}: median head/base {statistics.median(ratios):.4f}, {slower} slower "
            f"than {1 + min_effect:.3f}x",
            file=sys.stderr,
            flush=True,
        )

    return show


def compare(args: argparse.Namespace) -> tuple[int, Path]:
    from harness.run import ab

    if args.pairs < min_pairs(args.alpha):
        raise CannotCompare(
            f"--pairs {args.pairs}: the test cannot reach alpha {args.alpha} with fewer than {min_pairs(args.alpha)}"
        )
    spec, devices, variant, stage = stage_spec(args)
    if args.against:
        reference, what = revision.resolve(REPO_ROOT, args.against), f"--against {args.against}"
    else:
        commit, what = reference_of(args.baseline)
        try:
            reference = revision.resolve(REPO_ROOT, commit)
        except revision.GitError as e:
            raise CannotCompare(f"{what}: commit {commit[:12]} is not in this clone (fetch it, or re-baseline)") from e
    if revision.git(REPO_ROOT, "rev-parse", "--is-shallow-repository") == "true":
        raise CannotCompare("this clone is shallow: a commit's history is cut, the reference may not be what it names")
    check_pins(reference)
    head_git = git_info(REPO_ROOT)
    print(
        f"ab: {variant} {stage}: head {head_git['commit']} (dirty: {head_git['dirty']}) "
        f"against base {reference} ({what})",
        file=sys.stderr,
    )
    load_before = os.getloadavg()[0]
    with revision.checkout(REPO_ROOT, reference) as tree:
        bases, heads, setup_s = ab.start_both(tree, REPO_ROOT, spec, devices, args.workers, args.seed)
        print(
            f"  both sides built and warmed in {setup_s:.1f} s; {args.pairs} pairs, order by coin (seed {args.seed})",
            file=sys.stderr,
        )
        try:
            pairs = ab.measure_pairs(
                bases, heads, args.pairs, args.seed, args.calls, progress(args.pairs, args.min_effect)
            )
        finally:
            for worker in [*bases, *heads]:
                worker.close()
    test = sign_test([p.ratio for p in pairs], args.min_effect, args.alpha)
    out = args.reports / f"{args.manifest.stem}-ab"
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "finished_at": now(),
        "manifest": str(args.manifest),
        "variant": variant,
        "stage": stage,
        "metric": "seconds per call",
        "base": {"commit": reference, "why": what},
        "head": head_git,
        "machine": machine_info(),
        "loadavg_1m": [load_before, os.getloadavg()[0]],
        "setup_s": setup_s,
        "seed": args.seed,
        "calls": args.calls,
        "workers": args.workers,
        "pads": [w.pad for w in [*bases, *heads]],
        "test": dataclasses.asdict(test) | {"regressed": test.regressed},
        "pairs": [dataclasses.asdict(p) for p in pairs],
    }
    write_atomic(out / "ab.json", json.dumps(record, indent=1) + "\n")
    verdict = "SLOWER" if test.regressed else "ok"
    print(f"{verdict}  {variant} {stage} seconds per call: {test.line()}")
    print(f"record: {out / 'ab.json'}")
    return (1 if test.regressed else 0), out


def run(args: argparse.Namespace) -> int:
    from harness.run.ab import AbError

    try:
        code, _ = compare(args)
    except (CannotCompare, revision.GitError, AbError, ManifestError, subprocess.SubprocessError) as e:
        print(f"AB ERROR  cannot compare: {e}", file=sys.stderr)
        return CANNOT
    return code
