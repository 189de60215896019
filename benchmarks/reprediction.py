"""Re-predict a compile-only sweep's stages with the current and an older prediction code: old -> new step.

Each finished stage of a sweep's ``results.jsonl`` whose compiled program is in the sweep's compile
cache (``<cache>/<key>.hlo.gz``) is simulated twice, by this checkout's ``harness`` and by an older
checkout's (``--old``: a checkout, or a revision checked out by :mod:`harness.revision`; either
with this prediction API, ``build_program`` of a parsed module), each in its own interpreter with
that tree on ``PYTHONPATH``. The program's device coordinates are not
cached: they are rebuilt as the compile-only worker builds its mesh (libtpu's topology devices,
``ltx2.build_mesh`` over the variant's resolved mesh) in a venv with libtpu (``--aot-python``),
which also computes each stage's cache key from the manifest. The current code's step must equal the
record's (checked, and said in the table); the old code's is what the record would have said before.

    PYTHONPATH=$PWD nice -n 19 /work/main/.nox/tests/bin/python benchmarks/reprediction.py \\
        /work/runs/v6e-j1/v6e/results.jsonl --cache /work/runs/v6e-j1/aot-cache \\
        --manifest experiments/v6e.toml --old /work/wt/old24 \\
        --out benchmarks/results/v6e-reprediction-2026-11-26.md

Each simulation's summary is kept in ``--work`` (``<key>.<tree>.json``), so a re-run only simulates
what is new. The dumps there (``<key>.hlo`` and ``<key>.json``: topology, platform, device_coords)
are what ``benchmarks/timeline_speed.py time`` of either tree reads too.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
AOT_PYTHON = "/work/main/.nox/aot/bin/python"
REL_TOL = 1e-9  # the same code on the same program and spec: equal up to float summation order


# --------------------------------------------------------------------------- children (one tree each)


def _targets(manifest: str, names: Sequence[str], stages: Sequence[str]) -> dict[str, Any]:
    """Per variant: the compile cache key of each stage and the mesh devices' coordinates, in mesh
    order, as a compile-only worker gets them (runs in a venv with libtpu, this tree on the path)."""
    from harness import targets
    from harness.expansion import load_sweep
    from harness.plan.variants import select

    sweep = load_sweep(manifest)
    variants = select(sweep.variants, list(names))
    for variant in variants:  # before JAX loads: the host CPU, libtpu told it is not on a TPU VM
        for key, value in targets.compile_env(variant.target.platform).items():
            os.environ.setdefault(key, value)
    from harness.run.compile_cache import cache_key
    from harness.run.predicted import device_coords
    from harness.run.runner import worker_spec
    from ltx2 import build_mesh

    out: dict[str, Any] = {}
    for variant in variants:
        spec = worker_spec(variant, sweep.manifest.run, Path("/nonexistent"))
        shape = dict(spec.target.mesh)
        n = 1
        for size in shape.values():
            n *= size
        devices = targets.compile_devices(spec.target.platform, spec.target.topology or "")
        mesh = build_mesh(shape, devices=devices[:n])
        out[variant.name] = {
            "keys": {stage: cache_key(spec, stage) for stage in stages},
            "mesh": [[a, s] for a, s in spec.target.mesh],
            "coords": device_coords(list(mesh.devices.flat)),
        }
    return out


def _predict(hlo_path: str) -> dict[str, Any]:
    """The prediction of a dumped program by the ``harness`` on the path: step, interval, the
    module's memory traffic, and compute time by model scope."""
    import time

    from harness.metrics import timeline
    from harness.metrics.hlo import memory_traffic_bytes, parse
    from ltx2 import scopes

    meta = json.loads(Path(hlo_path).with_suffix(".json").read_text())
    text = Path(hlo_path).read_text()
    coords = [tuple(c) for c in meta["device_coords"]] or None
    spec = timeline.spec_for(meta["topology"], meta["platform"], coords)
    start = time.perf_counter()
    module = parse(text)
    program = timeline.build_program(module)
    prediction = timeline.simulate(program, spec, lambda op: "/".join(scopes.scope_path(op)))
    by_scope: dict[str, float] = {}
    by_op: dict[str, float] = {}
    for e in prediction.events:
        if e.lane == "compute":
            by_scope[e.scope] = by_scope.get(e.scope, 0.0) + (e.end_ns - e.start_ns)
            by_op[e.name] = by_op.get(e.name, 0.0) + (e.end_ns - e.start_ns)
    device = prediction.device
    return {
        "step_s": prediction.step_ns / 1e9,
        "interval_s": timeline.uncertainty(program, spec)["interval_s"],
        "memory_traffic_bytes": memory_traffic_bytes(module),
        "compute_ns": device.get("compute_ns"),
        "exposed_collective_ns": device.get("exposed_collective_ns"),
        "compute_ns_by_scope": by_scope,
        "compute_ns_by_op": by_op,
        "seconds": time.perf_counter() - start,
    }


# --------------------------------------------------------------------------- pure parts


def write_dump(base: Path, hlo_text: str, meta: Mapping[str, Any]) -> Path:
    """``base.hlo`` (the program) and ``base.json`` (``topology``, ``platform``, ``device_coords`` and
    whatever else ``meta`` holds): the pair ``timeline_speed.py time`` reads. Returns the .hlo path."""
    missing = [k for k in ("topology", "platform", "device_coords") if k not in meta]
    if missing:
        raise ValueError(f"dump {base}: meta lacks {', '.join(missing)}")
    base.parent.mkdir(parents=True, exist_ok=True)
    hlo = base.with_suffix(".hlo")
    hlo.write_text(hlo_text)
    coords = [list(c) for c in meta["device_coords"]]
    base.with_suffix(".json").write_text(json.dumps({**meta, "device_coords": coords}, indent=1))
    return hlo


def stages_of(record: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(stage, its ``predicted`` object) of every stage of a record that has a prediction."""
    return [(name, s["predicted"]) for name, s in (record.get("stages") or {}).items() if s.get("predicted")]


# the first an op contains names it; "matmul+slice": a dot fused with a (dynamic-)slice (a layer's weights
# sliced out of the stacked layers inside the matmul's fusion)
KINDS = ("matmul+slice", "matmul", "dynamic-update-slice", "dynamic-slice", "copy")


def op_kinds(hlo_text: str) -> dict[str, str]:
    """Each instruction's kind, from its opcode and (for a fusion or call) the opcodes of what it
    calls, nested (the program parsed by :func:`harness.metrics.hlo.parse`): ``matmul+slice`` (a dot
    and a slice or dynamic-slice), ``matmul`` (a dot or convolution), ``dynamic-update-slice``,
    ``dynamic-slice``, ``copy``, else its own opcode."""
    from harness.metrics.hlo import parse

    module = parse(hlo_text)
    comps = module.computations

    def inside(computation: str, seen: set[str]) -> set[str]:
        if computation in seen or computation not in comps:
            return set()
        seen.add(computation)
        return {o for i in comps[computation] for o in (i.opcode, *(x for c in i.callees for x in inside(c, seen)))}

    kinds = {}
    for _, instr in module.instructions():
        found = {instr.opcode}
        if instr.opcode in ("fusion", "call", "custom-call"):
            found |= {o for callee in instr.callees for o in inside(callee, set())}
        found = {"matmul" if o in ("dot", "convolution") else o for o in found}
        if "matmul" in found and found & {"dynamic-slice", "slice"}:
            found.add("matmul+slice")
        kinds[instr.name] = next((k for k in KINDS if k in found), instr.opcode)
    return kinds


def moves(old: Mapping[str, float], new: Mapping[str, float], min_ns: float = 1.0) -> dict[str, float]:
    """How the ops' times moved between two codes: ``fell_ns`` / ``rose_ns`` summed over the ops that
    got faster / slower by more than ``min_ns`` (float summation noise stays out), and how many did
    (``fell`` / ``rose``)."""
    out = {"fell_ns": 0.0, "fell": 0, "rose_ns": 0.0, "rose": 0}
    for name in set(old) | set(new):
        delta = new.get(name, 0.0) - old.get(name, 0.0)
        side = "fell" if delta < -min_ns else "rose" if delta > min_ns else ""
        if side:
            out[f"{side}_ns"] += abs(delta)
            out[side] += 1
    return out


def by_kind(by_op: Mapping[str, float], kinds: Mapping[str, str]) -> dict[str, float]:
    """Compute ns summed by op kind (:func:`op_kinds`); an op the text does not name is ``other``."""
    out: dict[str, float] = {}
    for name, ns in by_op.items():
        kind = kinds.get(name, "other")
        out[kind] = out.get(kind, 0.0) + ns
    return out


def _gb(n: float | None) -> str:
    return "-" if n is None else f"{n / 1e9:.1f}"


def scope_change(old: Mapping[str, float], new: Mapping[str, float]) -> tuple[str, float, float] | None:
    """The scope whose compute time moved most (either way): (scope, old ns, new ns); None if none did."""
    scopes = set(old) | set(new)
    if not scopes:
        return None
    name = max(sorted(scopes), key=lambda s: abs(new.get(s, 0.0) - old.get(s, 0.0)))
    return name, old.get(name, 0.0), new.get(name, 0.0)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The markdown table of re-predicted stages. A row: variant, stage, record_step_s, old, new
    (the :func:`_predict` dicts; old may be None when the old code failed, with ``old_error``)."""
    head = (
        "| variant | stage | old step ms | new step ms [interval] | new/old | record = new | "
        "HBM traffic GB old -> new | largest scope change (compute ms old -> new) |\n"
        "|---|---|---:|---|---:|---|---|---|\n"
    )
    lines = []
    for r in rows:
        old, new = r.get("old"), r["new"]
        lo, hi = new["interval_s"] or (None, None)
        interval = "" if lo is None else f" [{lo * 1e3:.0f}, {hi * 1e3:.0f}]"
        agree = abs(new["step_s"] - r["record_step_s"]) <= REL_TOL * max(abs(r["record_step_s"]), 1e-30)
        if old is None:
            old_ms, ratio, traffic, change = (
                f"failed: {r.get('old_error', '?')}",
                "-",
                _gb(new["memory_traffic_bytes"]),
                "",
            )
        else:
            old_ms, ratio = f"{old['step_s'] * 1e3:.0f}", f"{new['step_s'] / old['step_s']:.2f}"
            traffic = f"{_gb(old['memory_traffic_bytes'])} -> {_gb(new['memory_traffic_bytes'])}"
            moved = scope_change(old["compute_ns_by_scope"], new["compute_ns_by_scope"])
            change = "" if moved is None else f"`{moved[0] or '(none)'}` {moved[1] / 1e6:.0f} -> {moved[2] / 1e6:.0f}"
        lines.append(
            f"| {r['variant']} | {r['stage']} | {old_ms} | {new['step_s'] * 1e3:.0f}{interval} | {ratio} | "
            f"{'yes' if agree else 'NO: record ' + format(r['record_step_s'] * 1e3, '.1f') + ' ms'} | "
            f"{traffic} | {change} |"
        )
    return head + "\n".join(lines) + "\n"


def _kind_ns(ns_by_kind: Mapping[str, float], kind: str) -> float:
    if kind == "other":
        return sum(v for n, v in ns_by_kind.items() if n not in KINDS)
    return ns_by_kind.get(kind, 0.0)


def kind_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: per row, the compute stream's ms by op kind (:func:`op_kinds`), old -> new."""
    kinds = [*KINDS, "other"]
    head = "| variant | stage | " + " | ".join(f"{k} ms" for k in kinds) + " | ops faster / slower |\n"
    head += "|---|---|" + "---|" * (len(kinds) + 1) + "\n"
    lines = []
    for r in rows:
        old, new = r.get("old_by_kind"), r["new_by_kind"]
        cells = []
        for k in kinds:
            cells.append(
                ("?" if old is None else f"{_kind_ns(old, k) / 1e6:.0f}") + f" -> {_kind_ns(new, k) / 1e6:.0f}"
            )
        m = r.get("moves")
        cells.append(
            "?"
            if m is None
            else f"{m['fell']} ops -{m['fell_ns'] / 1e6:.1f} ms / {m['rose']} ops +{m['rose_ns'] / 1e6:.1f} ms"
        )
        lines.append(f"| {r['variant']} | {r['stage']} | " + " | ".join(cells) + " |")
    return head + "\n".join(lines) + "\n"


NOTES_MARK = "<!-- notes: kept when the tables are written again -->"


def compose(header: str, tables: str, existing: str = "") -> str:
    """The note: ``header``, the tables, then whatever followed :data:`NOTES_MARK` in the file it
    replaces (hand-written reading of the numbers survives a re-run)."""
    _, mark, notes = existing.partition(NOTES_MARK)
    return f"{header}\n{tables}\n{NOTES_MARK}{notes if mark else chr(10)}"


def _head(tree: Path) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "?"


# --------------------------------------------------------------------------- driver


def _child(python: str, tree: Path, args: Sequence[str], env: Mapping[str, str] | None = None) -> Any:
    """Run this script's child mode in ``python`` with ``tree`` first on the path; its JSON stdout."""
    full = {**os.environ, **(env or {}), "PYTHONPATH": str(tree)}
    cmd = ["nice", "-n", "19", python, str(Path(__file__).resolve()), *args]
    done = subprocess.run(cmd, env=full, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} in {tree} exit {done.returncode}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cached(path: Path, compute: Any, simulator: str | None = None) -> Any:
    """``compute()``, kept in ``path``; ``simulator``: the identity the value is valid for (this tree's
    simulator, ``harness.run.predicted_cache.simulator_identity``): a value kept by another is
    computed again."""
    if path.exists():
        value = json.loads(path.read_text())
        if simulator is None or value.get("simulator") == simulator:
            return value
    value = compute()
    if simulator is not None:
        value["simulator"] = simulator
    path.write_text(json.dumps(value))
    return value


def cached_by_traffic(cache: Path) -> dict[int, Path]:
    """The cache's programs by the static ``memory_traffic_bytes`` their entries store, which the
    records of the sweep that compiled them hold too: how a record finds its program when the
    cache was filled by another checkout (the keys hash the code that compiled and counted)."""
    out: dict[int, Path] = {}
    for entry in sorted(cache.glob("*.json")):
        program = entry.with_suffix(".hlo.gz")
        try:
            traffic = (json.loads(entry.read_text()).get("static") or {}).get("memory_traffic_bytes")
        except (OSError, json.JSONDecodeError):
            continue
        if program.exists() and traffic:
            out[int(traffic)] = program
    return out


def repredict(args: argparse.Namespace) -> list[dict[str, Any]]:
    from harness.run.predicted_cache import simulator_identity

    records = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
    wanted = [(r, stage, pred) for r in records for stage, pred in stages_of(r)]
    names = sorted({r["variant"]["name"] for r, _, _ in wanted})
    stages = sorted({stage for _, stage, _ in wanted})
    args.work.mkdir(parents=True, exist_ok=True)
    # Compile-only devices are described by the plugins with JAX on the host CPU (a CUDA topology
    # is "not implemented" otherwise); the keys are this checkout's, so run it from the tree that
    # compiled the cache.
    info = _child(
        args.aot_python,
        ROOT,
        ["_targets", str(args.manifest), json.dumps(names), json.dumps(stages)],
        env={"JAX_PLATFORMS": "cpu"},
    )
    rows = []
    by_traffic = cached_by_traffic(args.cache)
    for record, stage, pred in wanted:
        name = record["variant"]["name"]
        key = info[name]["keys"][stage]
        cached, coords = args.cache / f"{key}.hlo.gz", info[name]["coords"]
        if not cached.exists():  # compiled by another checkout: the entry holding the record's traffic
            traffic = ((record["stages"][stage].get("static") or {}).get("memory_traffic_bytes")) or 0
            recorded = ((pred.get("spec") or {}).get("topology") or {}).get("device_coords")
            if int(traffic) not in by_traffic or not recorded:
                print(f"{name} {stage}: no cached program ({cached.name}): skipped", file=sys.stderr, flush=True)
                continue
            cached, coords = by_traffic[int(traffic)], recorded
            key = cached.name.removesuffix(".hlo.gz")
        hlo = args.work / f"{key}.hlo"
        if not hlo.exists():
            meta = {
                "topology": record["target"]["topology"],
                "platform": record["target"]["platform"],
                "device_coords": coords,
                "variant": name,
                "stage": stage,
                "mesh": info[name]["mesh"],
            }
            write_dump(args.work / key, gzip.decompress(cached.read_bytes()).decode(), meta)
        row: dict[str, Any] = {"variant": name, "stage": stage, "record_step_s": pred["step_s"], "key": key}
        row["new"] = _cached(
            args.work / f"{key}.new.json",
            functools.partial(_child, sys.executable, ROOT, ["_predict", str(hlo)]),
            simulator_identity(),
        )
        try:
            row["old"] = _cached(
                args.work / f"{key}.old.json",
                functools.partial(_child, sys.executable, args.old, ["_predict", str(hlo)]),
            )
        except RuntimeError as e:
            row["old"], row["old_error"] = None, str(e).splitlines()[-1][:200]
        kinds = op_kinds(hlo.read_text())
        for side in ("old", "new"):
            if row[side] is not None:
                row[f"{side}_by_kind"] = by_kind(row[side]["compute_ns_by_op"], kinds)
        if row["old"] is not None:
            row["moves"] = moves(row["old"].pop("compute_ns_by_op"), row["new"].pop("compute_ns_by_op"))
        print(f"{name} {stage}: old {row['old'] and row['old']['step_s']} new {row['new']['step_s']}", flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_targets"]:
        print(json.dumps(_targets(argv[1], json.loads(argv[2]), json.loads(argv[3]))))
        return 0
    if argv[:1] == ["_predict"]:
        print(json.dumps(_predict(argv[1])))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a compile-only sweep's results.jsonl")
    p.add_argument("--cache", type=Path, required=True, help="the sweep's compile cache folder")
    p.add_argument("--manifest", type=Path, required=True, help="the manifest the sweep ran")
    p.add_argument(
        "--old", type=Path, required=True, help="the older prediction code: a checkout, or a git revision of this repo"
    )
    p.add_argument("--out", type=Path, required=True, help="markdown table to write")
    p.add_argument("--work", type=Path, default=Path("/tmp/reprediction"), help="dumps and per-tree results")
    p.add_argument("--aot-python", default=AOT_PYTHON, help="a python with libtpu (the [tpu-aot] extra)")
    args = p.parse_args(argv)
    if args.old.is_dir():
        return _write(args)
    from harness import revision  # a revision: its tree, checked out for this run (harness.revision)

    with revision.checkout(ROOT, str(args.old)) as tree:
        args.old = tree
        return _write(args)


def _write(args: argparse.Namespace) -> int:
    rows = repredict(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Re-predicted steps: old -> new prediction code\n\n`python benchmarks/reprediction.py {args.results} "
        f"--cache {args.cache} --manifest {args.manifest} --old {args.old}`: {len(rows)} stages with a cached "
        f"program; old code at {_head(args.old)}, new at {_head(ROOT)}. Steps per call of the stage; the "
        "interval is the new code's (the old code had none); HBM traffic is the module's per device and call; "
        "compute ms are the simulated compute stream's, per step.\n"
    )
    tables = table(rows) + "\nCompute stream by op kind, ms per step, old -> new:\n\n" + kind_table(rows)
    existing = args.out.read_text() if args.out.exists() else ""
    args.out.write_text(compose(header, tables, existing))
    (args.work / "rows.json").write_text(json.dumps(rows, indent=1))
    print(f"wrote {args.out} ({len(rows)} stages)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
