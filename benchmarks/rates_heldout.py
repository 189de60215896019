"""Score the rate curves, unchanged, on programs that set nothing: MaxDiffusion's v7x ladder.

The constants of the TPU specs come from the microbenchmark tables only (harness/metrics/timeline/
rates.py). This scores them on the compiled programs of ``experiments/maxdiffusion-v7x.toml`` (the
diffusion stage of each rung) against what MaxDiffusion published for the same programs on a real
v7x-8 (the manifest's ``[reference]``): the 40-step diffusion and XProf's all-gather wasted share.
Each program is predicted twice by this checkout: at the tables' rates ("predicted, tpu7x curves")
and at the datasheet peaks ("predicted, datasheet rates", ``TimelineSpec.datasheet()``), each with
its interval; the share's interval is read at the same bounds (``harness.run.predicted.
xprof_interval``).

The programs are the dumps ``benchmarks/reprediction.py`` writes (``--work``: ``<key>.hlo`` and
``<key>.json`` with variant, stage, topology, platform, device_coords); its ``rows.json`` there gives
the older code's step ("before") where present. Each program's scores are kept beside it
(``<key>.rates.json``) with the simulator's identity (``harness.run.predicted_cache.
simulator_identity``: its version and its source); an entry of another simulator is scored again,
and reprediction.py's interval (``<key>.new.json``) is reused only when it names this simulator.

    PYTHONPATH=$PWD python benchmarks/rates_heldout.py --work /work/runs-i41/work \\
        --manifest experiments/maxdiffusion-v7x.toml --out benchmarks/results/<dated>.md
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

STEPS = 40  # the manifest's num_inference_steps: where a record does not say its calls per video


def simulator() -> str:
    """The identity of the simulator on the path (what a cached score is valid for)."""
    from harness.run.predicted_cache import simulator_identity

    return simulator_identity()


def cached_score(hlo: Path, identity: str) -> dict[str, Any]:
    """:func:`score` of ``hlo``, from ``<key>.rates.json`` where it was written by the simulator
    ``identity``; otherwise scored and written there with it."""
    cached = hlo.with_suffix(".rates.json")
    if cached.exists():
        one = json.loads(cached.read_text())
        if one.get("simulator") == identity:
            return one
    one = {**score(hlo, identity), "simulator": identity}
    cached.write_text(json.dumps(one))
    return one


def score(hlo: Path, identity: str) -> dict[str, Any]:
    """One dumped program at the tables' rates and at the datasheet's: step, interval, AG wasted share
    (benchmarks/reprediction.py's interval of the same program reused where ``identity`` wrote it)."""
    from harness.metrics import timeline
    from harness.metrics.hlo import parse
    from harness.metrics.xprof.predicted import program_costs, xprof_entry
    from harness.run.predicted import xprof_interval

    meta = json.loads(hlo.with_suffix(".json").read_text())
    coords = [tuple(c) for c in meta["device_coords"]] or None
    spec = timeline.spec_for(meta["topology"], meta["platform"], coords)
    program = timeline.build_program(parse(hlo.read_text()))
    costs, opcodes = program_costs(program.ops)
    out: dict[str, Any] = {"variant": meta.get("variant"), "stage": meta.get("stage")}
    for label, s in (("curves", spec), ("datasheet", spec.datasheet())):
        peaks = {"peak_flops_per_s": s.value("peak_flops_per_s"), "hbm_bytes_per_s": s.value("hbm_bytes_per_s")}
        prediction = timeline.simulate(program, s)
        xprof = xprof_entry(prediction.events, costs, opcodes, **peaks)
        one: dict[str, Any] = {"step_s": prediction.step_ns / 1e9, "ag_wasted": xprof.get("all_gather_wasted_fraction")}
        if label == "curves":  # the intervals of the prediction the tables make; the datasheet's is its bound
            new = hlo.with_suffix(".new.json")  # benchmarks/reprediction.py's: reused if by this simulator
            unc = json.loads(new.read_text()) if new.exists() else {}
            if unc.get("simulator") != identity or "interval_s" not in unc:
                unc = timeline.uncertainty(program, s)
            one["interval_s"] = unc["interval_s"]
            shares = xprof_interval(program, s, xprof, costs, opcodes, peaks)
            one["ag_wasted_interval"] = shares.get("all_gather_wasted_fraction")
        out[label] = one
    return out


def _s(x: float | None, k: float) -> str:
    return "-" if x is None else f"{x * k:.2f} s"


def _iv(x: list[float] | None, k: float) -> str:
    return "" if not x else f" [{x[0] * k:.2f}-{x[1] * k:.2f}]"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _piv(x: list[float] | None) -> str:
    return "" if not x else f" [{100 * x[0]:.1f}-{100 * x[1]:.1f}]"


def table(rows: list[Mapping[str, Any]], reference: Mapping[str, Any], before: Mapping[str, float]) -> str:
    """Markdown: per rung, the 40-step diffusion and the AG wasted share, published | before | after."""
    head = (
        "| rung | diffusion published | before (datasheet, older code) | after, tpu7x curves [interval] | "
        "after, datasheet rates | curves / published | AG wasted published | after, curves [interval] "
        "| after, datasheet |\n|---|---:|---:|---|---|---:|---:|---|---|\n"
    )
    lines = []
    for r in rows:
        ref = reference.get(r["variant"]) or {}
        k = r["calls_per_video"]
        c, d = r["curves"], r["datasheet"]
        published = ref.get("diffusion_s")
        ratio = "-" if not published else f"{c['step_s'] * k / published:.2f}"
        lines.append(
            f"| {r['variant']} | {'-' if published is None else f'{published:.2f} s'} | "
            f"{_s(before.get(r['variant']), k)} | {_s(c['step_s'], k)}{_iv(c['interval_s'], k)} | "
            f"{_s(d['step_s'], k)}{_iv(d.get('interval_s'), k)} | {ratio} | "
            f"{_pct(ref.get('all_gather_wasted_fraction'))} | {_pct(c['ag_wasted'])}{_piv(c['ag_wasted_interval'])} | "
            f"{_pct(d['ag_wasted'])}{_piv(d.get('ag_wasted_interval'))} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, required=True, help="benchmarks/reprediction.py's --work folder")
    p.add_argument("--manifest", type=Path, required=True, help="the manifest with the published [reference]")
    p.add_argument("--results", type=Path, required=True, help="the sweep's results.jsonl (calls per video)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    reference = (tomllib.loads(args.manifest.read_text()).get("reference") or {}).get("rungs") or {}
    rows_file = args.work / "rows.json"
    before = {}
    if rows_file.exists():
        for r in json.loads(rows_file.read_text()):
            if r.get("old"):
                before[r["variant"]] = r["old"]["step_s"]
    calls = {}
    for line in args.results.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        for stage, entry in (record.get("stages") or {}).items():
            n = (entry.get("predicted") or {}).get("calls_per_video")
            if n:
                calls[(record["variant"]["name"], stage)] = int(n)
    rows = []
    identity = simulator()
    for hlo in sorted(args.work.glob("*.hlo"), key=lambda p: p.stat().st_size):  # small programs first
        one = cached_score(hlo, identity)
        one["calls_per_video"] = calls.get((one["variant"], one["stage"]), STEPS)
        rows.append(one)
        print(f"{one['variant']}: curves {one['curves']['step_s']:.4f} s, datasheet {one['datasheet']['step_s']:.4f} s")
    order = list(reference)
    rows.sort(key=lambda r: order.index(r["variant"]) if r["variant"] in order else math.inf)
    intro = (
        "Per video: a program's step x its calls per video (a step program 40, the scanned loop 1). Published: "
        "MaxDiffusion PR #385 on a v7x-8 (the manifest's [reference]); before: this project's prediction of the "
        "same program with the code before the rate curves (benchmarks/reprediction.py's old tree).\n\n"
    )
    text = intro + table(rows, reference, before)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
