"""The predicted family of one compiled stage: its step simulated from the scheduled HLO.

For every stage the worker compiles (:func:`harness.run.worker.run_stage`), :func:`stage_prediction`
simulates the optimized program (:func:`harness.metrics.timeline.predict`) on a timeline spec of
where the variant runs, and returns the stage entry's ``predicted`` object::

    {<Prediction.to_dict()>: step_s, device, exposed_all_gather_fraction, wasted_fraction,
                             critical_path, block_gantt, spec, notes, simulate_s,
     video_s, calls_per_video,   the step times the stage's calls per video
     host_loop,                  true when one call of the stage is a host loop around the program
                                 (its measured time is not one program call's)
     sensitivity,                each constant of the spec +-SENSITIVITY_FACTOR -> step_s low/high
     chrome_trace,               the simulated timeline as gzipped Chrome JSON (Perfetto opens it)
     calibration}                CPU only: the measured constants the spec rests on

The spec (:func:`timeline_spec`): a TPU/GPU target's from its topology and the mesh devices'
coordinates (``coords`` and ``core_on_chip`` of libtpu's devices); a CPU target's from constants
measured on this machine (:mod:`harness.metrics.timeline.cpu_calibrate`), once per sweep: the
first worker measures them into ``<sweep>/traces/cpu-calibration.json``, the others read it.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.metrics.hlo import HloModule
from harness.metrics.timeline import TimelineSpec, cpu_spec, predict, sensitivity, spec_for
from harness.metrics.timeline.cpu_calibrate import load_or_measure
from harness.run.spec import WorkerSpec
from ltx2 import scopes

SENSITIVITY_FACTOR = 0.2
CHROME_NAME = "predicted_trace.json.gz"
CALIBRATION_NAME = "cpu-calibration.json"


def scope_of(op_name: str) -> str:
    """An instruction's model scope (``a/b/c``) from its ``metadata.op_name``, as attribution reads it."""
    return "/".join(scopes.scope_path(op_name))


def calibration_path(spec: WorkerSpec) -> Path:
    """Where a sweep keeps its CPU constants: next to its variants' trace folders."""
    return Path(spec.trace_dir).parent / CALIBRATION_NAME


def device_coords(devices: Sequence[Any]) -> list[tuple[int, ...]] | None:
    """Each device's ``coords`` (plus ``core_on_chip`` where the device has one); None when the
    devices carry no coordinates (CPU, GPU)."""
    out = []
    for d in devices:
        coords = getattr(d, "coords", None)
        if coords is None:
            return None
        core = getattr(d, "core_on_chip", None)
        out.append(tuple(int(c) for c in coords) + (() if core is None else (int(core),)))
    return out


def timeline_spec(spec: WorkerSpec, devices: Sequence[Any]) -> tuple[TimelineSpec, dict[str, Any] | None]:
    """(the spec to simulate on, the CPU calibration it rests on or None)."""
    target = spec.target
    if target.platform == "cpu":
        cal, _ = load_or_measure(calibration_path(spec))
        n = math.prod(spec.mesh_shape.values())
        return cpu_spec(
            cal.matmul_flops_per_s, cal.copy_bytes_per_s, cal.op_overhead_s, cal.source, devices=n
        ), cal.to_dict()
    return spec_for(target.topology, target.platform, device_coords(devices)), None


def write_chrome(trace: dict[str, Any], where: Path) -> Path:
    """The simulated timeline as gzipped Chrome JSON at ``where/predicted_trace.json.gz``."""
    where.mkdir(parents=True, exist_ok=True)
    path = where / CHROME_NAME
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(trace, f)
    return path


def predicted_entry(
    module: HloModule,
    tl_spec: TimelineSpec,
    *,
    calls_per_video: int,
    where: Path,
    scope_of: Callable[[str], str] | None = None,
) -> dict[str, Any]:
    """Simulate one program: the prediction, per video, its sensitivity and its Chrome JSON file."""
    prediction = predict(module, tl_spec, scope_of=scope_of)
    out = prediction.to_dict()
    step = out.get("step_s")
    out["calls_per_video"] = calls_per_video
    out["video_s"] = None if step is None else step * calls_per_video
    out["sensitivity"] = sensitivity(module, tl_spec, factor=SENSITIVITY_FACTOR)
    out["chrome_trace"] = str(write_chrome(prediction.chrome_trace(), where))
    return out


def stage_prediction(
    name: str,
    module: HloModule,
    spec: WorkerSpec,
    devices: Sequence[Any],
    calls_per_video: int,
    host_loop: bool = False,
) -> dict[str, Any]:
    """The ``predicted`` object of stage ``name`` of the variant ``spec`` (see the module docstring)."""
    tl_spec, calibration = timeline_spec(spec, devices)
    where = Path(spec.trace_dir) / name / (f"process-{spec.process_id}" if spec.processes > 1 else "")
    out = predicted_entry(module, tl_spec, calls_per_video=calls_per_video, where=where, scope_of=scope_of)
    out["host_loop"] = host_loop
    if calibration is not None:
        out["calibration"] = calibration
    return out
