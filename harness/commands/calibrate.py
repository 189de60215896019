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
before they are written (:func:`harness.calibration.traces.traced_sharing`,
:meth:`~harness.calibration.cpu.CpuCalibration.shared_spec`). The matmul, memory
and collective classes are fitted by robust regression (:mod:`harness.calibration.fit`);
a class with fewer than ``--min-ops`` instructions is refused, by name. The spec file holds the fitted spec, each
class's residuals and the programs and traces it came from; ``target.spec = "<file>"`` in a
manifest makes later predictions use (and cite) it.

Exit status: 0 written, 2 bad input (unreadable file, a mismatched trace, too few ops of a class).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from harness.calibration import fit as fitting
from harness.calibration.traces import base_spec, cpu_base, program_samples, traced_sharing

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
