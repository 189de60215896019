"""The metric families of a record's stage as typed, frozen objects: their JSON form, read and written.

A stage's ``static``, ``measured``, ``trace`` and ``predicted`` (and the objects inside them) are
read into :class:`Static`, :class:`Measured`, :class:`Trace` and :class:`Predicted`
(:meth:`harness.results.record.StageEntry.from_dict`), so readers ask attributes
(``entry.predicted.step_s``) instead of digging with strings. A family read from JSON keeps that
object (``raw``) and writes it back unchanged; one filled by its producer makes its JSON object from
its fields (:class:`~harness.families.base.Family`). A family grows by a field here and its
producer; records without the key read it as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.families.base import Family as Family
from harness.families.base import at as at
from harness.families.base import read as read
from harness.families.static import Attribution as Attribution
from harness.families.static import CacheEvents as CacheEvents
from harness.families.static import Collectives as Collectives
from harness.families.static import CollectiveSite as CollectiveSite
from harness.families.static import CollectiveTotals as CollectiveTotals
from harness.families.static import CompileCache as CompileCache
from harness.families.static import Cost as Cost
from harness.families.static import Memory as Memory
from harness.families.static import OnTarget as OnTarget
from harness.families.static import Oom as Oom
from harness.families.static import Roofline as Roofline
from harness.families.static import ScopeStatic as ScopeStatic
from harness.families.static import Static as Static
from harness.families.static import TargetMemory as TargetMemory
from harness.families.static import Timing as Timing


@dataclass(frozen=True, eq=False, kw_only=True)
class XprofNode(Family):
    """One node of XProf's op profile (all ops, a category, an op): its time and the utilisations
    XProf's op profile shows (:mod:`harness.metrics.xprof.metrics`); an op's name and category."""

    op: str | None = None
    category: str | None = None
    time_ns: float | None = None
    time_fraction: float | None = None
    flops_utilization: float | None = None
    hbm_bw_utilization: float | None = None
    wasted_fraction: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class XprofProfile(Family):
    """XProf's op-profile numbers of one step (predicted, traced, or from xprof's own converter)."""

    root: XprofNode | None = None
    categories: Mapping[str, XprofNode] | None = None  # most wasted first
    top_wasted_ops: tuple[XprofNode, ...] | None = None  # each with its ``op`` and ``category``
    all_gather_wasted_fraction: float | None = None
    peak_flops_per_s: float | None = None
    hbm_bytes_per_s: float | None = None
    definitions: Mapping[str, str] | None = None
    note: str | None = None  # a trace's: where its per-op costs came from
    converter: XprofProfile | None = None  # a trace's: the same numbers by xprof's own op_profile tool


@dataclass(frozen=True, eq=False, kw_only=True)
class CriticalPathEntry(Family):
    """What the compute stream spent its time running or waiting for, by op (predicted)."""

    op: str | None = None
    scope: str | None = None
    category: str | None = None
    ns: float | None = None
    count: int | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class TopOp(Family):
    """One op of a measured trace with the most self time (all devices and traced steps)."""

    module: str | None = None
    op: str | None = None
    scope: str | None = None
    source: str | None = None
    category: str | None = None
    count: float | None = None
    total_ns: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class TraceDevice(Family):
    """One device's accounting of a measured trace (:mod:`harness.metrics.measured.accounting`), ns per window."""

    device: int | None = None
    window_ns: float | None = None
    busy_ns: float | None = None
    compute_ns: float | None = None
    collective_ns: float | None = None
    collective_ns_by_kind: Mapping[str, float] | None = None
    exposed_collective_ns: float | None = None
    idle_ns: float | None = None
    wasted_ns: float | None = None
    wasted_fraction: float | None = None
    rendezvous_wait_ns: float | None = None  # CPU: waiting for the other participants of a collective


@dataclass(frozen=True, eq=False, kw_only=True)
class StepSample(Family):
    """One traced call: its window and its ns by category and by model scope (device mean)."""

    window_ns: float | None = None
    categories: Mapping[str, float] | None = None
    by_scope: Mapping[str, float] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Trace(Family):
    """The ``trace`` family: a measured XLA trace of the stage (:mod:`harness.metrics.measured.trace`)."""

    platform: str | None = None
    devices: tuple[TraceDevice, ...] | None = None
    steps: int | None = None
    top_ops: tuple[TopOp, ...] | None = None
    note: str | None = None
    step_samples: tuple[StepSample, ...] | None = None
    by_scope: Mapping[str, float] | None = None
    scope_coverage: float | None = None
    scope_inferred: float | None = None
    xprof: XprofProfile | None = None
    log_dir: str | None = None
    xplane: str | None = None
    chrome_trace: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Identity(Family):
    """What a prediction is a function of (:mod:`harness.metrics.timeline.identity`); ``deterministic``:
    priced by a fixed table (gated), not constants measured for the sweep."""

    spec: str | None = None
    simulator_version: int | None = None
    program: str | None = None
    deterministic: bool | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Calibration(Family):
    """The CPU constants a CPU prediction rests on (:class:`harness.calibration.cpu.CpuCalibration`),
    measured with ``devices`` simulated devices sharing ``cores`` host cores."""

    source: str | None = None
    measured_at: str | None = None
    devices: int | None = None
    cores: int | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Predicted(Family):
    """The ``predicted`` family: one call of the stage's compiled program simulated on the target's
    spec (:mod:`harness.run.predicted`): times in seconds, shares of the step's window."""

    step_s: float | None = None
    video_s: float | None = None
    calls_per_video: int | None = None  # video_s is step_s times these
    exposed_all_gather_fraction: float | None = None
    exposed_collective_fraction: float | None = None
    wasted_fraction: float | None = None
    device: TraceDevice | None = None  # the simulated device's accounting
    critical_by_scope_ns: Mapping[str, float] | None = None  # the step by model scope
    identity: Identity | None = None  # what the prediction is a function of (gated: a fixed spec)
    critical_path: tuple[CriticalPathEntry, ...] | None = None
    block_gantt: tuple[GanttEvent, ...] | None = None
    spec: Mapping[str, Any] | None = None  # the timeline spec, its constants with their sources
    sensitivity: Sensitivity | None = None  # each constant moved down and up: the step's low and high
    uncertainty: Uncertainty | None = None  # the step's interval from the constants' stated uncertainty
    video_interval_s: list[float] | None = None  # the interval times the calls per video
    chrome_trace: str | None = None  # the simulated timeline, gzipped Chrome JSON (Perfetto opens it)
    xprof: XprofProfile | None = None  # XProf's op-profile numbers of the step
    xprof_interval: Mapping[str, Any] | None = None  # the XProf shares at the interval's joint bounds
    matmul_rates: Mapping[str, Any] | None = None  # the best measured GEMM rate and the datasheet peak
    xplane: str | None = None  # the same timeline as a TPU-layout XSpace (xprof opens its folder)
    host_loop: bool | None = None  # one call is a host loop around the program (not one program call)
    calibration: Calibration | None = None  # CPU: the constants measured for the sweep
    notes: list[str] | None = None
    simulate_s: float | None = None
    compiler_agreement: Mapping[str, Any] | None = None  # the simulator's prices against libtpu's cycles
    program: str | None = None  # a traced stage's optimized HLO (gzip), which calibrate pairs

    @property
    def spec_name(self) -> str | None:
        return (self.spec or {}).get("name")


@dataclass(frozen=True, eq=False, kw_only=True)
class SensitivityConstant(Family):
    """The predicted step with one constant moved down and up by the sensitivity's factor."""

    low_step_s: float | None = None
    high_step_s: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Sensitivity(Family):
    """How the predicted step moves with each spec constant (:func:`harness.metrics.timeline.sensitivity`)."""

    most: str | None = None  # the constant that moves the step most
    factor: float | None = None
    step_s: float | None = None
    constants: Mapping[str, SensitivityConstant] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class GanttEvent(Family):
    """One event of a predicted transformer block's timeline."""

    lane: str | None = None
    name: str | None = None
    category: str | None = None
    start_ns: float | None = None
    end_ns: float | None = None
    scope: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Uncertainty(Family):
    """The predicted step's interval over the modelling choices (:func:`harness.metrics.timeline.uncertainty`)."""

    interval_s: list[float] | None = None
    points_s: Mapping[str, float] | None = None
    assumed: list[str] | None = None  # the points that move an assumption, not a measured constant
    curves: Mapping[str, float] | None = None  # each efficiency curve's relative uncertainty


@dataclass(frozen=True, eq=False, kw_only=True)
class Recompiles(Family):
    """XLA compilations in a timed region (:mod:`harness.metrics.measured.recompile`)."""

    count: int | None = None
    by_function: Mapping[str, int] | None = None
    reasons: list[str] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Transfers(Family):
    """Implicit transfers in one untimed call (jax's transfer guard), with a few of its log lines."""

    host_to_device: int | None = None
    device_to_host: int | None = None
    device_to_device: int | None = None
    examples: list[str] | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Versions(Family):
    """The library versions a record ran with (:func:`harness.results.provenance.library_versions`;
    null where one is not installed)."""

    jax: str | None = None
    jaxlib: str | None = None
    flax: str | None = None
    torch: str | None = None
    numpy: str | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Git(Family):
    """The checkout a record ran from (:func:`harness.results.provenance.git_info`; null outside git)."""

    commit: str | None = None
    dirty: bool | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Machine(Family):
    """Where a record ran (:func:`harness.results.provenance.machine`; the device fields and the
    worker's peak memory from the worker that saw the devices)."""

    hostname: str | None = None
    cpu: str | None = None
    cpu_count: int | None = None
    os: str | None = None
    python: str | None = None
    backend: str | None = None
    device_kind: str | None = None
    device_count: int | None = None
    worker_peak_rss_bytes: int | None = None

    @property
    def fingerprint(self) -> tuple[Any, ...]:
        """What makes two machines' timings comparable: CPU, backend, device kind and count."""
        return (self.cpu, self.backend, self.device_kind, self.device_count)


@dataclass(frozen=True, eq=False, kw_only=True)
class QuietWait(Family):
    """How long the repeats waited for a quiet machine (``run.max_load``), and how busy it was then."""

    max_load: float | None = None
    waited_s: float | None = None
    others_busy_cores: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Load(Family):
    """The machine's load while the repeats ran (:mod:`harness.run.load`)."""

    cores: int | None = None
    wall_s: float | None = None
    others_cpu_s: float | None = None
    others_busy_cores: float | None = None
    loadavg_1m: list[float] | None = None  # at the start and the end
    loaded: bool | None = None
    loaded_above_cores: float | None = None
    quiet_wait: QuietWait | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Accuracy(Family):
    """The stage's output against the reference variant's (:mod:`harness.metrics.measured.accuracy`)."""

    reference: str | None = None  # the reference variant's name
    rel_l2: float | None = None
    max_abs: float | None = None
    elements: int | None = None
    leaves: int | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Measured(Family):
    """The ``measured`` family: timed calls (:mod:`harness.run.measure`)."""

    samples_s: list[float] | None = None
    warmup_s: list[float] | None = None
    rounds_s: list[list[float]] | None = None  # pooled runs: each run's samples apart
    wall_s: Mapping[str, Any] | None = None
    recompiles: Recompiles | None = None
    warmup_compiles: Recompiles | None = None
    transfers: Transfers | None = None
    load: Load | None = None
    accuracy: Accuracy | None = None

    @property
    def samples(self) -> list[float]:
        return [float(x) for x in self.samples_s or ()]
