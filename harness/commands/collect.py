"""Turn the outputs of variants run on a cluster (``sweep --launcher xpk``) into records: for each
variant submitted to ``<results-dir>/<sweep-id>/`` whose processes have all finished
(``outputs/<id>/out-<process>.json``), one record appended to ``results.jsonl`` (several processes
merged as a local multi-process run is: static metrics checked identical, the slowest process's
timings), then the sweep's report. Re-running collects only what finished since: a collected
variant is marked (``outputs/<id>/collected``) and skipped. Variants still running or queued are
listed as pending.

Exit status: 0 every collected variant succeeded, 1 one did not, 2 not a sweep folder."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness.vocabulary import Status

HELP = "merge the outputs of variants run on a cluster into results.jsonl and the report"
MANIFEST_COPY = "manifest.toml"  # written by sweep --launcher xpk: what collect builds records against
COLLECTED = "collected"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep_dir", type=Path, help="<results-dir>/<sweep-id>, as given to sweep --launcher xpk")
    parser.add_argument("--no-report", action="store_true", help="do not write index.html / results.csv")


def _outputs(folder: Path, processes: int) -> list[dict[str, Any]] | None:
    """Every process's finished result, process 0 first; None while any is missing or still running."""
    results = []
    for i in range(processes):
        try:
            result = json.loads((folder / f"out-{i}.json").read_text())
        except (OSError, ValueError):
            return None
        if result.get("status") not in (Status.OK, Status.FAILED) or "launch" not in result:
            return None
        results.append(result)
    return results


def run(args: argparse.Namespace) -> int:
    from harness.commands.sweep import write_sweep_report
    from harness.expansion import load_sweep
    from harness.results import store
    from harness.results.lock import sweep_lock
    from harness.results.record import Outcome, build_record
    from harness.run.distributed import merge_results
    from harness.run.launcher_xpk import OUTPUTS, SPECS
    from harness.run.spec import WorkerSpec

    sweep_dir: Path = args.sweep_dir
    if not (sweep_dir / MANIFEST_COPY).is_file() or not (sweep_dir / SPECS).is_dir():
        print(
            f"error: {sweep_dir}: not a sweep submitted with --launcher (no {MANIFEST_COPY} and {SPECS}/)",
            file=sys.stderr,
        )
        return 2
    sweep = load_sweep(sweep_dir / MANIFEST_COPY)
    by_id = {v.id: v for v in sweep.variants}
    sweep_id = sweep_dir.name
    path = store.results_path(sweep_dir.parent, sweep_id)
    collected, already, pending, failed = 0, 0, [], False
    with sweep_lock(sweep_dir):
        for spec_path in sorted((sweep_dir / SPECS).glob("*.json")):
            spec = WorkerSpec.from_json(spec_path.read_text())
            folder = sweep_dir / OUTPUTS / spec.variant_id
            if (folder / COLLECTED).exists():
                already += 1
                continue
            variant = by_id.get(spec.variant_id)
            results = _outputs(folder, spec.processes)
            if results is None or variant is None:
                gone = "" if variant else f": not in {MANIFEST_COPY}"
                pending.append(f"{spec.variant_name} ({spec.variant_id}){gone}")
                continue
            result = results[0] if len(results) == 1 else merge_results(results)
            launch = results[0]["launch"]
            duration = max(r["launch"]["duration_s"] for r in results)
            outcome = Outcome(
                result["status"],
                result.get("error"),
                result,
                duration,
                launch["started_at"],
                max(r["launch"]["finished_at"] for r in results),
            )
            record = build_record(
                sweep_id=sweep_id,
                manifest=sweep.manifest,
                variant=variant,
                run=sweep.manifest.run,
                outcome=outcome,
                context=launch["context"],
                log_path=folder,
            )
            store.append_record(path, record)
            (folder / COLLECTED).write_text(f"{record.finished_at}\n")
            collected += 1
            failed |= not record.ok
            print(f"collected {spec.variant_name} ({spec.variant_id}): {record.status}")
    for p in pending:
        print(f"pending {p}")
    print(f"{collected} collected, {already} collected before, {len(pending)} pending -> {path}")
    if collected and not args.no_report:
        write_sweep_report(path, sweep.manifest)
    return 1 if failed else 0
