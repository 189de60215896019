"""The processes of one variant (``target.processes = N``): starting ``jax.distributed`` in each
worker, and merging their N results into one.

Every process runs the same worker on its share of the devices (``devices / N``); the mesh spans
all processes' devices, and each process places only its own shards of the inputs
(:func:`ltx2.sharding.place`). Locally the launcher names a coordinator on 127.0.0.1 and each
process's id; on a cluster (no coordinator in the spec) ``jax.distributed.initialize()`` detects
them. On CPU, cross-process collectives use gloo.

Merging (:func:`merge_results`, in the launcher): process 0's result is the record's, with per
stage the static metrics checked identical across processes (compile time apart), the timing of
the slowest process as the stage's (a step ends when its last process does), every process's
timing and phases under ``processes``, and one trace accounting over the whole mesh: every
process's devices (``device`` as that process's trace names it, ``process`` says which), the
other trace fields process 0's, each process's trace files under ``trace_processes``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from harness.families import Family, Static
from harness.results.record import StageEntry
from harness.run.spec import WorkerSpec
from harness.vocabulary import StageStatus, Status

OK_STAGE = (StageStatus.OK, StageStatus.DOES_NOT_FIT)  # a stage that did not fit is a result

STATIC_VOLATILE = ("timing",)  # compile times differ between processes; everything else must not

_joined = False


def initialize(spec: WorkerSpec) -> None:
    """Join the variant's ``jax.distributed`` job (nothing for one process, nor a second time). Call before any
    JAX computation."""
    global _joined
    if spec.processes > 1 and not _joined:
        join(spec.target.platform, spec.processes, spec.process_id, spec.coordinator)
        _joined = True


def join(platform: str, processes: int, process_id: int, coordinator: str | None) -> None:
    """``jax.distributed.initialize`` as process ``process_id`` of ``processes`` (coordinator None: JAX
    detects the cluster, as on TPU/GPU slices); on CPU with gloo collectives across processes."""
    import jax

    if platform == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    if coordinator:
        jax.distributed.initialize(coordinator, num_processes=processes, process_id=process_id)
        if jax.process_index() != process_id:
            raise RuntimeError(f"jax.distributed made this process {jax.process_index()}, the launcher {process_id}")
    else:
        jax.distributed.initialize()


def _median(stage: StageEntry) -> float:
    return statistics.median(stage.measured.samples) if stage.measured and stage.measured.samples else 0.0


def _static_diff(a: Static, b: Static) -> list[str]:
    """The static fields (compile time apart) whose values differ between two processes."""
    return [k for k in sorted(Static.names() - set(STATIC_VOLATILE)) if _plain(getattr(a, k)) != _plain(getattr(b, k))]


def _plain(value: Any) -> str:
    return json.dumps(value.to_dict() if isinstance(value, Family) else value, sort_keys=True, default=str)


def merge_stage(name: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One stage's entry from every process's: see the module docstring."""
    stages = [StageEntry.from_dict(e) for e in entries]
    first = stages[0]
    status, error, notes = first.status, first.error, list(first.notes)
    failed = [(i, s) for i, s in enumerate(stages) if s.status not in OK_STAGE]
    if failed and status in OK_STAGE:
        i, s = failed[0]
        status, error = s.status, f"process {i}: {s.error}"
    if first.static is not None and all(s.static is not None for s in stages):
        for i, s in enumerate(stages[1:], start=1):
            if diff := _static_diff(first.static, s.static):  # type: ignore[arg-type]
                status = Status.FAILED
                error = f"{name}: static metrics of process {i} differ from process 0's ({', '.join(diff)})"
                break
    measured = first.measured
    if all(s.measured is not None for s in stages):
        slowest = max(range(len(stages)), key=lambda i: _median(stages[i]))
        measured = {**stages[slowest].measured.to_dict(), "process": slowest}  # type: ignore[union-attr,assignment]
        notes.append(f"timings: the slowest of {len(stages)} processes (process {slowest})")
    processes = [
        {"process": i, "wall_s": s.measured.wall_s if s.measured else None, "phases_s": s.phases_s, "status": s.status}
        for i, s in enumerate(stages)
    ]
    merged = replace(first, status=status, error=error, notes=tuple(notes), measured=measured).to_dict()
    traces = [s.trace for s in stages if s.trace]
    if first.trace and len(traces) == len(stages):  # one per-device accounting over the mesh: every process's devices
        devices = [{**d.to_dict(), "process": i} for i, t in enumerate(traces) for d in t.devices or ()]
        merged["trace"] = {**first.trace.to_dict(), "devices": devices}
        merged["trace_processes"] = [
            {"process": i, "log_dir": t.log_dir, "xplane": t.xplane} for i, t in enumerate(traces)
        ]
    return {**merged, "processes": processes}


def merge_results(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The variant's result from its processes' (process 0 first); a stage missing from a process
    (it died before) keeps process 0's entry, the outcome says which process failed."""
    merged = dict(results[0])
    stages = merged.get("stages") or {}
    merged["stages"] = {
        name: merge_stage(name, [entry] + [r["stages"][name] for r in results[1:] if name in (r.get("stages") or {})])
        for name, entry in stages.items()
    }
    bad = [n for n, e in merged["stages"].items() if e["status"] not in OK_STAGE]
    if bad and merged.get("status") == Status.OK:
        merged["status"] = Status.FAILED
        merged["error"] = "\n".join(f"{n}: {merged['stages'][n]['error']}" for n in bad)
    merged["processes"] = len(results)
    return merged
