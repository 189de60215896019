"""The CPU's timeline constants, measured on this machine (never fitted to a prediction).

The CPU spec (:func:`harness.metrics.timeline.cpu_spec`) rests on numbers timed here with small
jitted programs, as the stage programs run:

* ``matmul_flops_per_s``: a ``MATMUL_N`` squared float32 matmul, ``2 N^3`` FLOPs per call;
* ``copy_bytes_per_s``: ``x + 1`` over float32 in place (read once, written once into the donated
  input, as a fusion inside a program writes a buffer already allocated);
* ``op_overhead_s``: a chain of ``CHAIN`` dependent 8x8 matmuls (no two can fuse, each too
  small to cost anything but its dispatch), the chain's time over its length;
* ``curve``: the efficiency of N x N x N matmuls (``CURVE_SIZES``) against the ``MATMUL_N`` one,
  each timed as a chain inside one program, less the op overhead per link (one device: the shape
  effect, applied at any device count);
* with ``devices`` > 1, the simulated devices share the host's cores: XLA:CPU runs each device's
  program on its own thread and every op's work on the one intra-op pool the devices share, so
  what one device does alone on all the cores, ``devices`` devices do at once on the same cores.
  The three rates are measured again with every device running the same per-device program at
  once (``shard_map`` over a ``devices``-device mesh) and the spec takes those per-device rates;
  collectives between the devices are copies through host memory, timed as ``all_gather`` chains
  of ``COLLECTIVE_SMALL`` bytes (``collective_latency_s``) and one of ``COLLECTIVE_BYTES`` per
  device (``collective_bytes_per_s``: ring wire bytes over the time past the latency).

Each timing is the median of :data:`REPEATS` timed calls after a warm-up call.
:func:`load_or_measure` keeps the result in a JSON file (the sweep's
``traces/cpu-calibration-<N>dev.json``), so a sweep measures once per device count and every later
worker reads the same constants.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.metrics.timeline.specs import Constant, TimelineSpec, cpu_spec
from harness.results.storage import write_atomic

MATMUL_N = 1024
COPY_BYTES = 64 * 2**20
SHARED_COPY_BYTES = 16 * 2**20  # per device when several run at once (8 x 64 MiB would crowd a shared host)
CHAIN = 64
CURVE_SIZES = (16, 32, 64, 128, 256, 512)
CURVE_WORK = 4e8  # FLOPs per timed chain of one curve size (at most CHAIN links)
COLLECTIVE_SMALL = 32  # bytes per device of the latency chain's all-gathers
COLLECTIVE_CHAIN = 16
COLLECTIVE_BYTES = 8 * 2**20
REPEATS = 9
# links in the overhead chain timed with every device at once: device threads waking on few cores
# spread a short chain's time, a longer chain less (evidence: calibration-docstring-findings-2026-11-27.md)
SHARED_CHAIN = 256
# the spec constants a per-op fit sets -> the measurement of each (per device, and ``single``: alone)
SHARED = {
    "peak_flops_per_s": "matmul_flops_per_s",
    "hbm_bytes_per_s": "copy_bytes_per_s",
    "op_overhead_s": "op_overhead_s",
}


@dataclass(frozen=True)
class CpuCalibration:
    """The measured constants (per simulated device, with ``devices`` of them sharing ``cores``
    host cores) and how they were measured; ``single``: the one-device rates, for comparison."""

    matmul_flops_per_s: float
    copy_bytes_per_s: float
    op_overhead_s: float
    source: str
    measured_at: str = ""
    devices: int = 1
    cores: int = 0
    curve: tuple[tuple[int, float], ...] = ()
    collective_latency_s: float | None = None
    collective_bytes_per_s: float | None = None
    single: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["curve"] = [list(p) for p in self.curve]
        out["single"] = dict(self.single)
        return out

    def spec(self, devices: int | None = None) -> TimelineSpec:
        """The timeline spec these constants make (:func:`harness.metrics.timeline.cpu_spec`) for
        ``devices`` simulated devices (default: as many as were measured)."""
        return cpu_spec(
            self.matmul_flops_per_s,
            self.copy_bytes_per_s,
            self.op_overhead_s,
            self.source,
            devices=self.devices if devices is None else devices,
            curve=self.curve,
            collective_latency_s=self.collective_latency_s,
            collective_bytes_per_s=self.collective_bytes_per_s,
        )

    def sharing(self, where: str = "calibration") -> dict[str, float]:
        """Each :data:`SHARED` spec constant's measured ratio, ``devices`` devices at once over one
        device alone (1.0 for everything when ``devices`` is 1); ValueError naming ``where`` when the
        one-device value was not measured."""
        out = {}
        for name, key in SHARED.items():
            alone = self.single.get(key)
            if self.devices == 1:
                out[name] = 1.0
            elif alone is None or not alone > 0:
                raise ValueError(f"{where}: no one-device value single.{key} to take the sharing ratio against")
            else:
                out[name] = float(getattr(self, key)) / alone
        return out

    def shared_spec(
        self, alone: TimelineSpec, where: str = "calibration", traced: tuple[float, str] | None = None
    ) -> TimelineSpec:
        """This calibration's spec (its devices, curve, collectives, topology) with each :data:`SHARED`
        constant taken from ``alone`` (per-op speeds: a fit to traced op durations) and shared among
        the devices: the rates times a sharing ratio, the op overhead over it. The ratio is
        ``traced`` = ``(ratio, how it was measured)`` where the fit's own traces measured it (the
        ``calibrate`` command: the fitted spec's predicted step over the traced step's wall), else
        each constant's :meth:`sharing` ratio from the micro-benchmarks.

        Why a ratio: a fit to per-op durations traced with the devices at once lands near one
        device's speeds, not the shared ones (evidence:
        benchmarks/results/calibration-docstring-findings-2026-11-27.md). Each source names the fit and the ratio; the
        uncertainty stays the fit's."""
        if self.devices == 1 or traced is None:
            ratios = self.sharing(where)
            how = f"its {self.devices}-devices-at-once / one-device ratio measured on {self.cores} cores ({where})"
        else:
            ratios = {name: traced[0] if name != "op_overhead_s" else 1 / traced[0] for name in SHARED}
            how = f"{traced[1]} ({self.devices} devices on {self.cores} cores)"
        target = self.spec()
        constants = dict(target.constants)
        for name in SHARED:
            c = alone.constants[name]
            source = c.source if self.devices == 1 else f"{c.source}; x {ratios[name]:.4g}, {how}"
            constants[name] = Constant(c.value * ratios[name], c.unit, source, c.uncertainty)
        label = "+fit" if self.devices == 1 else f"+fit x sharing({self.devices})"
        return replace(target, name=f"{target.name}{label}", constants=constants)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "calibration") -> CpuCalibration:
        try:
            latency, bandwidth = (raw.get(k) for k in ("collective_latency_s", "collective_bytes_per_s"))
            out = cls(
                float(raw["matmul_flops_per_s"]),
                float(raw["copy_bytes_per_s"]),
                float(raw["op_overhead_s"]),
                str(raw["source"]),
                str(raw.get("measured_at", "")),
                int(raw.get("devices", 1)),
                int(raw.get("cores", 0)),
                tuple((int(n), float(e)) for n, e in raw.get("curve") or ()),
                None if latency is None else float(latency),
                None if bandwidth is None else float(bandwidth),
                single={str(k): float(v) for k, v in (raw.get("single") or {}).items()},
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{where}: not a CPU calibration ({type(e).__name__}: {e})") from None
        if min(out.matmul_flops_per_s, out.copy_bytes_per_s, out.op_overhead_s) <= 0:
            raise ValueError(f"{where}: constants must be positive, got {raw}")
        return out


def _median_s(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(repeats: int = REPEATS, devices: int = 1) -> CpuCalibration:
    """Time the programs (seconds on 2 cores; more with ``devices`` > 1) on the first device (on a
    mesh of its own, whatever mesh the caller has set), then, with ``devices`` > 1, on the first
    ``devices`` devices at once; return the constants. ValueError when fewer devices exist."""
    import jax

    available = jax.local_devices()
    if devices < 1 or devices > len(available):
        raise ValueError(f"cannot calibrate {devices} devices: this process has {len(available)}")
    device = available[0]
    with jax.set_mesh(jax.sharding.Mesh([device], ("calibrate",))):
        flops, copy, overhead = _measure_one(device, repeats)
        curve = _curve(device, flops, overhead, repeats)
    cores = os.cpu_count() or 0
    single = {"matmul_flops_per_s": flops, "copy_bytes_per_s": copy, "op_overhead_s": overhead}
    what = (
        f"{MATMUL_N}^2 float32 matmul, x + 1 in place, a chain of {CHAIN} dependent 8x8 matmuls, "
        f"matmul chains of {', '.join(map(str, CURVE_SIZES))}; median of {repeats} calls each"
    )
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    if devices == 1:
        source = f"measured on this CPU ({device.device_kind}, {cores} cores), one device: {what}"
        return CpuCalibration(flops, copy, overhead, source, stamp, 1, cores, curve, single=single)
    mesh = jax.sharding.Mesh(available[:devices], ("d",))
    with jax.set_mesh(mesh):
        shared = _measure_shared(mesh, repeats)
    source = (
        f"measured on this CPU ({device.device_kind}, {cores} cores) with {devices} devices running at once, "
        f"per device: {what}; all_gather chains of {COLLECTIVE_SMALL} B and one of {COLLECTIVE_BYTES >> 20} MiB "
        f"per device. One device alone: {flops / 1e9:.1f} GFLOP/s, {copy / 1e9:.1f} GB/s, {overhead * 1e6:.1f} us/op"
    )
    # shared: the three constants and the collectives' latency and bandwidth, by field name
    return CpuCalibration(
        **shared, source=source, measured_at=stamp, devices=devices, cores=cores, curve=curve, single=single
    )


def _block(fn: Callable[[Any], Any], x: Any) -> Any:
    return fn(x).block_until_ready()


def _chain(m: Any, links: int) -> Any:
    for _ in range(links):
        m = m @ m * 0.5
    return m


def _measure_one(device: Any, repeats: int) -> tuple[float, float, float]:
    """(matmul FLOP/s, copy B/s, op overhead s) of one device alone."""
    import jax
    import jax.numpy as jnp

    a = jax.device_put(jnp.ones((MATMUL_N, MATMUL_N), jnp.float32), device)
    matmul = jax.jit(lambda x, y: x @ y)
    t_mm = _median_s(lambda: matmul(a, a).block_until_ready(), repeats)

    # In place (the input donated): inside a compiled program a fusion writes into buffers XLA already
    # allocated; a fresh output per call would time the kernel faulting in new pages (~10x slower here).
    state = {"x": jax.device_put(jnp.ones((COPY_BYTES // 4,), jnp.float32), device)}
    add = jax.jit(lambda v: v + 1.0, donate_argnums=0)

    def copy() -> None:
        state["x"] = add(state["x"]).block_until_ready()

    t_copy = _median_s(copy, repeats)
    small = jax.device_put(jnp.eye(8, dtype=jnp.float32), device)
    chained = jax.jit(lambda m: _chain(m, CHAIN))
    t_chain = _median_s(lambda: chained(small).block_until_ready(), repeats)
    return 2 * MATMUL_N**3 / t_mm, 2 * COPY_BYTES / t_copy, t_chain / CHAIN


def _curve(device: Any, peak: float, overhead: float, repeats: int) -> tuple[tuple[int, float], ...]:
    """Efficiency of each ``CURVE_SIZES`` matmul against ``peak``: a chain of them in one program,
    the op overhead of each link taken off, capped at 1."""
    import jax
    import jax.numpy as jnp

    out = []
    for n in CURVE_SIZES:
        links = int(min(CHAIN, max(2, CURVE_WORK // (2 * n**3))))
        m = jax.device_put(jnp.eye(n, dtype=jnp.float32), device)
        chained = jax.jit(functools.partial(_chain, links=links))
        per_link = _median_s(functools.partial(_block, chained, m), repeats) / links
        compute = max(per_link - overhead, per_link * 0.05)
        out.append((n, min(2 * n**3 / compute / peak, 1.0)))
    return tuple(out + [(MATMUL_N, 1.0)])


def _measure_shared(mesh: Any, repeats: int) -> dict[str, float]:
    """Per-device rates with every device of ``mesh`` running the same program at once."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = mesh.size
    sharded = NamedSharding(mesh, P("d"))

    def each(fn: Callable[..., Any], donate: bool = False) -> Any:
        wrapped = jax.shard_map(fn, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
        return jax.jit(wrapped, donate_argnums=0 if donate else ())

    a = jax.device_put(jnp.ones((n * MATMUL_N, MATMUL_N), jnp.float32), sharded)
    matmul = each(lambda x: x @ x)
    t_mm = _median_s(lambda: matmul(a).block_until_ready(), repeats)
    per_device = SHARED_COPY_BYTES // 4
    state = {"x": jax.device_put(jnp.ones((n * per_device,), jnp.float32), sharded)}
    add = each(lambda v: v + 1.0, donate=True)

    def copy() -> None:
        state["x"] = add(state["x"]).block_until_ready()

    t_copy = _median_s(copy, repeats)
    small = jax.device_put(jnp.tile(jnp.eye(8, dtype=jnp.float32), (n, 1)), sharded)
    chained = each(lambda m: _chain(m, SHARED_CHAIN))
    t_op = _median_s(lambda: chained(small).block_until_ready(), repeats) / SHARED_CHAIN

    def gathers(v: Any) -> Any:
        for _ in range(COLLECTIVE_CHAIN):
            v = jax.lax.all_gather(v, "d", tiled=True)[: v.shape[0]] * 0.5
        return v

    tiny = jax.device_put(jnp.ones((n * (COLLECTIVE_SMALL // 4),), jnp.float32), sharded)
    chain_gather = each(gathers)
    t_small = _median_s(lambda: chain_gather(tiny).block_until_ready(), repeats) / COLLECTIVE_CHAIN
    big = jax.device_put(jnp.ones((n * (COLLECTIVE_BYTES // 4),), jnp.float32), sharded)
    gather = each(lambda v: jax.lax.all_gather(v, "d", tiled=True)[: v.shape[0]])
    t_big = _median_s(lambda: gather(big).block_until_ready(), repeats)
    wire = COLLECTIVE_BYTES * (n - 1)  # ring all-gather: each device's shard to the n - 1 others
    return {
        "matmul_flops_per_s": 2 * MATMUL_N**3 / t_mm,
        "copy_bytes_per_s": 2 * SHARED_COPY_BYTES / t_copy,
        "op_overhead_s": t_op,
        "collective_latency_s": t_small,
        "collective_bytes_per_s": wire / max(t_big - t_small, t_big * 0.05),
    }


def load_or_measure(path: str | Path | None, devices: int = 1) -> tuple[CpuCalibration, bool]:
    """(the constants, whether they were measured now): read from ``path`` when it holds them for
    ``devices`` devices, else measured and written there atomically (when ``path`` is given)."""
    if path is not None and Path(path).exists():
        try:
            cal = CpuCalibration.from_dict(json.loads(Path(path).read_text()), str(path))
            if cal.devices == devices:
                return cal, False
        except ValueError:
            pass  # unreadable: measure again and replace it
    cal = measure(devices=devices)
    if path is not None:
        write_atomic(path, json.dumps(cal.to_dict()))
    return cal, True
