"""The ``static`` family of a record's stage and its parts, typed (see :mod:`harness.families`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.families.base import Family


@dataclass(frozen=True, eq=False, kw_only=True)
class Roofline(Family):
    """The on-target roofline of one call: the slowest of compute, HBM and interconnect (and all serial)."""

    compute_s: float | None = None
    hbm_s: float | None = None
    interconnect_s: float | None = None
    step_s: float | None = None
    step_serial_s: float | None = None
    bound_by: str | None = None
    assumptions: list[str] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class TargetMemory(Family):
    """What one device needs beside what it has (on-target analysis)."""

    needed_bytes: float | None = None
    hbm_bytes: float | None = None
    argument_bytes: float | None = None
    temp_bytes: float | None = None
    peak_bytes: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class CollectiveTotals(Family):
    """One collective kind's totals per call (count, operand and result bytes; ``bytes`` per scope)."""

    count: float | None = None
    operand_bytes: float | None = None
    result_bytes: float | None = None
    bytes: float | None = None
    wire_bytes: float | None = (
        None  # on target: what one device sends (:func:`harness.metrics.compiled.aot.wire_bytes`)
    )


@dataclass(frozen=True, eq=False, kw_only=True)
class OnTarget(Family):
    """``static.target``: the program on the target hardware (:mod:`harness.metrics.compiled.aot`)."""

    fits: bool | None = None
    memory: TargetMemory | None = None
    roofline: Roofline | None = None
    spec: Mapping[str, Any] | None = None  # the target's published figures: name, device_kind, source, ...
    calls_per_video: int | None = None
    roofline_per_video_s: float | None = None
    flops_per_device: float | None = None
    hbm_traffic_bytes: float | None = None
    collectives_per_call: Mapping[str, CollectiveTotals] | None = None
    collectives_per_video: Mapping[str, CollectiveTotals] | None = None

    @property
    def device_kind(self) -> str | None:
        return (self.spec or {}).get("device_kind")

    @property
    def spec_source(self) -> str | None:
        return (self.spec or {}).get("source")


@dataclass(frozen=True, eq=False, kw_only=True)
class Collectives(Family):
    """``static.collectives``: per kind, what one call runs."""

    by_kind: Mapping[str, CollectiveTotals] | None = None
    unknown_trip_count_loops: list[str] | None = None  # loops whose collectives were counted once


@dataclass(frozen=True, eq=False, kw_only=True)
class ScopeStatic(Family):
    """One model scope's share of the compiled program (:mod:`harness.metrics.compiled.attribution`), per call."""

    flops: float | None = None
    bytes: float | None = None
    collectives: Mapping[str, CollectiveTotals] | None = None  # kind -> count, bytes

    @property
    def collective_count(self) -> float:
        return sum(float(c.count or 0) for c in (self.collectives or {}).values())

    @property
    def collective_bytes(self) -> float:
        return sum(float(c.bytes or 0) for c in (self.collectives or {}).values())


@dataclass(frozen=True, eq=False, kw_only=True)
class CollectiveSite(Family):
    """The collectives one scope runs for one cause (a logical-axis rule), per call."""

    scope: str | None = None
    kind: str | None = None
    count: float | None = None
    bytes: float | None = None
    cause: str | None = None
    axes: list[str] | None = None
    logical: str | None = None
    example: str | None = None  # one instruction's name


@dataclass(frozen=True, eq=False, kw_only=True)
class Attribution(Family):
    """``static.attribution``: the compiled program by model scope; ``coverage``: each total's share
    with a scope (``flops``, ``bytes``, ``collective_bytes``; ``inferred``: the share of it inferred)."""

    module: str | None = None
    by_scope: Mapping[str, ScopeStatic] | None = None
    collective_sites: tuple[CollectiveSite, ...] | None = None
    coverage: Mapping[str, Any] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Memory(Family):
    """``static.memory``: the compiler's memory analysis, bytes per device."""

    argument_bytes: float | None = None
    output_bytes: float | None = None
    temp_bytes: float | None = None
    peak_bytes: float | None = None
    bound_bytes: float | None = None  # arguments + outputs + temporaries - aliased
    alias_bytes: float | None = None
    generated_code_bytes: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Cost(Family):
    """XLA's cost_analysis of one call, per device (loop bodies once)."""

    flops: float | None = None
    bytes_accessed: float | None = None
    transcendentals: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Timing(Family):
    """Seconds to lower and compile the stage."""

    lower_seconds: float | None = None
    compile_seconds: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class CacheEvents(Family):
    """One compile's persistent-cache traffic (:mod:`harness.run.jax_cache`)."""

    seconds: float | None = None
    hits: int | None = None
    misses: int | None = None
    hit: bool | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class CompileCache(Family):
    """``static.compile_cache``: the first compile and a recompile served from the disk cache."""

    dir: str | None = None
    first: CacheEvents | None = None
    warm: CacheEvents | None = None
    cold_s: float | None = None  # the first compile's seconds when it missed (only then)
    warm_s: float | None = None
    warm_misses: int | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class AccuracyProbe(Family):
    """A compile-only variant's knobs run on CPU at a small config (:mod:`harness.run.probe`): medians
    over seeds of its and plain bfloat16's relative L2 from float32, their per-seed ratio, where."""

    rel_l2: float | None = None
    max_abs: float | None = None
    bf16_rel_l2: float | None = None
    ratio: float | None = None
    worse: int | None = None
    seeds: int | None = None
    where: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Oom(Family):
    """An out-of-memory compile: the compiler's first line and the bytes it said it needed and had."""

    message: str | None = None
    required_bytes: float | None = None
    available_bytes: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Static(Family):
    """The ``static`` family: numbers from the compiled program (:mod:`harness.metrics.compiled.static`)."""

    platform: str | None = None
    timing: Timing | None = None
    cost: Cost | None = None
    analytic_flops: float | None = None
    memory_traffic_bytes: float | None = None  # HBM bytes of one call (on-chip buffers not counted)
    matmul_flops: float | None = None  # loops by trip count
    memory: Memory | None = None
    tokens: Mapping[str, int] | None = None
    # the stage program's ``extra`` (ltx2 ``StageProgram.extra``): videos per call, steps and guidance
    # passes of a denoising stage, decode and text sizes
    videos: int | None = None
    steps: int | None = None
    rows_per_step: int | None = None
    guidance_passes: Mapping[str, Any] | None = None
    latent_grid: list[int] | None = None
    audio_latent_frames: int | None = None
    text_tokens: int | None = None
    oom: Oom | None = None
    collectives: Collectives | None = None
    target: OnTarget | None = None
    attribution: Attribution | None = None
    compile_cache: CompileCache | None = None
    accuracy_probe: AccuracyProbe | None = None

    @property
    def compile_s(self) -> float | None:
        return self.timing.compile_seconds if self.timing else None

    @property
    def lower_s(self) -> float | None:
        return self.timing.lower_seconds if self.timing else None

    @property
    def cost_flops(self) -> float | None:
        return self.cost.flops if self.cost else None

    @property
    def cost_bytes(self) -> float | None:
        return self.cost.bytes_accessed if self.cost else None

    @property
    def oom_message(self) -> str:
        return str(self.oom.message or self.oom) if self.oom is not None else "None"
