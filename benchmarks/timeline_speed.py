"""How long the schedule simulator (``harness.metrics.timeline``) takes on the 19B step, and what it predicts.

Two phases, so the minutes-long compile runs once:

    # 1. compile a manifest variant's stage for its target (compile-only: libtpu, no TPU) and dump
    #    the scheduled HLO plus the mesh devices' coordinates (device-assignment order)
    <venv with the [tpu-aot] extra>/bin/python benchmarks/timeline_speed.py dump experiments/v6e.toml \\
        --variant trillium --out /tmp/hlo
    #    with compiler options on top of the variant's (the naive layout with the async flags):
    <venv with the [tpu-aot] extra>/bin/python benchmarks/timeline_speed.py dump experiments/v6e.toml --variant naive \
        --label naive-async --option xla_tpu_enable_async_collective_fusion=true ...
    # 2. time parse + predict() (and sensitivity()) on the dump: median of --repeats runs
    python benchmarks/timeline_speed.py time /tmp/hlo/v6e-2x4-trillium-denoise_step.hlo

The dump is ``<out>/<topology>-<variant>-<stage>.hlo`` and a ``.json`` beside it (topology,
platform, device coords); keep dumps out of git (tens of MB).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def dump(
    manifest: Path, variant_name: str, stage: str, out: Path, options: dict[str, Any] | None = None, label: str = ""
) -> Path:
    """Compile ``stage`` of one variant as a compile-only worker would (its ``target.compiler_options``
    included, then ``options`` on top), and write its HLO and devices under ``label`` (default: the variant's name)."""
    from harness import targets
    from harness.expansion import load_sweep
    from harness.plan.variants import select
    from harness.run.runner import worker_spec

    sweep = load_sweep(manifest)
    variant = select(sweep.variants, [variant_name])[0]
    for key, value in targets.compile_env(variant.target.platform).items():
        os.environ.setdefault(key, value)
    from harness.metrics.compiled.static import lower_and_compile
    from harness.run.jax_stage import open_model

    spec = worker_spec(variant, sweep.manifest.run, out / "traces")
    model = open_model(spec)
    with model.context():
        program = model.build(stage).program
        start = time.perf_counter()
        options = {**dict(variant.target.compiler_options), **(options or {})}
        compiled, _ = lower_and_compile(program.fn, *program.abstract_args, compiler_options=options)
        compile_s = time.perf_counter() - start
    topology = variant.target.topology or "cpu"
    base = out / f"{topology.replace(':', '-')}-{label or variant.name}-{stage}"
    out.mkdir(parents=True, exist_ok=True)
    base.with_suffix(".hlo").write_text(compiled.as_text() or "")
    devices = list(model.mesh.devices.flat)
    meta = {
        "topology": variant.target.topology,
        "platform": variant.target.platform,
        "variant": label or variant.name,
        "compiler_options": options,
        "stage": stage,
        "mesh": dict(model.mesh.shape),
        "compile_s": compile_s,
        "device_coords": [
            list(getattr(d, "coords", ()) or ()) + [int(getattr(d, "core_on_chip", 0) or 0)] for d in devices
        ],
        "device_ids": [int(d.id) for d in devices],
    }
    base.with_suffix(".json").write_text(json.dumps(meta, indent=1))
    print(f"wrote {base}.hlo ({base.with_suffix('.hlo').stat().st_size / 2**20:.1f} MiB), compile {compile_s:.0f} s")
    return base.with_suffix(".hlo")


def collective_forms(program: Any) -> dict[str, dict[str, int]]:
    """Collectives per step by kind: how many run ``sync`` and how many ``async`` (a start with its done:
    ``*-start``, ``async-start`` or a TPU async collective fusion), loop bodies times their trip counts."""
    out: dict[str, dict[str, int]] = {}

    def walk(computation: str, times: int) -> None:
        for op in program.ops.get(computation, []):
            if op.cls in ("sync", "start"):
                form = out.setdefault(op.kind, {"sync": 0, "async": 0})
                form["sync" if op.cls == "sync" else "async"] += times
            elif op.cls == "while" and len(op.callees) == 2:
                walk(op.callees[1], times * (op.trip_count or 1))
            elif op.cls in ("call", "conditional"):
                for callee in op.callees[:1] if op.cls == "call" else op.callees:
                    walk(callee, times)

    walk(program.entry, 1)
    return out


def time_predict(hlo_path: Path, repeats: int, with_sensitivity: bool) -> dict[str, Any]:
    """Median wall time of parse + predict() (and of parse + sensitivity()) on a dumped HLO, and the prediction."""
    from harness.metrics import timeline
    from harness.metrics.hlo import parse
    from ltx2 import scopes

    meta = json.loads(hlo_path.with_suffix(".json").read_text())
    text = hlo_path.read_text()
    coords = [tuple(c) for c in meta["device_coords"]] or None
    spec = timeline.spec_for(meta["topology"], meta["platform"], coords)
    scope_of = lambda op_name: "/".join(scopes.scope_path(op_name))  # noqa: E731
    runs, prediction = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        prediction = timeline.predict(parse(text), spec, scope_of=scope_of)  # parse included
        runs.append(time.perf_counter() - start)
    assert prediction is not None
    out = prediction.to_dict()
    row: dict[str, Any] = {
        "hlo": str(hlo_path),
        "variant": meta["variant"],
        "predict_s_median": statistics.median(runs),
        "predict_s_runs": runs,
        "step_s": out["step_s"],
        "exposed_all_gather_fraction": out["exposed_all_gather_fraction"],
        "wasted_fraction": out["wasted_fraction"],
        "exposed_ns_by_kind": out["device"]["exposed_ns_by_kind"],
        "critical_path": out["critical_path"][:5],
        "collectives_per_step": collective_forms(timeline.build_program(parse(text))),
        "compiler_options": meta.get("compiler_options", {}),
    }
    if with_sensitivity:
        start = time.perf_counter()
        row["sensitivity"] = timeline.sensitivity(parse(text), spec)
        row["sensitivity_s"] = time.perf_counter() - start
    return row


def _option(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"--option {text!r}: expected NAME=VALUE")
    value: Any = {"true": True, "false": False}.get(raw.lower(), raw)
    if isinstance(value, str):
        try:
            value = int(raw)
        except ValueError:
            pass
    return name, value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump", help="compile a variant's stage and dump its scheduled HLO")
    d.add_argument("manifest", type=Path)
    d.add_argument("--variant", required=True)
    d.add_argument("--stage", default="denoise_step")
    d.add_argument("--out", type=Path, default=Path("/tmp/hlo"))
    d.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a compiler option on top of the variant's (true/false, a number or a string)",
    )
    d.add_argument("--label", default="", help="name of the dump (default: the variant's)")
    t = sub.add_parser("time", help="time predict() on dumped HLO files")
    t.add_argument("hlo", type=Path, nargs="+")
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--no-sensitivity", action="store_true")
    args = p.parse_args(argv)
    if args.cmd == "dump":
        dump(args.manifest, args.variant, args.stage, args.out, dict(map(_option, args.option)), args.label)
        return 0
    for path in args.hlo:
        print(json.dumps(time_predict(path, args.repeats, not args.no_sensitivity), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
