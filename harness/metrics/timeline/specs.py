"""The simulator's hardware model: every constant with its unit and source, and the topology.

A :class:`TimelineSpec` is what :func:`harness.metrics.timeline.predict` prices a program with, and
it is stored with every prediction (``Prediction.to_dict()["spec"]``). Constants (all per device):

* ``peak_flops_per_s``: dense bf16 matmul peak (``harness.hardware.SPECS``, as every figure of a
  generation: its published ones, ports, wrap rule and assumed constants);
* ``hbm_bytes_per_s``: HBM bandwidth;
* ``op_overhead_s``: fixed cost added to every instruction that runs (fill/drain, launch);
* ``program_launch_s``, ``scalar_op_s`` (TPU): a program's start before its first op, and a scalar op's
  cost in place of ``op_overhead_s`` (measured on a real v6e profile, :mod:`harness.hardware`);
* ``collective_latency_s``: fixed cost of every collective (synchronisation, first hop);
* ``link_bytes_per_s``: one ICI link, one direction (TPU); the NVLink bandwidth of one GPU, one
  direction (GPU: NVSwitch gives every group the GPU's full NVLink bandwidth); copy bandwidth (CPU);
* ``on_chip_bytes_per_s`` (tpu7x only): between the two TensorCores of one chip;
* ``host_bytes_per_s`` (v6e): the host link (PCIe), one direction, per chip: what a copy to or
  from host memory (``S(5)``, host offload) moves at;
* ``tile_m``, ``tile_n``, ``tile_k``, ``matmul_eff_n<N>`` (a matmul's tile and efficiency curve:
  :mod:`~harness.metrics.timeline.pricing`), ``hbm_eff_b<B>`` and ``link_efficiency`` (read off
  published tables: :mod:`~harness.metrics.timeline.rates`); ``offload_bytes_per_s`` (TPU): an
  offloaded copy's (SparseCore / DMA) rate. The datasheet peaks stay, as the upper bound:
  :meth:`TimelineSpec.datasheet` is the same spec without the curves ("predicted, datasheet rates").

Every constant has a relative uncertainty (:attr:`Constant.rel_uncertainty`): stated where the
source gives one, else by the kind of source: published figures +-5%, measured ones +-15% (a
shared, loaded host), assumed ones +-50%. A prediction's interval evaluates the step with every
rate and time constant at its bounds (:func:`harness.metrics.timeline.interval`).

Where no published or measured figure exists the source says ``assumed: <why>``; such constants
are the first to check against a real trace, and ``sensitivity()`` shows how much each one moves
the prediction. Pure Python.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import hardware, targets
from harness.metrics.timeline import rates

PUBLISHED_UNCERTAINTY = 0.05  # a datasheet peak is an upper bound a kernel gets close to, not exactly
MEASURED_UNCERTAINTY = 0.15  # repeated timings on a shared host spread this much
ASSUMED_UNCERTAINTY = 0.5  # a guess with no figure behind it: within a factor of ~2
SCALED_UNITS = ("s", "B/s", "FLOP/s")  # rates and times: what intervals and sensitivity move


@dataclass(frozen=True)
class Constant:
    """One number of the hardware model, with its unit, where it comes from and, optionally, its
    relative uncertainty (None: by the kind of source, see the module docstring)."""

    value: float
    unit: str
    source: str
    uncertainty: float | None = None

    @property
    def rel_uncertainty(self) -> float:
        if self.uncertainty is not None:
            return self.uncertainty
        if self.source.startswith("assumed"):
            return ASSUMED_UNCERTAINTY
        if self.source.startswith("measured") or self.source.startswith("fitted"):
            return MEASURED_UNCERTAINTY
        return PUBLISHED_UNCERTAINTY

    @property
    def scalable(self) -> bool:
        """A rate or time (moved by intervals and sensitivity); tiles and efficiencies are not."""
        return self.unit in SCALED_UNITS

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "source": self.source, "uncertainty": self.rel_uncertainty}


@dataclass(frozen=True)
class Topology:
    """How devices are wired. ``kind``: ``torus`` (TPU ICI: ``shape`` chips per dimension, each
    dimension with or without wraparound links), ``switch`` (GPU NVLink through NVSwitch: every
    pair of devices at the GPU's full bandwidth) or ``memcpy`` (CPU: collectives are copies).
    ``device_coords``: per device in device-assignment order (the ids replica groups use), the chip
    coordinates followed by the core on the chip."""

    kind: str
    shape: tuple[int, ...] = ()
    wraparound: tuple[bool, ...] = ()
    devices_per_chip: int = 1
    device_coords: tuple[tuple[int, ...], ...] = ()
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        lists = {"shape": list(self.shape), "wraparound": list(self.wraparound)}
        return {**_fields(self), **lists, "device_coords": [list(c) for c in self.device_coords]}


LINK_SHARING = ("fair", "fifo")
CORE_LINKS = ("shared", "own", "per_core")
SCALAR_OPS = ("after_launch", "with_launch")


@dataclass(frozen=True)
class TimelineSpec:
    """A named set of constants (see the module docstring) and the topology they apply to."""

    name: str
    platform: str
    constants: Mapping[str, Constant]
    topology: Topology = field(default_factory=lambda: Topology("memcpy"))
    notes: tuple[str, ...] = ()
    link_sharing: str = "fair"
    """How transfers on the same links share them (:mod:`~harness.metrics.timeline.links`): ``fair``
    (equal shares while they overlap) or ``fifo`` (the earlier-issued one alone, then the next).
    An assumption either way (no published arbitration policy); the interval covers both."""
    host_link_sharing: str = "fifo"
    """How copies to or from host memory share the host link, per direction (its own queues):
    ``fifo`` by default, one copy at a time in the order issued. Sources: XLA's own model of async
    copies (openxla/xla ``xla/service/memory_space_assignment/simulator.h``, ``RuntimeSimulator``:
    one queue per direction, only the front copy is served, a done waits for "copies issued before
    it"), and PCIe accelerators' copy engines (NVIDIA, "CUDA C/C++ Streams and Concurrency": two
    copies at once only "in different directions"; copies in one direction serialize). Neither is a
    TPU measurement: an assumption with sources, and the interval covers ``fair``. Adopted after
    the held-out v6e profile's score under both policies had been seen (benchmarks/results/
    real-v6e-profile-2026-11-29.md, "Link policy")."""
    core_links: str = "shared"
    """How the TensorCores of one chip (tpu7x: two) use its ICI ports (:mod:`~harness.metrics.
    timeline.groups`): ``shared`` (a chip's ports divided among the collective's groups on the chip:
    the datasheet gives ICI bandwidth per chip), ``own`` (each core the whole chip's ports) or
    ``per_core`` (each core half of them whatever the groups: ports owned per die and a ring that
    leaves a chip from one die only; the rule before SIMULATOR_VERSION 4). Assumed either way (no
    published figure per core); the interval covers the other two where a chip holds several devices."""
    scalar_ops: str = "after_launch"
    """How the measurement behind ``scalar_op_s`` is read (a spec without it prices a scalar op, :attr:`~harness.
    metrics.timeline.program.Op.scalar`, at ``op_overhead_s`` like any op): the profile's one scalar copy ran
    between a program's start and its first kernel, and the launch before it is measured in another program.
    ``after_launch``: the copy ran after the launch (it costs the gap less the launch, ``scalar_op_s``);
    ``with_launch``: its DMA filled the whole gap from the program's start (``scalar_op_s + program_launch_s``,
    and a program that starts with a scalar op pays no launch before it: both readings put the broadcast's
    kernel where it was measured). Either reading is assumed; the interval covers the other where a program
    runs a scalar op on such a spec. The profile's other ops favour ``after_launch``: no traced op starts
    before 307 ns after its program's start (benchmarks/results/real-v6e-convert-2026-11-29.md)."""

    def __post_init__(self) -> None:
        for what, policy, allowed in (
            ("link_sharing", self.link_sharing, LINK_SHARING),
            ("host_link_sharing", self.host_link_sharing, LINK_SHARING),
            ("core_links", self.core_links, CORE_LINKS),
            ("scalar_ops", self.scalar_ops, SCALAR_OPS),
        ):
            if policy not in allowed:
                raise ValueError(f"spec {self.name!r}: {what} {policy!r} is not one of {allowed}")

    def value(self, constant: str) -> float:
        """A constant's value; KeyError naming the spec and the constants it has otherwise."""
        if constant not in self.constants:
            raise KeyError(f"spec {self.name!r} has no constant {constant!r} (has: {', '.join(self.constants)})")
        return self.constants[constant].value

    def scaled(self, constant: str, factor: float) -> TimelineSpec:
        """The same spec with one constant multiplied by ``factor`` (its source says so)."""
        old = self.constants.get(constant)
        if old is None:
            raise KeyError(f"spec {self.name!r} has no constant {constant!r} (has: {', '.join(self.constants)})")
        new = Constant(old.value * factor, old.unit, f"{old.source} (x{factor:g})", old.uncertainty)
        return dataclasses.replace(self, constants={**self.constants, constant: new})

    def curve_names(self, family: str) -> list[str]:
        """The constants of one curve family (:data:`~harness.metrics.timeline.rates.CURVE_FAMILIES`)."""
        return [k for k in self.constants if k == family or (k.startswith(family) and k[len(family) :].isdigit())]

    def curves_scaled(self, factors: Mapping[str, float]) -> TimelineSpec:
        """Every efficiency of each family in ``factors`` multiplied by its factor, capped at 1 (a peak
        is an upper bound); what the interval moves a curve by."""
        new = dict(self.constants)
        for family, factor in factors.items():
            for k in self.curve_names(family):
                c = new[k]
                new[k] = Constant(
                    min(c.value * factor, 1.0), c.unit, f"{c.source} (x{factor:g}, at most 1)", c.uncertainty
                )
        return dataclasses.replace(self, constants=new)

    @property
    def label(self) -> str:
        """How its predictions are labelled (:func:`~harness.metrics.timeline.rates.label`)."""
        return rates.label(self.constants, self.platform)

    def datasheet(self) -> TimelineSpec:
        """The same spec priced at the datasheet peaks: every measured efficiency curve of a TPU / GPU
        spec dropped (a CPU spec's curves are its measurement: kept)."""
        if self.platform == "cpu":
            return self
        drop = {k for family in rates.CURVE_FAMILIES for k in self.curve_names(family)}
        if not drop:
            return self
        kept = {k: c for k, c in self.constants.items() if k not in drop}
        return dataclasses.replace(self, name=f"{self.name} (datasheet rates)", constants=kept)

    def to_dict(self) -> dict[str, Any]:
        constants = {k: c.to_dict() for k, c in self.constants.items()}
        return {**_fields(self), "constants": constants, "topology": self.topology.to_dict(), "notes": list(self.notes)}


def _fields(obj: Any) -> dict[str, Any]:
    """A dataclass's fields by name, as they are (its ``to_dict`` converts the ones JSON needs)."""
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


# --------------------------------------------------------------------------- the tables


def _measured(entries: Mapping[str, rates.Entry]) -> dict[str, Constant]:
    """Constants from :mod:`~harness.metrics.timeline.rates` (value, unit, source, uncertainty)."""
    return {k: Constant(v, unit, source, unc) for k, (v, unit, source, unc) in entries.items()}


def _constants(name: str) -> dict[str, Constant]:
    """A generation's constants, from its record (:data:`harness.hardware.SPECS`) and the measured
    curves (tpu7x's tables for TPUs, H100's for GPUs, carried to the others)."""
    t = hardware.SPECS[name]
    published = f"harness.hardware.SPECS[{name!r}]: {t.source}"
    out = {
        "peak_flops_per_s": Constant(t.peak_bf16_flops, "FLOP/s", published),
        "hbm_bytes_per_s": Constant(t.hbm_bytes_per_s, "B/s", published),
        **{k: Constant(f.value, f.unit, f.source) for k, f in t.constants.items()},
        **_measured(rates.tpu(name == "tpu7x") if t.platform == "tpu" else rates.gpu(name == "h100")),
        "link_bytes_per_s": Constant(t.link_bytes_per_s, "B/s", t.link_source),
    }
    if t.platform == "tpu":
        out["offload_bytes_per_s"] = Constant(
            t.hbm_bytes_per_s,
            "B/s",
            "assumed: an offloaded copy (SparseCore data-format call, async DMA) moves its bytes at the HBM "
            "datasheet rate times the HBM curve; no published SparseCore / DMA figure",
        )
    if t.devices_per_chip > 1:
        out["on_chip_bytes_per_s"] = Constant(
            t.hbm_bytes_per_s,
            "B/s",
            "assumed: the two TensorCores of a chip exchange data at one core's HBM "
            "bandwidth (no published die-to-die figure)",
        )
    return out


def _row_major_coords(shape: Sequence[int], per_chip: int) -> tuple[tuple[int, ...], ...]:
    """Chip coordinates (x fastest) and core, in device-id order, for a topology without device coords."""
    out = []
    for chip in range(math.prod(shape)):
        coord, rest = [], chip
        for n in shape:
            coord.append(rest % n)
            rest //= n
        out += [(*coord, core) for core in range(per_chip)]
    return tuple(out)


def _tpu_topology(
    t: hardware.TargetSpec, dims: tuple[int, ...], device_coords: Sequence[tuple[int, ...]] | None
) -> Topology:
    wrap = t.wraparound(dims)
    if device_coords:
        # (*device.coords, device.core_on_chip): the chip's first len(dims) coordinates, then the core.
        coords = tuple(
            (*(int(v) for v in c[: len(dims)]), int(c[-1]) if len(c) > len(dims) else 0) for c in device_coords
        )
        source = f"{t.wrap_source}; device coords from the worker's devices (.coords, .core_on_chip)"
    else:
        coords = _row_major_coords(dims, t.devices_per_chip)
        source = f"{t.wrap_source}; device coords assumed row-major (x fastest) over {dims}: none given"
    return Topology("torus", dims, wrap, t.devices_per_chip, coords, source)


def spec_for(
    topology: str | targets.Slice | None, platform: str, device_coords: Sequence[tuple[int, ...]] | None = None
) -> TimelineSpec:
    """The spec of a compile-only target (``"v6e:2x4"``, ``"tpu7x:2x2x1"``, ``"h100:1x1x8"``, or one
    already parsed) and its topology. ``device_coords``: per device of the program's mesh in
    device-assignment order, the chip coordinates then the core on the chip (TPU ``device.coords`` +
    ``device.core_on_chip``); without them TPU devices are assumed numbered row-major, x fastest.
    ValueError for a target with no table (CPU specs are measured: :func:`cpu_spec`)."""
    if topology is None or platform == "cpu":
        raise ValueError(
            f"no timeline spec for platform {platform!r} topology {topology!r}: CPU constants are "
            "measured, build one with cpu_spec(...)"
        )
    where = topology if isinstance(topology, targets.Slice) else targets.check_topology(topology, platform)
    t = where.spec
    if t is None:
        known = ", ".join(hardware.SPECS)
        raise ValueError(f"no timeline spec for {where.name!r} (topology {str(where)!r}; known: {known})")
    if platform == "tpu":
        topo = _tpu_topology(t, where.dims, device_coords)
    else:
        topo = Topology(
            "switch",
            where.dims,
            source="NVSwitch: every GPU of a node reaches every other at its full "
            "NVLink bandwidth (NVIDIA HGX H100/H200)",
        )
    return TimelineSpec(str(where), platform, _constants(where.name), topo)


def cpu_spec(
    matmul_flops_per_s: float,
    copy_bytes_per_s: float,
    op_overhead_s: float,
    source: str,
    devices: int = 1,
    *,
    curve: Sequence[tuple[int, float]] = (),
    collective_latency_s: float | None = None,
    collective_bytes_per_s: float | None = None,
) -> TimelineSpec:
    """A host CPU's spec from measured constants (``source`` says how they were measured): per
    simulated device, as measured with ``devices`` devices running at once on the host's cores.
    ``curve``: ``[(N, efficiency)]`` of N x N x N matmuls (``matmul_eff_n<N>`` constants). A
    collective is a memcpy between devices' buffers in host memory: ``collective_bytes_per_s`` and
    ``collective_latency_s`` where measured, else the copy bandwidth and one op overhead."""
    for what, value in (("matmul_flops_per_s", matmul_flops_per_s), ("copy_bytes_per_s", copy_bytes_per_s)):
        if not value > 0:
            raise ValueError(f"cpu_spec: {what} must be > 0, got {value!r}")
    if op_overhead_s < 0:
        raise ValueError(f"cpu_spec: op_overhead_s must be >= 0, got {op_overhead_s!r}")
    latency = Constant(
        op_overhead_s if collective_latency_s is None else collective_latency_s,
        "s",
        f"{source} (a collective: one op overhead)" if collective_latency_s is None else source,
    )
    link = Constant(
        copy_bytes_per_s if collective_bytes_per_s is None else collective_bytes_per_s,
        "B/s",
        f"{source} (a collective: a memcpy)" if collective_bytes_per_s is None else source,
    )
    constants = {
        "peak_flops_per_s": Constant(matmul_flops_per_s, "FLOP/s", source),
        "hbm_bytes_per_s": Constant(copy_bytes_per_s, "B/s", source),
        "op_overhead_s": Constant(op_overhead_s, "s", source),
        "collective_latency_s": latency,
        "link_bytes_per_s": link,
        **{f"matmul_eff_n{n}": Constant(float(eff), "fraction", source) for n, eff in curve},
    }
    coords = tuple((i, 0) for i in range(devices))
    return TimelineSpec("cpu", "cpu", constants, Topology("memcpy", (devices,), (False,), 1, coords, "host memory"))


def spec_from_dict(raw: Mapping[str, Any], where: str = "spec") -> TimelineSpec:
    """A spec from :meth:`TimelineSpec.to_dict` (a calibrated spec file's ``spec``); ValueError
    naming ``where`` and the key that is missing or wrong."""
    try:
        constants = {
            str(k): Constant(float(c["value"]), str(c["unit"]), str(c["source"]), c.get("uncertainty"))
            for k, c in raw["constants"].items()
        }
        t = raw.get("topology") or {"kind": "memcpy"}
        topology = Topology(
            str(t["kind"]),
            tuple(int(v) for v in t.get("shape", ())),
            tuple(bool(v) for v in t.get("wraparound", ())),
            int(t.get("devices_per_chip", 1)),
            tuple(tuple(int(v) for v in c) for c in t.get("device_coords", ())),
            str(t.get("source", "")),
        )
        spec = TimelineSpec(
            str(raw["name"]),
            str(raw["platform"]),
            constants,
            topology,
            tuple(raw.get("notes", ())),
            str(raw.get("link_sharing", "fair")),
            str(raw.get("host_link_sharing", "fifo")),
            str(raw.get("core_links", "shared")),
            str(raw.get("scalar_ops", "after_launch")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{where}: not a timeline spec ({type(e).__name__}: {e})") from None
    missing = [k for k in ("peak_flops_per_s", "hbm_bytes_per_s", "op_overhead_s") if k not in constants]
    if missing:
        raise ValueError(f"{where}: spec {spec.name!r} lacks {', '.join(missing)}")
    return spec
