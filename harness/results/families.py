"""The metric families of a record's stage as typed, frozen objects over their JSON form.

A stage's ``predicted`` and ``trace`` (and the XProf op profiles inside them) are read into a
:class:`Predicted` / :class:`Trace` (:class:`XprofProfile`, :class:`XprofNode`) by
:meth:`harness.results.record.StageEntry.from_dict`, so readers ask attributes
(``entry.predicted.step_s``, ``p.xprof.root.flops_utilization``) instead of digging with strings.
The JSON form is the producers' (:mod:`harness.run.predicted`, :mod:`harness.run.measure`,
:mod:`harness.metrics.xprof_metrics`) and a family keeps the object it was read from (``raw``):
:meth:`Family.to_dict` gives it back unchanged, so every record written before reads and writes
back the same (``tests/harness/results/test_read_before.py``). A family is also a read-only
``Mapping`` of that object, for the readers not yet moved to attributes. A family grows by a field
here and its producer; records without the key read it as None.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self


@dataclass(frozen=True, eq=False, kw_only=True)
class Family(Mapping[str, Any]):
    """A JSON object read into typed fields (None where absent); ``raw`` is the object itself."""

    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    NESTED: ClassVar[Mapping[str, type[Family]]] = {}  # field -> the family its object is read into
    MAPS: ClassVar[Mapping[str, type[Family]]] = {}  # field -> the family of each value of its object
    LISTS: ClassVar[Mapping[str, type[Family]]] = {}  # field -> the family of each object of its array

    @classmethod
    def names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls)) - {"raw"}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Self:
        known = {}
        for k in cls.names() & raw.keys():
            v = raw[k]
            if k in cls.NESTED:
                v = read(cls.NESTED[k], v)
            elif k in cls.MAPS and isinstance(v, Mapping):
                v = {name: read(cls.MAPS[k], x) for name, x in v.items()}
            elif k in cls.LISTS and isinstance(v, list):
                v = tuple(read(cls.LISTS[k], x) for x in v)
            known[k] = v
        return cls(raw=dict(raw), **known)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, exactly as read."""
        return dict(self.raw)

    def __getitem__(self, key: str) -> Any:
        return self.raw[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw)

    def __len__(self) -> int:
        return len(self.raw)


def read(cls: type[Family], raw: Any) -> Any:
    """``raw`` read as ``cls`` when it is a JSON object (None and anything else as they are)."""
    return cls.from_dict(raw) if isinstance(raw, Mapping) and not isinstance(raw, Family) else raw


@dataclass(frozen=True, eq=False, kw_only=True)
class XprofNode(Family):
    """One node of XProf's op profile (all ops, a category, an op): its time and the utilisations
    XProf's op profile shows (:mod:`harness.metrics.xprof_metrics`)."""

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
    top_wasted_ops: tuple[XprofNode, ...] | None = None  # with ``op`` and ``category`` in ``raw``
    all_gather_wasted_fraction: float | None = None
    peak_flops_per_s: float | None = None
    hbm_bytes_per_s: float | None = None
    definitions: Mapping[str, str] | None = None
    converter: XprofProfile | None = None  # a trace's: the same numbers by xprof's own op_profile tool
    MAPS: ClassVar[Mapping[str, type[Family]]] = {"categories": XprofNode}
    LISTS: ClassVar[Mapping[str, type[Family]]] = {"top_wasted_ops": XprofNode}


XprofProfile.NESTED = {"root": XprofNode, "converter": XprofProfile}


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

    op: str | None = None
    scope: str | None = None
    source: str | None = None
    category: str | None = None
    count: float | None = None
    total_ns: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class TraceDevice(Family):
    """One device's accounting of a measured trace (:mod:`harness.metrics.accounting`), ns per window."""

    device: int | None = None
    window_ns: float | None = None
    compute_ns: float | None = None
    collective_ns: float | None = None
    collective_ns_by_kind: Mapping[str, float] | None = None
    exposed_collective_ns: float | None = None
    idle_ns: float | None = None
    wasted_ns: float | None = None
    wasted_fraction: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class Trace(Family):
    """The ``trace`` family: a measured XLA trace of the stage (:mod:`harness.metrics.trace`)."""

    platform: str | None = None
    devices: tuple[TraceDevice, ...] | None = None
    steps: int | None = None
    top_ops: tuple[TopOp, ...] | None = None
    note: str | None = None
    step_samples: list[Any] | None = None
    by_scope: Mapping[str, float] | None = None
    scope_coverage: float | None = None
    scope_inferred: float | None = None
    xprof: XprofProfile | None = None
    log_dir: str | None = None
    xplane: str | None = None
    chrome_trace: str | None = None
    NESTED: ClassVar[Mapping[str, type[Family]]] = {"xprof": XprofProfile}
    LISTS: ClassVar[Mapping[str, type[Family]]] = {"devices": TraceDevice, "top_ops": TopOp}


@dataclass(frozen=True, eq=False, kw_only=True)
class Predicted(Family):
    """The ``predicted`` family: one call of the stage's compiled program simulated on the target's
    spec (:mod:`harness.run.predicted`): times in seconds, shares of the step's window."""

    step_s: float | None = None
    video_s: float | None = None
    calls_per_video: int | None = None
    exposed_all_gather_fraction: float | None = None
    wasted_fraction: float | None = None
    device: Mapping[str, Any] | None = None
    critical_path: tuple[CriticalPathEntry, ...] | None = None
    block_gantt: tuple[GanttEvent, ...] | None = None
    spec: Mapping[str, Any] | None = None
    sensitivity: Sensitivity | None = None
    uncertainty: Uncertainty | None = None
    video_interval_s: list[float] | None = None
    chrome_trace: str | None = None
    xprof: XprofProfile | None = None
    xprof_interval: Mapping[str, Any] | None = None  # the XProf shares at the interval's joint bounds
    matmul_rates: Mapping[str, Any] | None = None  # the best measured GEMM rate and the datasheet peak
    xplane: str | None = None
    host_loop: bool | None = None
    calibration: Mapping[str, Any] | None = None
    notes: list[str] | None = None
    LISTS: ClassVar[Mapping[str, type[Family]]] = {"critical_path": CriticalPathEntry}

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
    MAPS: ClassVar[Mapping[str, type[Family]]] = {"constants": SensitivityConstant}


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
class Roofline(Family):
    """The on-target roofline of one call: the slowest of compute, HBM and interconnect (and all serial)."""

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


@dataclass(frozen=True, eq=False, kw_only=True)
class CollectiveTotals(Family):
    """One collective kind's totals per call (count, operand and result bytes; ``bytes`` per scope)."""

    count: float | None = None
    operand_bytes: float | None = None
    result_bytes: float | None = None
    bytes: float | None = None


@dataclass(frozen=True, eq=False, kw_only=True)
class OnTarget(Family):
    """``static.target``: the program on the target hardware (:mod:`harness.metrics.aot`)."""

    fits: bool | None = None
    memory: TargetMemory | None = None
    roofline: Roofline | None = None
    spec: Mapping[str, Any] | None = None  # the target's published figures: name, device_kind, source, ...
    calls_per_video: int | None = None
    roofline_per_video_s: float | None = None
    flops_per_device: float | None = None
    collectives_per_call: Mapping[str, CollectiveTotals] | None = None
    collectives_per_video: Mapping[str, CollectiveTotals] | None = None
    NESTED: ClassVar[Mapping[str, type[Family]]] = {"memory": TargetMemory, "roofline": Roofline}

    @property
    def device_kind(self) -> str | None:
        return (self.spec or {}).get("device_kind")

    @property
    def spec_source(self) -> str | None:
        return (self.spec or {}).get("source")

    MAPS: ClassVar[Mapping[str, type[Family]]] = {
        "collectives_per_call": CollectiveTotals,
        "collectives_per_video": CollectiveTotals,
    }


@dataclass(frozen=True, eq=False, kw_only=True)
class Collectives(Family):
    """``static.collectives``: per kind, what one call runs."""

    by_kind: Mapping[str, CollectiveTotals] | None = None
    MAPS: ClassVar[Mapping[str, type[Family]]] = {"by_kind": CollectiveTotals}


@dataclass(frozen=True, eq=False, kw_only=True)
class ScopeStatic(Family):
    """One model scope's share of the compiled program (:mod:`harness.metrics.attribution`), per call."""

    flops: float | None = None
    bytes: float | None = None
    collectives: Mapping[str, CollectiveTotals] | None = None  # kind -> count, bytes
    MAPS: ClassVar[Mapping[str, type[Family]]] = {"collectives": CollectiveTotals}

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


@dataclass(frozen=True, eq=False, kw_only=True)
class Attribution(Family):
    """``static.attribution``: the compiled program by model scope; ``coverage``: each total's share
    with a scope (``flops``, ``bytes``, ``collective_bytes``; ``inferred``: the share of it inferred)."""

    by_scope: Mapping[str, ScopeStatic] | None = None
    collective_sites: tuple[CollectiveSite, ...] | None = None
    coverage: Mapping[str, Any] | None = None
    MAPS: ClassVar[Mapping[str, type[Family]]] = {"by_scope": ScopeStatic}
    LISTS: ClassVar[Mapping[str, type[Family]]] = {"collective_sites": CollectiveSite}


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
class Static(Family):
    """The ``static`` family: numbers from the compiled program (:mod:`harness.metrics.static`)."""

    platform: str | None = None
    timing: Mapping[str, float] | None = None  # lower_seconds, compile_seconds
    cost: Mapping[str, float] | None = None  # XLA cost_analysis: flops, bytes_accessed, transcendentals
    analytic_flops: float | None = None
    memory: Memory | None = None
    tokens: Mapping[str, int] | None = None
    oom: Mapping[str, Any] | None = None
    collectives: Collectives | None = None
    target: OnTarget | None = None
    attribution: Attribution | None = None
    compile_cache: Mapping[str, Any] | None = None
    NESTED: ClassVar[Mapping[str, type[Family]]] = {
        "collectives": Collectives,
        "target": OnTarget,
        "memory": Memory,
        "attribution": Attribution,
    }

    @property
    def compile_s(self) -> float | None:
        return (self.timing or {}).get("compile_seconds")

    @property
    def lower_s(self) -> float | None:
        return (self.timing or {}).get("lower_seconds")

    @property
    def cost_flops(self) -> float | None:
        return (self.cost or {}).get("flops")

    @property
    def cost_bytes(self) -> float | None:
        return (self.cost or {}).get("bytes_accessed")

    @property
    def oom_message(self) -> str:
        return str((self.oom or {}).get("message") or self.oom)


@dataclass(frozen=True, eq=False, kw_only=True)
class Measured(Family):
    """The ``measured`` family: timed calls (:mod:`harness.run.measure`)."""

    samples_s: list[float] | None = None
    warmup_s: list[float] | None = None
    wall_s: Mapping[str, Any] | None = None
    recompiles: Mapping[str, Any] | None = None
    transfers: Mapping[str, Any] | None = None
    load: Mapping[str, Any] | None = None
    accuracy: Mapping[str, Any] | None = None  # against the reference variant (harness/metrics/accuracy.py)

    @property
    def samples(self) -> list[float]:
        return [float(x) for x in self.samples_s or ()]


Predicted.NESTED = {"xprof": XprofProfile, "sensitivity": Sensitivity, "uncertainty": Uncertainty}
Predicted.LISTS = {"critical_path": CriticalPathEntry, "block_gantt": GanttEvent}
