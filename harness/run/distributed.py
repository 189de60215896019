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
from collections.abc import Mapping, Sequence
from typing import Any

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


def _median(measured: Mapping[str, Any] | None) -> float:
    wall = (measured or {}).get("wall_s") or {}
    return float(wall.get("median") or 0.0) if isinstance(wall, Mapping) else 0.0


def _static_key(static: Mapping[str, Any] | None) -> str:
    return json.dumps(
        {k: v for k, v in (static or {}).items() if k not in STATIC_VOLATILE}, sort_keys=True, default=str
    )


def _static_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    keys = sorted((set(a) | set(b)) - set(STATIC_VOLATILE))
    return [
        k
        for k in keys
        if json.dumps(a.get(k), sort_keys=True, default=str) != json.dumps(b.get(k), sort_keys=True, default=str)
    ]


def merge_stage(name: str, entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One stage's entry from every process's: see the module docstring."""
    merged = dict(entries[0])
    merged["notes"] = list(merged.get("notes") or [])
    failed = [(i, e) for i, e in enumerate(entries) if e.get("status") not in OK_STAGE]
    if failed and merged.get("status") in OK_STAGE:
        i, e = failed[0]
        merged["status"], merged["error"] = e.get("status", Status.FAILED), f"process {i}: {e.get('error')}"
    statics = [e.get("static") for e in entries]
    if all(s is not None for s in statics):
        for i, s in enumerate(statics[1:], start=1):
            if _static_key(s) != _static_key(statics[0]):
                diff = ", ".join(_static_diff(statics[0], s))  # type: ignore[arg-type]
                merged["status"] = Status.FAILED
                merged["error"] = f"{name}: static metrics of process {i} differ from process 0's ({diff})"
                break
    measured = [e.get("measured") for e in entries]
    if all(m is not None for m in measured):
        slowest = max(range(len(entries)), key=lambda i: _median(measured[i]))
        merged["measured"] = {**measured[slowest], "process": slowest}  # type: ignore[dict-item]
        merged["notes"].append(f"timings: the slowest of {len(entries)} processes (process {slowest})")
    merged["processes"] = [
        {
            "process": i,
            "wall_s": (e.get("measured") or {}).get("wall_s"),
            "phases_s": e.get("phases_s"),
            "status": e.get("status"),
        }
        for i, e in enumerate(entries)
    ]
    traces: list[Mapping[str, Any]] = [e["trace"] for e in entries if e.get("trace")]
    if traces and len(traces) == len(entries):  # one per-device accounting over the mesh: every process's devices
        merged["trace"] = {
            **traces[0],
            "devices": [{**d, "process": i} for i, t in enumerate(traces) for d in t.get("devices") or ()],
        }
        merged["trace_processes"] = [
            {"process": i, "log_dir": t.get("log_dir"), "xplane": t.get("xplane")} for i, t in enumerate(traces)
        ]
    return merged


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
