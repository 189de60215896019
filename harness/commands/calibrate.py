"""Fit the timeline's constants to measured traces and write a spec file a manifest can name.

Give one or more compiled programs (their optimized HLO text, ``.hlo`` or ``.hlo.gz``: the compile
cache keeps one per stage as ``<key>.hlo.gz``) each with an XSpace trace of it (``.xplane.pb``),
in pairs, and the spec to start from:

  python -m harness calibrate --program A.hlo.gz --trace A.xplane.pb \\
      [--program B.hlo.gz --trace B.xplane.pb ...] --base cpu-calibration-8dev.json --out cpu-fit.json

``--base``: a compile-only target (``v6e:2x4``, ``tpu7x:2x2x1``, ``h100:1x1x8``), a CPU calibration
(``<sweep>/traces/cpu-calibration-<N>dev.json``) or an earlier spec file. Every traced op is
matched by name to the program's instructions (median duration over its executions, one device);
a trace whose ops are not the program's is refused. With a CPU calibration measured for several
devices sharing the host's cores (``devices`` > 1), the fitted per-op speeds are shared among them
before they are written (:func:`traced_sharing`,
:meth:`~harness.metrics.timeline.cpu_calibrate.CpuCalibration.shared_spec`). The matmul, memory
and collective classes are fitted by robust regression (:mod:`harness.metrics.timeline.calibrate`);
a class with fewer than ``--min-ops`` instructions is refused, by name. The spec file holds the fitted spec, each
class's residuals and the programs and traces it came from; ``target.spec = "<file>"`` in a
manifest makes later predictions use (and cite) it.

Exit status: 0 written, 2 bad input (unreadable file, a mismatched trace, too few ops of a class).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from harness import targets
from harness.metrics.hlo import HloModule, parse
from harness.metrics.timeline import TimelineSpec, build_program, predict, spec_for
from harness.metrics.timeline import calibrate as fitting
from harness.metrics.timeline.cpu_calibrate import CpuCalibration
from harness.metrics.timeline.specs import spec_from_dict

HELP = "fit the timeline's constants to measured traces; write a spec file (target.spec)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--program", action="append", default=[], type=Path, metavar="HLO", help="optimized HLO text")
    parser.add_argument("--trace", action="append", default=[], type=Path, metavar="XPLANE", help="its trace")
    parser.add_argument("--base", required=True, metavar="TARGET_OR_FILE", help="the spec the fit starts from")
    parser.add_argument("--out", required=True, type=Path, metavar="PATH", help="the spec file to write (JSON)")
    parser.add_argument("--device", type=int, default=None, help="the device whose ops are used (default: first)")
    parser.add_argument("--min-ops", type=int, default=fitting.MIN_OPS, help="instructions needed per class")
    parser.add_argument(
        "--weighting",
        choices=fitting.WEIGHTINGS,
        default=fitting.DEFAULT_WEIGHTING,
        help="each class's slope: Theil-Sen's, every instruction alike (default), or the median weighted by the "
        "instructions' traced time (the long ops that make a step carry it)",
    )


def base_spec(base: str) -> TimelineSpec:
    """The starting spec: a target's table, a CPU calibration file or a spec file; ValueError otherwise."""
    path = Path(base)
    if path.exists():
        raw = json.loads(path.read_text())
        if isinstance(raw, dict) and "spec" in raw:
            return spec_from_dict(raw["spec"], base)
        return CpuCalibration.from_dict(raw, base).spec()
    for platform in ("tpu", "gpu"):
        try:
            targets.check_topology(base, platform)
        except ValueError:
            continue
        return spec_for(base, platform)
    raise ValueError(f"--base {base!r}: neither a file nor a known target (e.g. v6e:2x4, h100:1x1x8)")


def cpu_base(base: str) -> CpuCalibration | None:
    """``base`` as a CPU calibration file; None for a target name or a spec file; ValueError for a
    file that is neither."""
    path = Path(base)
    if not path.exists():
        return None
    raw = json.loads(path.read_text())
    if isinstance(raw, dict) and "spec" in raw:
        return None
    return CpuCalibration.from_dict(raw, base)


def read_program(path: Path) -> str:
    """An optimized HLO text file, gzipped (the compile cache's ``.hlo.gz``) or plain."""
    data = path.read_bytes()
    return gzip.decompress(data).decode() if data[:2] == b"\x1f\x8b" else data.decode()


def program_samples(
    hlo: Path, trace: Path, base: TimelineSpec, device: int | None
) -> tuple[list[fitting.Sample], dict[str, Any], HloModule]:
    """The matched samples of one (program, trace) pair, what the spec file records of it (with the
    traced step's wall and busy time where the trace has step windows) and the parsed program."""
    from harness.metrics.xspace import read_trace  # JAX's profiler reads the trace

    parsed = parse(read_program(hlo))
    program = build_program(parsed)
    module = parsed.name or None
    table = read_trace(trace, modules={module} if module else None)
    events = table.events
    devices = sorted({e.device for e in events})
    if not devices:
        raise fitting.CalibrationError(f"{trace}: no ops of module {module!r} in the trace")
    chosen = devices[0] if device is None else device
    measured = fitting.durations(events, device=chosen)
    fitting.check_program(program, measured, str(trace))
    pts = fitting.samples(program, measured, base, source=str(trace))
    step = fitting.busy(events, table.steps, chosen, str(trace))
    about = {
        "program": str(hlo),
        "trace": str(trace),
        "module": module,
        "device": chosen,
        "fingerprint": fitting.fingerprint(program),
        "matched": len(pts),
        "step": None if step is None else {"wall_ns": step.wall_ns, "busy_ns": step.busy_ns, "steps": step.steps},
    }
    return pts, about, parsed


def traced_sharing(
    programs: Sequence[tuple[HloModule, Mapping[str, Any]]], fitted: TimelineSpec
) -> tuple[float, str] | None:
    """How much of a traced step one device's ops, priced at the fitted per-op speeds, account for:
    the median over the traces with step windows of ``fitted``'s predicted step over the traced
    step's wall (:func:`program_samples`'s ``step``, which gets the prediction as
    ``fitted_pred_ns``), with what it is; None when no trace has steps.

    Why the whole program (calibration-cpu-8dev.toml, 8 devices on 2 cores): the per-op fit says
    how fast one device's ops run, not how the devices' ops interleave on the cores. On the same
    traces (2026-11-27, AMD EPYC, busy / wall 0.33-1.02), the fitted prices added up to 0.10-0.21 of
    the traced step's wall with the slopes weighted by count (Theil-Sen follows the many short ops)
    and to 0.77-1.53, median 1.20, weighted by time: the ratio now corrects a scale of about 1, not
    of 6. Taking busy / wall as the ratio instead scored 3.7x on cpu.toml held out (an earlier,
    count-weighted run).
    """
    ratios = []
    for module, about in programs:
        if about.get("step"):
            ratios.append(predict(module, fitted).step_ns / about["step"]["wall_ns"])
            about["step"]["fitted_pred_ns"] = ratios[-1] * about["step"]["wall_ns"]
    if not ratios:
        return None
    how = f"the fitted spec's predicted step / the traced step's wall, median over {len(ratios)} traced program(s)"
    return statistics.median(ratios), how


def run(args: argparse.Namespace) -> int:
    if not args.program or len(args.program) != len(args.trace):
        print(
            f"error: give --program and --trace in pairs (got {len(args.program)} programs, {len(args.trace)} traces)",
            file=sys.stderr,
        )
        return 2
    try:
        cpu = cpu_base(args.base)
        base = base_spec(args.base) if cpu is None else cpu.spec()
        pts, about, modules = [], [], []
        for hlo, trace in zip(args.program, args.trace, strict=True):
            one, info, module = program_samples(hlo, trace, base, args.device)
            print(f"{trace}: {info['matched']} instructions matched ({hlo})")
            pts += one
            about.append(info)
            modules.append(module)
        origin = ", ".join(str(t) for t in args.trace)
        result = fitting.fit(
            pts, base, args.min_ops, origin=f"{len(args.trace)} trace(s) ({origin[:200]})", weighting=args.weighting
        )
        if cpu is not None and cpu.devices > 1:  # per-op prices near one device's: share them among the devices
            traced = traced_sharing(list(zip(modules, about, strict=True)), result.spec)
            shared = cpu.shared_spec(result.spec, args.base, traced)
            how = f"the traces' steps ({traced[0]:.4g})" if traced else "the base's micro-benchmarks (no traced steps)"
            note = f"per-op speeds shared by {cpu.devices} devices on {cpu.cores} cores: the ratio from {how}"
            result = replace(result, spec=shared, notes=(*result.notes, note))
    except (OSError, ValueError) as e:  # CalibrationError is a ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    out = {**result.to_dict(), "traces": about, "base": args.base}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1))
    for cls, f in result.classes.items():
        print(f"{cls}: {f.n} instructions, median |ln(fit/measured)| {f.median_abs_log:.2f}")
    for note in result.notes:
        print(f"note: {note}")
    print(f"wrote {args.out}: name it in a manifest as target.spec = {str(args.out)!r}")
    return 0
