"""What a report shows, as plain data extracted from result records (no HTML, no plots).

Everything here is a pure function of the records: no files are read, nothing is
re-run, traces are not re-parsed (only the numbers the worker stored are used).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import catalogue
from harness.families import CollectiveTotals, Machine, Roofline, TargetMemory, Versions
from harness.results import stats
from harness.results.compare import flatten_stage
from harness.results.diff import DIFFERENT_WORKLOAD, comparable
from harness.results.record import Record, StageEntry

XPROF_PORT = 8791


@dataclass(frozen=True)
class StageRow:
    """One (variant, stage) line of the variant table."""

    variant: str
    variant_id: str
    stage: str
    status: str
    mode: str | None
    time: stats.Spread | None = None
    speedup: float | None = None  # reference median / this median
    compile_s: float | None = None
    recompiles: float | None = None
    memory_bytes: float | None = None  # per device: memory bound (arg + out + temp - alias), else peak
    collective_count: float | None = None
    collective_bytes: float | None = None
    wasted_fraction: float | None = None
    error: str | None = None
    speedup_reference: str | None = None  # the variant `speedup` is relative to, for this stage
    speedup_note: str | None = None  # "1.23x", "n/a (different workload)", or None (no reference)
    scope_coverage: float | None = None  # share of traced op time attributed to a model scope
    workload: str = ""  # preset and workload sizes (rows compare only within one)
    under_load: bool = False  # timed while other processes kept the machine busy
    accuracy: float | None = None  # relative L2 of the output against its reference variant's (accuracy.rel_l2)
    accuracy_max_abs: float | None = None
    probe: Mapping[str, Any] | None = None  # a compile-only variant's CPU accuracy probe (static.accuracy_probe)


def ok_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.ok]


def failed_records(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if not r.ok]


def pick_reference(records: Sequence[Record], reference: str | None) -> str | None:
    """The variant speedups are relative to: the one named, else the first that succeeded."""
    names = [r.variant.name for r in records]
    if reference is not None:
        if reference not in names:
            raise KeyError(f"reference variant {reference!r} is not in the results (variants: {', '.join(names)})")
        return reference
    ok = ok_records(records)
    return ok[0].variant.name if ok else None


def _samples(entry: StageEntry) -> list[float]:
    return entry.measured.samples if entry.measured else []


def stage_rows(records: Sequence[Record], reference: str | None = None) -> list[StageRow]:
    """One row per (variant, stage). A stage's speedup is against the variant's own reference
    (``variant.reference``, from the manifest) when that ran the stage; records without one (older
    results) compare with the ``reference`` variant when it ran the stage, else with the first
    variant that did. A speedup against a variant of another model or workload size is not given:
    its note says ``n/a (different workload)``."""
    ref = pick_reference(records, reference)
    by_name = {r.variant.name: r for r in records}
    ref_medians: dict[str, tuple[str, float]] = {}
    ordered = sorted(records, key=lambda r: r.variant.name != ref)  # the reference first
    for r in ordered:
        for stage, entry in r.stages.items():
            if stage not in ref_medians and r.ok and (xs := _samples(entry)):
                ref_medians[stage] = (r.variant.name, stats.median(xs))
    declared = any(r.variant.reference for r in records)
    rows = []
    for r in records:
        stages = r.stages
        if not stages:
            rows.append(StageRow(r.variant.name, r.variant.id, "-", r.status, r.target.mode_used, error=r.error))
            continue
        for stage, entry in stages.items():
            m = flatten_stage(entry)
            xs = _samples(entry)
            time = stats.spread(xs) if xs else None
            if declared:
                other = by_name.get(r.variant.reference or "")
                ref_xs = _samples(other.stages[stage]) if other and other.ok and stage in other.stages else []
                ref_name, ref_median = (other.variant.name, stats.median(ref_xs)) if other and ref_xs else (None, 0.0)
            else:
                ref_name, ref_median = ref_medians.get(stage, (None, 0.0))
            speedup = ref_median / time.median if time and time.median and ref_name else None
            note = None if speedup is None else f"{speedup:.2f}x"
            if ref_name and not comparable(r, by_name[ref_name]):
                speedup, note = None, DIFFERENT_WORKLOAD
            memory = m.get(catalogue.MEMORY_BOUND) or m.get(catalogue.MEMORY_PEAK)
            rows.append(
                StageRow(
                    variant=r.variant.name,
                    variant_id=r.variant.id,
                    stage=stage,
                    status=entry.verdict,
                    mode=r.target.mode_used,
                    time=time,
                    speedup=speedup,
                    speedup_reference=ref_name if note is not None else None,
                    compile_s=_value(m, catalogue.COMPILE_S),
                    recompiles=_value(m, catalogue.RECOMPILES),
                    memory_bytes=memory.value if memory else None,
                    collective_count=_value(m, catalogue.collective(catalogue.TOTAL, "count")),
                    collective_bytes=_value(m, catalogue.collective(catalogue.TOTAL, "bytes")),
                    wasted_fraction=_value(m, catalogue.TRACE_WASTED),
                    error=entry.error,
                    speedup_note=note,
                    scope_coverage=entry.trace.scope_coverage if entry.trace else None,
                    workload=workload_label(r),
                    under_load=catalogue.TIME in m and m[catalogue.TIME].loaded,
                    accuracy=_value(m, catalogue.ACCURACY_L2),
                    accuracy_max_abs=_value(m, catalogue.ACCURACY_MAX),
                    probe=entry.static.accuracy_probe if entry.static is not None else None,
                )
            )
    return rows


def workload_label(r: Record) -> str:
    """``small 256x256 px x 65 frames, batch 2``: the model and the sizes a stage's time depends on."""
    w = r.config.workload
    if not w:
        return r.config.preset
    return (
        f"{r.config.preset} {w.get('height', '?')}x{w.get('width', '?')} px x {w.get('num_frames', '?')} frames, "
        f"batch {w.get('batch', '?')}"
    )


def _value(m: Mapping[str, Any], key: str) -> float | None:
    return m[key].value if key in m else None


def collectives_by_kind(record: Record, stage: str) -> dict[str, CollectiveTotals]:
    """kind -> count, operand and result bytes, for the kinds that occur in a stage."""
    entry = record.stages.get(stage)
    static = entry.static if entry is not None else None
    by_kind = (static.collectives.by_kind if static and static.collectives else None) or {}
    return {k: c for k, c in by_kind.items() if c.count}


def top_ops(record: Record, stage: str, n: int = 10) -> list[Mapping[str, Any]]:
    entry = record.stages.get(stage)
    trace = entry.trace if entry is not None else None
    return list(((trace.top_ops if trace else None) or [])[:n])


@dataclass(frozen=True)
class TraceLink:
    variant: str
    stage: str
    href: str  # relative to the report directory
    command: str
    perfetto_href: str | None = None  # the Chrome-JSON trace next to the xplane, relative to the report


def trace_links(records: Sequence[Record], out_dir: str | Path) -> list[TraceLink]:
    """Links to each stored trace directory (relative to the report) and the XProf command.

    Relative trace paths in a record are relative to where the sweep ran (the repository
    root, as is the report command's working directory).
    """
    links = []
    for r in records:
        for stage, path in r.artifacts.traces.items():
            entry = r.stages.get(stage)
            chrome = entry.trace.chrome_trace if entry is not None and entry.trace else None
            command = f"xprof --logdir {path} --port {XPROF_PORT}"
            perfetto = href(chrome, out_dir) if chrome else None
            links.append(TraceLink(r.variant.name, stage, href(path, out_dir), command, perfetto))
    return links


def href(path: str, out_dir: str | Path) -> str:
    """``path`` as a link from the report's folder."""
    return Path(os.path.relpath(os.path.abspath(path), os.path.abspath(out_dir))).as_posix()


def header(records: Sequence[Record]) -> dict[str, Any]:
    """Sweep-level facts: manifest, machine, versions, commit, mode, time span."""
    first = next(iter(ok_records(records) or records), None)
    modes = sorted({str(r.target.mode_used) for r in records if r.target.mode_used})
    commits = sorted({r.commit or "unknown" for r in records})
    times = sorted(t for r in records for t in (r.started_at, r.finished_at) if t)
    return {
        "sweep_id": first.sweep_id if first is not None else None,
        "manifest": first.manifest if first is not None else None,
        "machine": first.machine if first is not None else Machine(),
        "versions": first.versions if first is not None else Versions(),
        "commits": commits,
        "dirty": any(r.dirty for r in records),
        "modes": modes,
        "compile_only": modes == ["compile"],
        "target": first.target if first is not None else None,
        "span": (times[0], times[-1]) if times else None,
        "variants": len(records),
        "failed": len(failed_records(records)),
    }


@dataclass(frozen=True)
class TargetRow:
    """One (variant, stage) line of the on-target (compile-only) analysis."""

    variant: str
    stage: str
    mode: str | None
    device_kind: str | None
    fits: bool | None
    needed_bytes: float | None  # per device: peak, or what an out-of-memory compile asked for
    hbm_bytes: float | None
    argument_bytes: float | None
    temp_bytes: float | None
    collective_bytes_per_call: dict[str, float]  # kind -> operand bytes per device and call
    collective_bytes_per_video: float | None
    calls_per_video: int
    flops_per_device: float | None
    step_s: float | None
    step_serial_s: float | None
    bound_by: str | None
    video_s: float | None
    compile_s: float | None
    floor_s: float | None = None  # matmul FLOPs at the best measured GEMM rate (the prediction's matmul_rates)
    floor_datasheet_s: float | None = None  # ... at the datasheet peak


def _floors(flops: float | None, rates: Mapping[str, Any] | None) -> dict[str, float | None]:
    """The matmul floor at the best measured GEMM rate and at the datasheet peak (None without either)."""
    if not flops or not rates:
        return {"floor_s": None, "floor_datasheet_s": None}
    return {
        "floor_s": flops / rates["achievable_flops_per_s"],
        "floor_datasheet_s": flops / rates["datasheet_flops_per_s"],
    }


def target_rows(records: Sequence[Record]) -> list[TargetRow]:
    """Rows for every stage that carries a ``static.target`` analysis (TPU/GPU targets)."""
    rows = []
    for r in records:
        for stage, entry in r.stages.items():
            static = entry.static
            t = static.target if static else None
            if not static or not t:
                continue
            memory, roof = t.memory or TargetMemory(), t.roofline or Roofline()
            per_call = {k: float(c.bytes or 0) for k, c in (t.collectives_per_call or {}).items()}
            per_video = t.collectives_per_video
            rows.append(
                TargetRow(
                    variant=r.variant.name,
                    stage=stage,
                    mode=r.target.mode_used,
                    device_kind=t.device_kind,
                    fits=t.fits,
                    needed_bytes=memory.needed_bytes,
                    hbm_bytes=memory.hbm_bytes,
                    argument_bytes=memory.argument_bytes,
                    temp_bytes=memory.temp_bytes,
                    collective_bytes_per_call=per_call,
                    collective_bytes_per_video=(
                        sum(float(c.bytes or 0) for c in per_video.values()) if per_video is not None else None
                    ),
                    calls_per_video=int(t.calls_per_video or 1),
                    flops_per_device=t.flops_per_device,
                    step_s=roof.step_s,
                    step_serial_s=roof.step_serial_s,
                    bound_by=roof.bound_by,
                    video_s=t.roofline_per_video_s,
                    compile_s=static.compile_s,
                    **_floors(t.flops_per_device, entry.predicted.matmul_rates if entry.predicted else None),
                )
            )
    return rows


def target_assumptions(records: Sequence[Record]) -> tuple[list[str], list[str]]:
    """(roofline assumptions, spec sources) stored with the analyses, deduplicated."""
    assumptions: dict[str, None] = {}
    sources: dict[str, None] = {}
    for r in records:
        for entry in r.stages.values():
            t = entry.static.target if entry.static else None
            if t is None:
                continue
            assumptions.update(dict.fromkeys((t.roofline.assumptions if t.roofline else None) or ()))
            if src := t.spec_source:
                sources[src] = None
    return list(assumptions), list(sources)
