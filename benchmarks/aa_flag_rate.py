"""How often the diff's intervals and the timing test flag a difference between calls of the same code.

    python benchmarks/aa_flag_rate.py TRACES.jsonl[.gz]

TRACES.jsonl comes from ``benchmarks/aa_traces.py`` (one program traced again and again, with the
machine's load). Every comparison is A/A, so each flag is a false alarm. Designs, per trace of 32
calls: ``random`` (two random halves: no drift between the sides), ``halves`` (the first 16 calls
against the last 16: the drift within one run), ``separate`` (16 calls of one trace against 16 of
the next, taken seconds apart: the drift between two runs, as every real diff has). Counts:

* diff: the share of A/A diffs (``harness.results.diff.diff_stage``) with any significant part
  (step, category or scope); by design at most 5 %;
* timing test: the share of pairs whose timing test (``harness.results.stats.timing_p``) is below
  0.05 and 0.01, on the calls' windows (10 a side).
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np

from harness.families import Git, Machine, StepSample, Trace, Versions
from harness.results import stats
from harness.results.diff import diff_stage
from harness.results.record import ManifestRef, Record, RunConfig, StageEntry, TargetInfo, VariantRef


def record(name: str, samples: list[dict]) -> Record:
    """A record of one stage ``s`` whose trace holds ``samples`` (the traced calls)."""
    trace = Trace(step_samples=tuple(StepSample.from_dict(x) for x in samples))
    return Record(
        sweep_id="aa",
        manifest=ManifestRef("aa.toml", ""),
        variant=VariantRef(name, name),
        config=RunConfig("test:ok", {}, None, {}, {}),
        target=TargetInfo("cpu", "auto", {"data": 1}, None, 1),
        machine=Machine(),
        versions=Versions(),
        git=Git(),
        started_at="",
        finished_at="",
        duration_s=0.0,
        status="ok",
        error=None,
        stages={"s": StageEntry("ok", trace=trace)},
    )


def designs(traces: list[list[dict]], seed: int = 0) -> dict[str, list[tuple[list[dict], list[dict]]]]:
    rng = np.random.default_rng(seed)
    out: dict[str, list[tuple[list[dict], list[dict]]]] = {"random": [], "halves": [], "separate": []}
    for i, t in enumerate(traces):
        order = rng.permutation(len(t))
        out["random"].append(([t[j] for j in order[:16]], [t[j] for j in order[16:32]]))
        out["halves"].append((t[:16], t[16:32]))
        if i + 1 < len(traces):
            out["separate"].append((t[:16], traces[i + 1][:16]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", type=Path)
    args = parser.parse_args()
    raw = args.traces.read_bytes()
    text = (gzip.decompress(raw) if args.traces.suffix == ".gz" else raw).decode()
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    busy = [r["load"]["others_busy_cores"] for r in rows]
    print(
        f"{len(rows)} traces of {len(rows[0]['step_samples'])} calls; others kept {min(busy):.2f}-{max(busy):.2f} "
        f"(median {np.median(busy):.2f}) of {rows[0]['load']['cores']} cores busy"
    )
    print("| design | A/A pairs | diffs flagged | timing test p < 0.05 | p < 0.01 |")
    print("|---|---:|---:|---:|---:|")
    for name, pairs in designs([r["step_samples"] for r in rows]).items():
        flagged = 0
        p = []
        for a, b in pairs:
            d = diff_stage(record("a", a), record("b", b), "s")
            flagged += any(x.significant for x in (d.step, *d.categories, *d.scopes) if x is not None)
            p.append(stats.timing_p([s["window_ns"] for s in a[:10]], [s["window_ns"] for s in b[:10]]))
        n = len(pairs)
        print(
            f"| {name} | {n} | {flagged} ({flagged / n:.1%}) | {np.mean(np.array(p) < 0.05):.1%} | "
            f"{np.mean(np.array(p) < 0.01):.1%} |"
        )


if __name__ == "__main__":
    main()
