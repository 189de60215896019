"""The predicted family of one compiled stage: its step simulated from the scheduled HLO.

For every stage the worker compiles (:func:`harness.run.worker.run_stage`), :func:`stage_prediction`
simulates the optimized program (:func:`harness.metrics.timeline.predict`) on a timeline spec of
where the variant runs, and returns the stage entry's ``predicted`` family
(:class:`harness.families.Predicted`: its fields say what each number is).

The spec (:func:`timeline_spec`): a calibrated spec file's where the target names one
(``target.spec``, written by ``python -m harness calibrate``); else a TPU/GPU target's from its
topology and the mesh devices' coordinates (``coords`` and ``core_on_chip`` of libtpu's devices);
a CPU target's from constants measured on this machine with as many simulated devices as the
variant's mesh has, sharing the host's cores (:mod:`harness.calibration.cpu`),
once per sweep and device count: the first worker measures them into
``<sweep>/traces/cpu-calibration-<N>dev.json``, the others read it.

A compile-only variant on a fixed spec keeps its entry in the prediction cache beside its compiled
program (:mod:`harness.run.predicted_cache`): the same program, spec and simulator are not simulated
again.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.calibration.cpu import load_or_measure
from harness.families import Predicted, Uncertainty
from harness.metrics.hlo import HloModule
from harness.metrics.measured.chrome import write_chrome_trace
from harness.metrics.timeline import (
    TimelineSpec,
    build_program,
    copies_host,
    op_totals,
    rates,
    runs_scalar,
    sensitivity,
    share_bound_specs,
    simulate,
    spec_for,
    uncertainty,
)
from harness.metrics.timeline.compare import compare_program
from harness.metrics.timeline.identity import identity
from harness.metrics.timeline.specs import spec_from_dict
from harness.metrics.xprof.predicted import program_costs, write_predicted_xspace, xprof_entry, xprof_totals
from harness.run.compile_cache import cache_key
from harness.run.predicted_cache import PredictionCache, prediction_key
from harness.run.spec import WorkerSpec
from ltx2 import scopes

SENSITIVITY_FACTOR = 0.2
CHROME_NAME = "predicted_trace.json.gz"
PROGRAM_NAME = "program.hlo.gz"  # a traced stage's optimized HLO, beside its trace: what calibrate pairs
CALIBRATION_NAME = "cpu-calibration-{devices}dev.json"


def scope_of(op_name: str) -> str:
    """An instruction's model scope (``a/b/c``) from its ``metadata.op_name``, as attribution reads it."""
    return "/".join(scopes.scope_path(op_name))


def calibration_path(spec: WorkerSpec, devices: int = 1) -> Path:
    """Where a sweep keeps its CPU constants for ``devices`` devices: next to its variants' trace folders."""
    return Path(spec.trace_dir).parent / CALIBRATION_NAME.format(devices=devices)


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


def load_spec_file(path: str | Path) -> TimelineSpec:
    """A calibrated spec file's spec (``python -m harness calibrate --out``); ValueError naming the file."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"spec file {str(path)!r}: cannot read ({e})") from None
    loaded = spec_from_dict((raw or {}).get("spec") or {}, str(path))
    return dataclasses.replace(loaded, notes=(*loaded.notes, f"calibrated spec file: {path}"))


def timeline_spec(spec: WorkerSpec, devices: Sequence[Any]) -> tuple[TimelineSpec, dict[str, Any] | None]:
    """(the spec to simulate on, the CPU calibration it rests on or None). A target naming a spec
    file (``target.spec``) is priced on that file's constants."""
    target = spec.target
    if target.spec:
        return load_spec_file(target.spec), None
    if target.platform == "cpu":
        n = math.prod(spec.mesh_shape.values())
        # the devices this process runs (a multi-process variant's others are in other processes)
        local = sum(1 for d in devices if getattr(d, "process_index", spec.process_id) == spec.process_id) or n
        cal, _ = load_or_measure(calibration_path(spec, min(n, local)), devices=min(n, local))
        return cal.spec(devices=n), cal.to_dict()
    return spec_for(target.hardware, target.platform, device_coords(devices)), None


def predicted_entry(
    module: HloModule,
    tl_spec: TimelineSpec,
    *,
    calls_per_video: int,
    where: Path,
    scope_of: Callable[[str], str] | None = None,
    generation: str | None = None,
) -> Predicted:
    """Simulate one program: the prediction, per video, its sensitivity and its Chrome JSON file;
    ``generation`` (the target's hardware record, ``Target.hardware.name``) names the GEMM rates a
    matmul floor divides by (none without one, or on CPU)."""
    start = time.perf_counter()
    program = build_program(module)
    prediction = simulate(program, tl_spec, scope_of)
    step = prediction.step_ns / 1e9
    unc = Uncertainty.from_dict(uncertainty(program, tl_spec))
    where.mkdir(parents=True, exist_ok=True)
    costs, opcodes = program_costs(program.ops)
    peaks = {"peak_flops_per_s": tl_spec.value("peak_flops_per_s"), "hbm_bytes_per_s": tl_spec.value("hbm_bytes_per_s")}
    xprof = xprof_entry(prediction.events, costs, opcodes, **peaks)
    agreement = compare_program(program, tl_spec)
    return Predicted.from_dict(prediction.to_dict()).replace(
        simulate_s=time.perf_counter() - start,
        calls_per_video=calls_per_video,
        video_s=step * calls_per_video,
        sensitivity=sensitivity(program, tl_spec, factor=SENSITIVITY_FACTOR),
        uncertainty=unc,
        video_interval_s=[v * calls_per_video for v in unc.interval_s or ()],
        chrome_trace=str(write_chrome_trace(prediction.chrome_trace(), where / CHROME_NAME)),
        xprof=xprof,
        xprof_interval=xprof_interval(program, tl_spec, xprof, costs, opcodes, peaks),
        matmul_rates=rates.matmul_rates(generation) if generation and tl_spec.platform != "cpu" else None,
        xplane=str(write_predicted_xspace(where, prediction.events, costs, opcodes, **peaks)),
        **({"compiler_agreement": agreement.to_dict()} if agreement is not None else {}),
    )


XPROF_SHARES = ("all_gather_wasted_fraction",)


def xprof_interval(
    program: Any,
    tl_spec: TimelineSpec,
    base: Mapping[str, Any],
    costs: dict[str, tuple[float, float]],
    opcodes: dict[str, str],
    peaks: dict[str, float],
) -> dict[str, Any]:
    """The XProf shares (:data:`XPROF_SHARES`) of the step simulated at each of the interval's
    bounds (:func:`harness.metrics.timeline.share_bound_specs`: every constant and curve fast, slow,
    the links slow with the rest fast and the reverse, the other link-sharing policies, the chip's
    ports per core, scalar ops' price, the datasheet where a curve is carried): per share its lowest
    and highest value over those and the base, and each point. The shares' denominators stay the
    spec's datasheet peaks (XProf's definitions)."""
    points: dict[str, dict[str, float | None]] = {"base": {k: base.get(k) for k in XPROF_SHARES}}
    bounds = share_bound_specs(tl_spec, host_copies=copies_host(program), scalars=runs_scalar(program))
    for name, bound in bounds.items():
        entry = xprof_totals(op_totals(program, bound), costs, opcodes, **peaks)
        points[name] = {k: entry.get(k) for k in XPROF_SHARES}
    out: dict[str, Any] = {"points": points}
    for k in XPROF_SHARES:
        values = [float(x) for v in points.values() if isinstance(x := v.get(k), int | float)]
        out[k] = [min(values), max(values)] if values else None
    return out


def stage_prediction(
    name: str,
    hlo_text: str,
    module: HloModule | Callable[[], HloModule],
    spec: WorkerSpec,
    devices: Sequence[Any],
    calls_per_video: int,
    host_loop: bool = False,
    notes: list[str] | None = None,
) -> Predicted:
    """The ``predicted`` family of stage ``name`` of the variant ``spec`` (see the module docstring).
    ``module``: the parsed program, or what parses it (not called on a hit of the prediction cache:
    a compile-only variant with a cache folder and a fixed spec, :mod:`harness.run.predicted_cache`,
    said in ``notes``)."""
    tl_spec, calibration = timeline_spec(spec, devices)
    where = Path(spec.trace_dir) / name / (f"process-{spec.process_id}" if spec.processes > 1 else "")
    cache, key = None, ""
    if spec.compile_only and spec.cache_dir and calibration is None:
        cache = PredictionCache(spec.cache_dir)
        key = prediction_key(cache_key(spec, name), tl_spec, calls_per_video=calls_per_video, host_loop=host_loop)
    cached = cache.get(key, where) if cache is not None else None
    if cached is not None:
        out = Predicted.from_dict(cached)
        if notes is not None:
            notes.append(f"predicted entry from the prediction cache ({key[:12]}): same program, spec and simulator")
    else:
        parsed = module() if callable(module) else module
        generation = spec.target.hardware.name if spec.target.hardware else None  # the record its GEMM rates are in
        out = predicted_entry(
            parsed, tl_spec, calls_per_video=calls_per_video, where=where, scope_of=scope_of, generation=generation
        )
        out = out.replace(host_loop=host_loop, identity=identity(tl_spec, hlo_text, deterministic=calibration is None))
        if cache is not None:
            cache.put(key, out, where)
    if calibration is not None:
        out = out.replace(calibration=calibration)
    if spec.run.trace:  # the program a measured trace ran, for python -m harness calibrate
        where.mkdir(parents=True, exist_ok=True)
        with gzip.open(where / PROGRAM_NAME, "wt", encoding="utf-8") as f:
            f.write(hlo_text)
        out = out.replace(program=str(where / PROGRAM_NAME))
    return out
