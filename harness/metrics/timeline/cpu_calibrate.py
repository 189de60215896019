"""The CPU's three timeline constants, measured on this machine (never fitted to a prediction).

The CPU spec (:func:`harness.metrics.timeline.cpu_spec`) rests on three numbers, each timed
here with small jitted programs on the first JAX device, as the stage programs run:

* ``matmul_flops_per_s``: a ``MATMUL_N`` squared float32 matmul, ``2 N^3`` FLOPs per call;
* ``copy_bytes_per_s``: ``x + 1`` over ``COPY_BYTES`` of float32, in place (read once, written
  once into the donated input, as a fusion inside a program writes a buffer already allocated);
* ``op_overhead_s``: a chain of ``CHAIN`` dependent 8x8 matmuls (no two can fuse, each too
  small to cost anything but its dispatch), the chain's time over its length.

Each is the median of :data:`REPEATS` timed calls after a warm-up call. :func:`load_or_measure`
keeps the result in a JSON file (the sweep's ``traces/cpu-calibration.json``), so a sweep
measures once and every later worker reads the same constants.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MATMUL_N = 1024
COPY_BYTES = 64 * 2**20
CHAIN = 64
REPEATS = 9


@dataclass(frozen=True)
class CpuCalibration:
    """The measured constants and how they were measured."""

    matmul_flops_per_s: float
    copy_bytes_per_s: float
    op_overhead_s: float
    source: str
    measured_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], where: str = "calibration") -> CpuCalibration:
        try:
            out = cls(
                float(raw["matmul_flops_per_s"]),
                float(raw["copy_bytes_per_s"]),
                float(raw["op_overhead_s"]),
                str(raw["source"]),
                str(raw.get("measured_at", "")),
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


def measure(repeats: int = REPEATS) -> CpuCalibration:
    """Time the three programs (a few seconds on 2 cores) on the first device (on a one-device mesh
    of its own, whatever mesh the caller has set) and return the constants."""
    import jax

    device = jax.devices()[0]
    with jax.set_mesh(jax.sharding.Mesh([device], ("calibrate",))):
        return _measure(device, repeats)


def _measure(device: Any, repeats: int) -> CpuCalibration:
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

    def chain(m: jax.Array) -> jax.Array:
        for _ in range(CHAIN):
            m = m @ m * 0.5
        return m

    small = jax.device_put(jnp.eye(8, dtype=jnp.float32), device)
    chained = jax.jit(chain)
    t_chain = _median_s(lambda: chained(small).block_until_ready(), repeats)
    source = (
        f"measured on this CPU ({device.device_kind}, {os.cpu_count()} cores): {MATMUL_N}^2 float32 "
        f"matmul, x + 1 in place over {COPY_BYTES >> 20} MiB, a chain of {CHAIN} dependent 8x8 matmuls; "
        f"median of {repeats} calls each"
    )
    return CpuCalibration(
        2 * MATMUL_N**3 / t_mm, 2 * COPY_BYTES / t_copy, t_chain / CHAIN, source, time.strftime("%Y-%m-%dT%H:%M:%S%z")
    )


def load_or_measure(path: str | Path | None) -> tuple[CpuCalibration, bool]:
    """(the constants, whether they were measured now): read from ``path`` when it holds them, else
    measured and written there atomically (when ``path`` is given)."""
    if path is not None and Path(path).exists():
        try:
            return CpuCalibration.from_dict(json.loads(Path(path).read_text()), str(path)), False
        except ValueError:
            pass  # unreadable: measure again and replace it
    cal = measure()
    if path is not None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(cal.to_dict(), f)
        os.replace(tmp, path)
    return cal, True
