"""Run one variant in this process: ``python -m harness.run.worker <spec.json> <out.json>``.

The launcher (:mod:`harness.run.launcher`) sets the environment first, so JAX is configured before
it is imported here (only for model presets: a test preset's worker never loads it). The worker
reads its :class:`~harness.run.spec.WorkerSpec`, builds each requested stage, compiles it ahead of
time for the static metrics, predicts its step's timeline from the compiled program
(:mod:`harness.run.predicted`), times it (warm-up apart, recompiles watched), compares its output
with its reference variant's on the same inputs (:mod:`harness.run.accuracy`), optionally traces it,
and rewrites ``out.json`` after every stage, so a crash later keeps what was measured. It reports
where it is (stage, phase) in ``spec.status_path`` for the progress display and on stderr, every
error with its traceback, for the launcher's log. A stage whose compiled memory per device exceeds
the device's (:func:`memory_fit`) is ``does-not-fit``, not run; an orphaned worker ends itself
(:mod:`harness.run.lifeline`). Exit status: 0 if every stage succeeded (or did not fit), 1 otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import resource
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import targets, testing
from harness.families import Family, OnTarget, Predicted, Static
from harness.results import stats
from harness.run import jax_cache, lifeline
from harness.run.compile_cache import CompileCache, cache_key
from harness.run.load import MachineBusy
from harness.run.measure import load_notes, measure, trace, trace_steps
from harness.run.spec import WorkerSpec
from harness.run.stage import Stage
from harness.vocabulary import StageStatus, Status

ERROR_TAIL_CHARS = 4000
GiB = 2**30
OK_STATUSES = (StageStatus.OK, StageStatus.DOES_NOT_FIT)  # a stage that did not fit is a result, not a failure


def say(text: str) -> None:
    """A line for the worker's log (the launcher sends stdout and stderr there)."""
    print(f"{time.strftime('%H:%M:%S')} {text}", file=sys.stderr, flush=True)


def write_json(path: str | Path, data: Any) -> None:
    """Atomically replace a JSON file (readers never see half of it). Its temporary sibling is
    named ``<name>...tmp``: the fault-injection suite (tests/harness/faults) stops the worker at it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, default=str)
    os.replace(tmp, path)


class StatusFile:
    """Where the worker is (for the runner's progress line), and how long each phase took."""

    def __init__(self, path: str | None):
        self.path = path
        self.marks: list[tuple[str, str, float]] = []

    def __call__(self, stage: str, phase: str) -> None:
        self.marks.append((stage, phase, time.perf_counter()))
        say(f"{stage}:{phase}" if stage else phase)
        if self.path:
            write_json(self.path, {"stage": stage, "phase": phase, "time": time.time(), "pid": os.getpid()})

    def durations(self, stage: str) -> dict[str, float]:
        """Seconds per phase of one stage (until the next mark, or now for the last one)."""
        out: dict[str, float] = {}
        ends = [t for _, _, t in self.marks[1:]] + [time.perf_counter()]
        for (s, phase, start), end in zip(self.marks, ends, strict=True):
            if s == stage:
                out[phase] = out.get(phase, 0.0) + end - start
        return out


def error_text(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(exc))
    return text[-ERROR_TAIL_CHARS:]


# --------------------------------------------------------------------------- what the stages run on


@dataclass
class Stages:
    """How to build a variant's stages, and what the worker records about where they run."""

    build: Callable[[str], Stage]
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    machine: dict[str, Any] = field(default_factory=dict)
    config_resolved: dict[str, Any] | None = None
    unavailable: tuple[type[BaseException], ...] = ()  # errors whose message is the whole story
    device_memory: tuple[int | None, str] = (None, "")  # bytes per device, and where that number comes from
    build_reference: Callable[[str], Stage] | None = None  # the reference variant's stages (accuracy)


def open_stages(spec: WorkerSpec) -> Stages:
    """The test preset's JAX-free stages, or the model's on the variant's mesh (JAX loads here)."""
    if testing.is_test_preset(spec.preset):
        return Stages(
            lambda name: testing.TestStage(name, spec.preset, dict(spec.config_overrides)),
            device_memory=targets.host_memory_per_device(spec.target.devices or 1),
        )
    from harness.run import distributed
    from harness.run.jax_stage import open_model

    distributed.initialize(spec)
    if (jax_dir := jax_cache.cache_dir_for(spec)) is not None:
        jax_cache.enable(jax_dir)  # before anything compiles
    model = open_model(spec)
    reference = None
    if spec.reference is not None and not spec.compile_only:
        from harness.model import build_config

        ref_cfg = build_config(spec.reference["preset"], spec.reference["config_overrides"])
        reference = dataclasses.replace(model, cfg=ref_cfg).build
    return Stages(
        model.build,
        model.context,
        model.machine,
        model.config_resolved,
        model.unavailable,
        model.device_memory,
        reference,
    )


# --------------------------------------------------------------------------- one stage


def _compile_static(stage: Stage, platform: str) -> Static:
    """The stage's static metrics; a compile that runs out of device memory is a result too."""
    from harness.metrics.compiled.aot import oom_static

    try:
        return stage.static()
    except Exception as e:
        oom = oom_static(e, platform)
        if oom is None:
            raise
        return oom


def static_metrics(name: str, stage: Stage, spec: WorkerSpec, notes: list[str]) -> Static:
    """Static metrics of one stage (compile-only: from the on-disk cache when unchanged), and for
    TPU/GPU targets what they mean there: per step and per video, fit in HBM, roofline. The
    compiled program's HLO text is left in ``stage.hlo_text`` (from the cache on a hit)."""
    if not stage.uses_jax:  # test workloads: nothing compiled, and JAX must stay unimported
        return stage.static()
    from harness.metrics.compiled.aot import analyze

    target = spec.target
    cache = CompileCache(spec.cache_dir) if spec.compile_only and spec.cache_dir else None
    key = cache_key(spec, name) if cache is not None else ""
    hit = cache.get(key) if cache is not None else None
    static = Static.from_dict(hit) if hit is not None else None
    if static is not None and cache is not None:
        notes.append(f"static metrics from the compile cache ({key[:12]}): unchanged variant, not recompiled")
        stage.hlo_text = cache.get_hlo(key)
    else:
        jax_dir = jax_cache.cache_dir_for(spec)
        if jax_dir is not None:
            static = jax_cache.static_with_cache(stage, lambda: _compile_static(stage, target.platform), jax_dir)
        else:
            static = _compile_static(stage, target.platform)
        if cache is not None:
            cache.put(key, static.to_dict())
            if stage.hlo_text:
                cache.put_hlo(key, stage.hlo_text)
    if spec.compile_only and target.platform != "cpu" and "accuracy" in spec.run.metrics:
        static = _with_probe(name, static, spec, notes)
        if cache is not None and static.accuracy_probe is not None:
            cache.put(key, static.to_dict())
    if target.topology and target.platform != "cpu":
        spec_ = target.hardware.spec if target.hardware else None
        devices = math.prod(spec.mesh_shape.values())
        static = static.replace(target=analyze(static, spec_, stage.calls_per_video, devices))
    if static.oom:
        notes.append(f"does not fit: {static.oom.message}")
    return static


PROBED_STAGES = ("denoise_step", "guided_step", "denoise_loop")


def _with_probe(name: str, static: Static, spec: WorkerSpec, notes: list[str]) -> Static:
    """``static`` with ``accuracy_probe`` (:mod:`harness.run.probe`: the variant's numerics knobs run on
    CPU at a small config), measured once per unchanged variant (the compile cache keeps it)."""
    if static.accuracy_probe is not None or name not in PROBED_STAGES:
        return static
    from harness.run.probe import run_in_subprocess

    try:
        scratch = Path(spec.scratch_dir or tempfile.gettempdir()) / f"probe-{spec.variant_id}-{name}"
        probe = run_in_subprocess(spec.config_overrides, spec.mesh_shape, name, scratch)
    except Exception as e:
        notes.append(f"accuracy probe: not measured ({type(e).__name__}: {str(e)[-300:]})")
        return static
    notes.append(f"accuracy probe: {probe['where']}")
    return static.replace(accuracy_probe=probe)


def predicted_metrics(name: str, stage: Stage, spec: WorkerSpec, notes: list[str]) -> Predicted | None:
    """The stage's step simulated from its compiled program (:mod:`harness.run.predicted`); a failure
    to predict is a note, never a failed stage."""
    if not stage.uses_jax or not stage.hlo_text:
        return None
    try:
        from harness.metrics.hlo import parse
        from harness.run.predicted import stage_prediction

        mesh = getattr(stage, "mesh", None)  # a JaxStage's mesh: its devices' coordinates place the collectives
        devices = list(mesh.devices.flat) if mesh is not None else []
        program = getattr(stage, "program", None)  # a host loop around the program: one call is not one step
        host_loop = getattr(program, "host_run", None) is not None
        text = stage.hlo_text

        def module() -> Any:  # a JaxStage's: parsed for its static metrics; parsed only if simulated
            return getattr(stage, "hlo", None) or parse(text)

        return stage_prediction(name, text, module, spec, devices, stage.calls_per_video, host_loop, notes)
    except Exception as e:
        notes.append(f"predicted: not simulated ({type(e).__name__}: {str(e)[:300]})")
        say(f"{name}: prediction failed:\n{error_text(e)}")
        return None


def memory_fit(static: Static, device_memory: tuple[int | None, str]) -> dict[str, Any] | None:
    """Whether the compiled program's memory per device (its bound, or what an out-of-memory compile
    said it needed) fits the device's; None when either number is unknown."""
    available, source = device_memory
    oom, memory = static.oom, static.memory
    needed = (oom.required_bytes if oom else None) or (memory.bound_bytes or memory.peak_bytes if memory else None)
    if oom and not needed:
        return {"fits": False, "needed_bytes": None, "available_bytes": available, "source": "the compiler"}
    if not needed or not available:
        return None
    return {"fits": needed <= available, "needed_bytes": needed, "available_bytes": available, "source": source}


def _unfit_message(fit: dict[str, Any]) -> str:
    if fit["needed_bytes"] is None:
        return "does not fit: the compiler ran out of device memory; compiled only, not run"
    return (
        f"does not fit: needs {fit['needed_bytes'] / GiB:.3g} GiB per device, the device has "
        f"{fit['available_bytes'] / GiB:.3g} GiB ({fit['source']}); compiled only, not run"
    )


def _target_unfit_message(target: OnTarget) -> str:
    needed, hbm = (target.memory.needed_bytes, target.memory.hbm_bytes) if target.memory else (None, None)
    if not needed or not hbm:
        return "does not fit: the compiler ran out of device memory; compiled only"
    return f"does not fit: needs {needed / GiB:.3g} GiB per device, the target has {hbm / GiB:.3g} GiB; compiled only"


def run_stage(name: str, spec: WorkerSpec, stages: Stages, status: StatusFile) -> dict[str, Any]:
    """Everything the manifest asked for about one stage; its errors stay inside its entry."""
    run = spec.run
    entry: dict[str, Any] = {
        "status": StageStatus.OK,
        "error": None,
        "notes": [],
        "static": None,
        "measured": None,
        "trace": None,
        "predicted": None,
    }
    try:
        status(name, "build")
        stage = stages.build(name)
        entry["notes"] += stage.notes
        if "static" in run.metrics:
            status(name, "compile")
            entry["static"] = static_metrics(name, stage, spec, entry["notes"])
            if stage.uses_jax:
                status(name, "predict")
                entry["predicted"] = predicted_metrics(name, stage, spec, entry["notes"])
        wants_trace = run.trace or "trace" in run.metrics
        wants_run = "measured" in run.metrics or wants_trace
        fit = memory_fit(entry["static"], stages.device_memory) if entry["static"] and wants_run else None
        if fit is not None and not spec.compile_only:
            entry["memory_fit"] = fit
        target = entry["static"].target if entry["static"] else None
        if spec.compile_only and target is not None and target.fits is False:
            entry["status"], entry["error"] = "does-not-fit", _target_unfit_message(target)
            say(f"{name}: {entry['error']}")
        elif spec.compile_only and wants_run:
            entry["notes"].append("compile-only: no target devices here, measured and trace metrics skipped")
        elif fit is not None and not fit["fits"]:
            entry["status"], entry["error"] = StageStatus.DOES_NOT_FIT, _unfit_message(fit)
            say(f"{name}: {entry['error']}")
        elif wants_run:
            status(name, "prepare")
            stage.prepare()
            if "measured" in run.metrics:
                measured = measure(
                    stage, run.warmup, run.repeats, status, max_load=run.max_load, max_load_wait_s=run.max_load_wait_s
                )
                entry["measured"] = measured
                entry["notes"] += load_notes(measured.load)
                if stage.uses_jax and spec.outputs_dir is not None:
                    from harness.run.accuracy import stage_accuracy

                    status(name, "accuracy")
                    accuracy = stage_accuracy(name, stage, spec, stages.build_reference, entry["notes"])
                    if accuracy is not None:
                        entry["measured"] = measured.replace(accuracy=accuracy)
            elif run.warmup:
                for _ in range(run.warmup):
                    stage.run()
            if wants_trace and stage.uses_jax:
                xs = entry["measured"].samples if entry["measured"] else []
                median = stats.median(xs) if xs else None
                where = Path(spec.trace_dir) / name / (f"process-{spec.process_id}" if spec.processes > 1 else "")
                entry["trace"] = trace(stage, where, trace_steps(median), status)
    except Exception as e:  # a failed stage is data, not a crash
        entry["status"] = StageStatus.FAILED
        entry["error"] = str(e) if isinstance(e, (*stages.unavailable, MachineBusy)) else error_text(e)
        say(f"{name} failed:\n{error_text(e)}")
    entry["phases_s"] = status.durations(name)
    return {k: v.to_dict() if isinstance(v, Family) else v for k, v in entry.items()}


# --------------------------------------------------------------------------- main


def run_spec(spec: WorkerSpec, out_path: str | Path) -> int:
    status = StatusFile(spec.status_path)
    result: dict[str, Any] = {
        "status": "running",
        "error": None,
        "stages": {},
        "notes": [],
        "machine": {},
        "mode_used": None,
        "config_resolved": None,
    }
    write_json(out_path, result)
    try:
        status("", "start")
        stages = open_stages(spec)
        result["machine"], result["config_resolved"] = stages.machine, stages.config_resolved
        result["mode_used"] = spec.mode
        for name in spec.workload.stages:
            with stages.context():
                result["stages"][name] = run_stage(name, spec, stages, status)
            write_json(out_path, result)
        failed = {n: s["error"] for n, s in result["stages"].items() if s["status"] not in OK_STATUSES}
        result["status"] = Status.FAILED if failed else Status.OK
        result["error"] = "\n".join(f"{n}: {(err or '').strip()}" for n, err in failed.items()) or None
    except Exception as e:
        result["status"], result["error"] = Status.FAILED, error_text(e)
        say(f"failed:\n{error_text(e)}")
    # What the sweep's --jobs default sizes compile-only workers by (ru_maxrss: KiB on Linux).
    result["machine"] = {
        **result["machine"],
        "worker_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    status("", "done")
    say(f"finished: {result['status']}")
    write_json(out_path, result)
    return 0 if result["status"] == Status.OK else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    signal.pthread_sigmask(signal.SIG_UNBLOCK, lifeline.LAUNCHER_SIGNALS)  # blocked while the launcher started us
    if len(args) != 2:
        print("usage: python -m harness.run.worker <spec.json> <out.json>", file=sys.stderr)
        return 2
    spec = WorkerSpec.from_json(Path(args[0]).read_text())
    if spec.parent_pid is not None:
        lifeline.hold(spec.parent_pid, spec.scratch_dir)
    one_of = f"process {spec.process_id} of {spec.processes}, " if spec.processes > 1 else ""
    say(
        f"worker {os.getpid()}: {one_of}{spec.variant_name} ({spec.variant_id}), preset {spec.preset}, {spec.mode} on "
        f"{spec.target.platform} mesh {dict(spec.target.mesh)}, stages {', '.join(spec.workload.stages)}"
    )
    try:
        return run_spec(spec, args[1])
    finally:
        if spec.parent_pid is not None:
            lifeline.leaving(spec.parent_pid, spec.scratch_dir)


if __name__ == "__main__":
    sys.exit(main())
