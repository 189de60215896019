"""What a calibration reads: the spec a fit starts from (``--base``: a target, a CPU calibration or a
spec file) and a compiled program's instructions matched by name to the ops of its measured trace,
for ``python -m harness calibrate`` (whose help says each rule) and ``benchmarks/calibrate_held_out.py``.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import targets
from harness.calibration import fit as fitting
from harness.calibration.cpu import CpuCalibration
from harness.metrics.hlo import HloModule, parse
from harness.metrics.timeline import TimelineSpec, build_program, predict, spec_for
from harness.metrics.timeline.specs import spec_from_dict


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
            where = targets.check_topology(base, platform)
        except ValueError:
            continue
        return spec_for(where, platform)
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
    from harness.metrics.measured.xspace import read_trace  # JAX's profiler reads the trace

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

    Why the whole program: the per-op fit says how fast one device's ops run, not how the
    devices' ops interleave on the cores (evidence, and why not busy / wall:
    benchmarks/results/calibration-docstring-findings-2026-11-27.md).
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
