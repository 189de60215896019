"""How long reading a compiled program's HLO takes: the parse, and everything a worker derives from a
stage's text (static metrics, attribution, trace filter, prediction), timed on a dump.

    PYTHONPATH=<checkout> python benchmarks/hlo_parse_speed.py DUMP.hlo [--repeats 5] [--no-sensitivity]

``DUMP.hlo`` (or ``.hlo.gz``) is ``compiled.as_text()``, e.g. from ``benchmarks/timeline_speed.py
dump`` (19B step: compile-only on libtpu); the ``.json`` beside it gives the timeline spec
(topology, platform, device coordinates). Without one, a CPU spec with fixed constants prices the
program (the timings are what matters, not the step).

Phases, each from the text, median of ``--repeats`` runs:

* ``parse``: text -> module;
* ``predict``: parse + ``timeline.predict``;
* ``worker``: parse + what a worker reads from one stage: collective stats, matmul FLOPs, memory
  traffic, attribution by scope, the trace filter's scopes and collective names, the prediction
  and (unless ``--no-sensitivity``) its sensitivity.

Prints one JSON object: wall and process CPU seconds per phase, and the load average at the start
and end (a loaded machine's wall times are not evidence; its CPU times say more, not everything).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_text(path: Path) -> str:
    """The HLO text of a ``.hlo`` or gzipped ``.hlo.gz`` file."""
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text()


def timeline_spec(path: Path, text: str) -> Any:
    """The dump's spec from the ``.json`` beside it, else a CPU spec with fixed constants."""
    from harness.metrics import timeline
    from harness.metrics.hlo.text import module_header

    meta_path = path.with_name(path.name.removesuffix(".gz").removesuffix(".hlo") + ".json")
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("topology"):
            coords = [tuple(c) for c in meta.get("device_coords", [])] or None
            return timeline.spec_for(meta["topology"], meta["platform"], coords)
    _, devices = module_header(text)
    return timeline.cpu_spec(1e11, 1e10, 5e-6, "fixed constants (timing only)", devices=devices)


def phases(spec: Any, with_sensitivity: bool) -> dict[str, Callable[[str], object]]:
    """Phase name -> what it runs on the text."""
    from harness.metrics import timeline
    from harness.metrics.compiled import attribution
    from harness.metrics.hlo import collective_instructions, collective_stats, matmul_flops, memory_traffic_bytes, parse
    from ltx2 import scopes

    path = scopes.scope_path

    def worker(text: str) -> object:
        module = parse(text)
        out = [collective_stats(module), matmul_flops(module), memory_traffic_bytes(module)]
        out += [attribution.static_by_scope(module, path), attribution.instruction_scopes(module, path)]
        out += [collective_instructions(module), timeline.predict(module, spec)]
        return out + ([timeline.sensitivity(module, spec)] if with_sensitivity else [])

    return {
        "parse": parse,
        "predict": lambda text: timeline.predict(parse(text), spec),
        "worker": worker,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hlo", type=Path)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-sensitivity", action="store_true")
    parser.add_argument("--phases", default="parse,predict,worker", help="comma-separated phases to time")
    args = parser.parse_args(argv)
    if not args.hlo.exists():
        raise SystemExit(f"{args.hlo}: no such file")
    load_start = os.getloadavg()
    text = read_text(args.hlo)
    spec = timeline_spec(args.hlo, text)
    out: dict[str, Any] = {
        "hlo": str(args.hlo),
        "mib": len(text) / 2**20,
        "lines": text.count("\n"),
        "repeats": args.repeats,
    }
    runners = phases(spec, not args.no_sensitivity)
    wanted = args.phases.split(",")
    if unknown := set(wanted) - set(runners):
        raise SystemExit(f"--phases: unknown {sorted(unknown)} (known: {', '.join(runners)})")
    for name in wanted:
        runs, cpu = [], []
        for i in range(args.repeats):
            start, start_cpu = time.perf_counter(), time.process_time()
            runners[name](text)
            runs.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            print(f"{name} {i + 1}/{args.repeats}: {runs[-1]:.2f} s ({cpu[-1]:.2f} s CPU)", flush=True)
        out[f"{name}_s_median"], out[f"{name}_cpu_s_median"] = statistics.median(runs), statistics.median(cpu)
        out[f"{name}_s_runs"] = runs
    out["loadavg_start"], out["loadavg_end"] = load_start, os.getloadavg()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
