"""Run one variant from its spec on this host, as a cluster job does (the command of each
``xpk workload create`` of ``sweep --launcher xpk``): the same worker as a local sweep, writing
``<out>/out-<process>.json``. With ``target.processes`` > 1 every host of the job runs this
command; ``jax.distributed`` finds the others (no coordinator is given) and says which process this
is. ``python -m harness collect`` turns the outputs into records.

Exit status: 0 the variant succeeded, 1 it did not, 2 the spec could not be read."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

HELP = "run one variant from its spec (what a cluster job runs); outputs for `harness collect`"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", type=Path, help="<sweep dir>/specs/<variant id>.json, written by sweep --launcher")
    parser.add_argument("--out", type=Path, required=True, help="folder for out-<process>.json")
    parser.add_argument("--process", type=int, help="this host's process id where JAX does not say (test presets)")


def run(args: argparse.Namespace) -> int:
    from harness import targets, testing
    from harness.results.provenance import now
    from harness.run import distributed
    from harness.run.runner import context
    from harness.run.spec import WorkerSpec
    from harness.run.worker import run_spec, write_json

    try:
        spec = WorkerSpec.from_json(args.spec.read_text())
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.spec}: not a worker spec ({type(e).__name__}: {e})", file=sys.stderr)
        return 2
    if not spec.compile_only:  # before JAX loads: the run's own compiles get the variant's compiler options
        os.environ.update(targets.run_flags_env(spec.target.platform, dict(spec.target.compiler_options), os.environ))
    process = args.process or 0
    if spec.processes > 1 and not testing.is_test_preset(spec.preset):
        distributed.initialize(spec)
        import jax

        process = jax.process_index()
    spec = dataclasses.replace(spec, process_id=process)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"out-{process}.json"
    started_at, start = now(), time.monotonic()
    code = run_spec(spec, out)
    result = json.loads(out.read_text())
    result["launch"] = {
        "started_at": started_at,
        "finished_at": now(),
        "duration_s": time.monotonic() - start,
        "context": context(),
    }
    write_json(out, result)
    return code
