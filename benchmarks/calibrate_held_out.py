"""Does fitting the timeline's constants to one sweep's traces lower another sweep's prediction error?

The calibration sweep (experiments/calibration-cpu.toml: single-device programs) saved each traced
stage's optimized HLO (``traces/<variant id>/<stage>/program.hlo.gz``) beside its XSpace trace
(``plugins/profile/<time>/vm.xplane.pb``). This script:

1. fits the per-op-class constants on every such pair with the library behind ``python -m harness
   calibrate`` (:func:`harness.calibration.traces.program_samples`,
   :func:`harness.calibration.fit.fit`), starting from that sweep's
   ``cpu-calibration-1dev.json``; a class with too few instructions is refused by the library and
   reported, never lowered here;
2. carries the fit to the held-out sweep's devices without fitting anything to it
   (:meth:`~harness.calibration.cpu.CpuCalibration.shared_spec`): the fit prices
   the typical op near its one-device speed (traced with one device, or with several: measured),
   so each fitted rate is multiplied by a sharing ratio (the op overhead divided): with
   ``--sharing traced`` (default) and calibration traces of the held-out device count, the fitted
   spec's predicted step over the traced step's wall (median over the calibration programs,
   :func:`harness.calibration.traces.traced_sharing`); otherwise the held-out
   sweep's CPU calibration's micro-benchmark ratio (its ``<N>``-device value over its one-device
   value ``single``), the in-sample stages by their own sweep's; curve, collectives, topology stay;
3. re-predicts every held-out stage's saved program on the held-out sweep's own spec (which must
   reproduce the records' ``predicted.step_s``: the largest relative difference is printed) and on
   the transferred fit, and scores both as :func:`harness.calibration.check.points` does (a host
   loop: step x calls per video); the calibration sweep's own stages likewise (in sample).

    python benchmarks/calibrate_held_out.py \\
        --calibration reports/timeline-calibration/results.jsonl --held-out reports/cpu/results.jsonl

The report (command, inputs, the fit, the transfer, per-stage and summary tables) is printed and
written to ``--out``. Exit status 0 when it ran (it reports, it does not gate), 2 on bad input (a
missing or unreadable file, a trace of another program), naming the file.
"""

from __future__ import annotations

import argparse
import datetime
import math
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.calibration import fit as fitting
from harness.calibration.cpu import SHARED, CpuCalibration
from harness.calibration.held_out import (
    InputError,
    Rescored,
    Score,
    device_count,
    ms,
    read_calibration,
    read_records,
    rescore,
    score,
    shared,
)
from harness.calibration.traces import program_samples, traced_sharing
from harness.metrics.timeline import TimelineSpec

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calibration", type=Path, required=True, help="the calibration sweep's results.jsonl")
    p.add_argument("--held-out", type=Path, required=True, help="the held-out sweep's results.jsonl")
    p.add_argument(
        "--base", type=Path, help="the fit's base (default <calibration>/traces/cpu-calibration-<M>dev.json)"
    )
    p.add_argument("--held-out-cpu", type=Path, help="its CPU calibration (default <held-out>/traces/...-<N>dev.json)")
    p.add_argument("--min-ops", type=int, default=fitting.MIN_OPS, help="instructions a class needs (the library's)")
    p.add_argument(
        "--weighting",
        choices=fitting.WEIGHTINGS,
        default=fitting.DEFAULT_WEIGHTING,
        help="each class's slope: by count (Theil-Sen, the library's default) or weighted by the instructions' time",
    )
    p.add_argument(
        "--sharing",
        choices=("traced", "micro"),
        default="traced",
        help="how the devices share the cores: the fitted spec's predicted step over the calibration traces' step "
        "wall (where traced with the held-out device count) or the CPU calibrations' micro-benchmark ratios",
    )
    out = ROOT / "benchmarks" / "results" / f"calibrate-held-out-{datetime.date.today().isoformat()}.md"
    p.add_argument("--out", type=Path, default=out, help="the markdown report")
    return p.parse_args(argv)


# --------------------------------------------------------------------------- inputs


def trace_pairs(sweep: Path) -> list[tuple[Path, Path]]:
    """Every (program.hlo.gz, vm.xplane.pb) of a sweep's ``traces/<id>/<stage>/``, the newest capture
    of each; InputError naming the folder when a program has no trace or there is none at all."""
    pairs = []
    for hlo in sorted((sweep / "traces").glob("*/*/program.hlo.gz")):
        captures = sorted(p for p in (hlo.parent / "plugins" / "profile").glob("*/vm.xplane.pb"))
        if not captures:
            raise InputError(f"{hlo.parent}: program.hlo.gz but no plugins/profile/<time>/vm.xplane.pb beside it")
        pairs.append((hlo, captures[-1]))
    if not pairs:
        raise InputError(f"{sweep / 'traces'}: no <variant id>/<stage>/program.hlo.gz (was the sweep traced?)")
    return pairs


# --------------------------------------------------------------------------- fit and transfer


def fit_pairs(
    pairs: Sequence[tuple[Path, Path]], base: TimelineSpec, min_ops: int, weighting: str = fitting.DEFAULT_WEIGHTING
) -> tuple[fitting.Fit, list[str], tuple[float, str] | None]:
    """The library's fit over every pair (CalibrationError: too few ops of a class, named), one line
    per pair, and the traces' sharing ratio (:func:`harness.calibration.traces.traced_sharing`)."""
    pts: list[fitting.Sample] = []
    lines, programs = [], []
    for hlo, trace in pairs:
        try:
            one, info, module = program_samples(hlo, trace, base, None)
        except (OSError, ValueError) as e:  # unreadable, or a trace of another program (CalibrationError)
            raise InputError(f"{hlo} with {trace}: {e}") from None
        counts = {c: sum(p.cls == c for p in one) for c in fitting.CLASSES}
        step = info["step"]
        busy = "no step windows" if step is None else f"busy / wall {step['busy_ns'] / step['wall_ns']:.3f}"
        lines.append(f"{hlo.parent.parent.name}/{hlo.parent.name}: {info['matched']} matched ({counts}); {busy}")
        print(lines[-1], flush=True)
        pts += one
        programs.append((module, info))
    fit = fitting.fit(pts, base, min_ops, origin=f"{len(pairs)} calibration trace(s)", weighting=weighting)
    traced = traced_sharing(programs, fit.spec)
    lines = [  # the fitted step against the traced wall
        f"{line}, fitted pred / wall {info['step']['fitted_pred_ns'] / info['step']['wall_ns']:.3f}"
        if info["step"]
        else line
        for line, (_, info) in zip(lines, programs, strict=True)
    ]
    return fit, lines, traced


# --------------------------------------------------------------------------- report


def _summary_row(name: str, s: Score | None) -> str:
    if s is None:
        return f"| {name} | 0 | - | - | - | - |"
    median = f"{s.median_abs_log:.3f} ({s.median_factor:.2f}x)"
    return f"| {name} | {s.n} | {s.spearman:.3f} | {median} | {s.worst_factor:.2f}x | {s.over} of {s.n} |"


def verdict(base: Score | None, fitted: Score | None) -> str:
    """One sentence: did the fit lower the median error (and what happened to rank and worst)."""
    if base is None or fitted is None:
        return "not compared: one of the two predictions has no scored stage"
    lowered = fitted.median_abs_log < base.median_abs_log
    return (
        f"{'lowered' if lowered else 'did not lower'} the error: median |ln(pred/meas)| "
        f"{base.median_abs_log:.3f} -> {fitted.median_abs_log:.3f} ({base.median_factor:.2f}x -> "
        f"{fitted.median_factor:.2f}x); worst {base.worst_factor:.2f}x -> {fitted.worst_factor:.2f}x; Spearman "
        f"{base.spearman:.3f} -> {fitted.spearman:.3f}"
    )


def _constant_rows(
    fit_base: TimelineSpec, fitted: TimelineSpec, held: CpuCalibration, moved: TimelineSpec
) -> list[str]:
    micro, target = held.sharing(), held.spec()
    rows = [
        f"| constant | calibration base | fitted (per op) | held-out micro-benchmark ratio "
        f"({held.devices} dev at once / alone) | ratio applied | transferred ({held.devices} dev) | "
        f"held-out base ({held.devices} dev) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in SHARED:
        applied = moved.value(name) / fitted.value(name)
        cells = (fit_base.value(name), fitted.value(name), micro[name], applied, moved.value(name), target.value(name))
        rows.append(f"| {name} ({fitted.constants[name].unit}) | {' | '.join(f'{v:.4g}' for v in cells)} |")
    return [*rows, "", "Sources of the transferred constants:", ""] + [
        f"- `{name}`: {moved.constants[name].source}" for name in SHARED
    ]


def _stage_rows(s: Rescored) -> list[str]:
    rows = [
        f"## {s.title}: every stage",
        "",
        f"Base spec re-prediction against the records' `predicted.step_s`: max relative difference "
        f"{s.reproduction:.2e}.",
        "",
        "| variant | stage | host loop | measured ms | recorded pred ms | base pred ms | base pred/meas | "
        "fitted pred ms | fitted pred/meas |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    fitted_by = {(p.variant, p.stage): p for p in s.fitted or ()}
    for p in s.base:
        f = fitted_by.get((p.variant, p.stage))
        tail = f"{ms(f.predicted_s)} | {f.ratio:.3f}" if f else "- | -"
        rows.append(
            f"| {p.variant} | {p.stage} | {'yes' if p.host_loop else 'no'} | {ms(p.measured_s)} | "
            f"{ms(s.recorded[(p.variant, p.stage)])} | {ms(p.predicted_s)} | {p.ratio:.3f} | {tail} |"
        )
    if any(not p.gated for p in s.base):
        rows += ["", "Stages whose spec did not model their device count are shown, not scored."]
    return [*rows, *(["", *(f"Note: {n}" for n in s.notes)] if s.notes else [])]


def markdown(
    command: str,
    inputs: Mapping[str, Path],
    pair_lines: Sequence[str],
    min_ops: int,
    fit: fitting.Fit | None,
    refusal: str | None,
    transfer_rows: Sequence[str],
    sections: Sequence[Rescored],
) -> str:
    lines = [
        f"# Calibrating on one sweep's traces, scored on a held-out sweep ({datetime.date.today().isoformat()})",
        "",
        f"Command: `{command}`",
        "",
        "Inputs:",
        "",
        *(f"- {k}: `{v}`" for k, v in inputs.items()),
        "",
        f"## Fit ({len(pair_lines)} program/trace pairs, `harness.calibration.fit.fit`, "
        f"at least {min_ops} instructions per class{f', slopes weighted by {fit.weighting}' if fit else ''})",
        "",
        *(f"- {line}" for line in pair_lines),
        "",
    ]
    if fit is None:
        lines += [
            f"**The library refused the fit: {refusal}** No fitted spec (the threshold is not lowered "
            "here): only the base spec is scored.",
            "",
        ]
    else:
        lines += [
            "| class | instructions | ns per unit | intercept ns | median residual |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {c} | {f.n} | {f.slope_ns:.4g} | {f.intercept_ns:.4g} | {math.exp(f.median_abs_log):.2f}x |"
            for c, f in fit.classes.items()
        ]
        lines += ["", *(f"Note: {n}" for n in fit.notes), "", *transfer_rows, ""]
    for s in sections:
        lines += [*_stage_rows(s), ""]
    lines += [
        "## Summary",
        "",
        "| sweep, spec | n | Spearman | median abs ln(pred/meas) | worst factor | pred > meas |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for s in sections:
        fitted = score(s.fitted) if s.fitted is not None else None
        lines += [
            _summary_row(f"{s.title}, base (measured constants)", score(s.base)),
            _summary_row(f"{s.title}, {s.fitted_label}", fitted),
        ]
    lines.append("")
    for s in sections:
        lines += [f"**{s.title}: calibration {verdict(score(s.base), score(s.fitted or []))}.**", ""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cal_sweep, held_sweep = args.calibration.parent, args.held_out.parent
    try:
        cal_records, records = read_records(args.calibration), read_records(args.held_out)
        n, m = device_count(records, args.held_out), device_count(cal_records, args.calibration)
        base_path = args.base or cal_sweep / "traces" / f"cpu-calibration-{m}dev.json"
        held_path = args.held_out_cpu or held_sweep / "traces" / f"cpu-calibration-{n}dev.json"
        held = read_calibration(held_path)
        if held.devices != n:
            raise InputError(f"{held_path}: measured with {held.devices} devices, the records have {n}")
        shared(held.spec(), held, str(held_path))  # refused early when the held-out ratio is unmeasured
        cal = read_calibration(base_path)
        fit_base = cal.spec()
        pairs = trace_pairs(cal_sweep)
        print(f"fitting on {len(pairs)} program/trace pairs of {cal_sweep}", flush=True)
        fit: fitting.Fit | None
        refusal, moved, transfer_rows = None, None, []
        try:
            fit, pair_lines, traced = fit_pairs(pairs, fit_base, args.min_ops, args.weighting)
        except fitting.CalibrationError as e:  # too few ops of a class: the library names it
            fit, pair_lines, traced = None, [f"{h.parent.parent.name}/{h.parent.name}" for h, _ in pairs], None
            refusal = str(e)
            print(f"fit refused: {refusal}", flush=True)
        # the traces' own ratio where they ran as many devices at once as the held-out sweep
        traced = traced if args.sharing == "traced" and 1 < m == n else None
        if fit is not None:
            moved = shared(fit.spec, held, str(held_path), traced)
            transfer_rows = [
                f"## Transfer to {held.devices} devices on {held.cores} cores (nothing fitted to the held-out sweep)",
                "",
                *_constant_rows(fit_base, fit.spec, held, moved),
                "",
                "Everything else (the matmul curve, collective latency and bandwidth, the topology) is the "
                "held-out calibration's spec.",
            ]
        labels = f"fitted x sharing ({m} dev)", f"fitted x sharing ({n} dev)"
        in_sample = shared(fit.spec, cal, str(base_path), traced) if fit else None
        sections = [
            rescore("in sample (calibration sweep)", cal_records, cal_sweep, fit_base, in_sample, labels[0]),
            rescore("held out", records, held_sweep, held.spec(), moved, labels[1]),
        ]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for s in sections:
        print(
            f"{s.title}: base spec against the records' predicted.step_s: max relative difference {s.reproduction:.2e}"
        )
    shown = [str(Path(sys.argv[0])), *(argv if argv is not None else sys.argv[1:])]
    inputs = {
        "calibration sweep": args.calibration,
        "fit base": base_path,
        "held-out sweep": args.held_out,
        "held-out CPU calibration": held_path,
    }
    text = markdown(
        "python " + shlex.join(shown), inputs, pair_lines, args.min_ops, fit, refusal, transfer_rows, sections
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
