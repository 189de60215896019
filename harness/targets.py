"""Target accelerators: a topology parsed once, compile-only devices, and a roofline estimate.

A manifest's ``[target]`` names a platform and, for compile-only analysis, a topology (``v6e:2x4``,
``tpu7x:2x2x1``, ``h100:1x1x8``): :func:`check_topology` parses it into a :class:`Slice` with its
generation's record (:mod:`harness.hardware`: the vendors' per-chip figures, divided among the
devices JAX exposes per chip); :func:`compile_devices` gives devices XLA can compile for without
the hardware (libtpu's topology descriptions, the CUDA PJRT plugin's target config; a missing
optional extra is a :class:`MissingExtra` naming it); :func:`roofline` a lower bound on step time
from FLOPs, HBM bytes and interconnect bytes.

The roofline's assumptions travel with every result (:data:`ROOFLINE_ASSUMPTIONS`): peak is dense
bf16 matmul throughput (elementwise work and attention inefficiencies ignored, so real steps are
slower); HBM bytes are the top-level ops' reads and writes with loop bodies times their trip counts
(:func:`harness.metrics.hlo.memory_traffic_bytes`; XLA's ``bytes accessed`` counts a loop body once
and re-reads inside fusions); interconnect time is each device's ring wire bytes over its share of
all the chip's links, as if every collective used every link at full speed (ring collectives on a
torus get close, small latency-bound ones do not); ``step_s`` assumes perfect overlap,
``step_serial_s`` none, and a real step lies in between.

Imports neither JAX nor the model at import time: manifests use it to count devices per chip.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.families import Roofline
from harness.hardware import SPECS, TPU_GENERATIONS, TargetSpec


class MissingExtra(RuntimeError):
    """Compile-only analysis needs an optional extra that is not installed."""

    def __init__(self, extra: str, what: str):
        self.extra = extra
        super().__init__(
            f"{what} needs the optional extra [{extra}]: pip install -e '.[{extra}]' (or run `nox -s aot`)"
        )


ROOFLINE_ASSUMPTIONS = (
    "compute = HLO matmul FLOPs (loop trip counts applied) / dense bf16 peak; elementwise/softmax ignored",
    "HBM = max(fusion-level HLO traffic with trip counts, XLA bytes accessed, argument + output bytes) "
    "/ peak HBM bandwidth",
    "interconnect = ring wire bytes of the collectives / per-device share of all links (one direction)",
    "step_s = max(compute, HBM, interconnect): perfect overlap; step_serial_s = their sum: no overlap",
)

TOPOLOGY_EXAMPLES = {"tpu": "v6e:2x4", "gpu": "h100:1x1x8"}

_TOPOLOGY = re.compile(r"^([A-Za-z0-9_ ]+?)[:=_]([0-9]+(?:x[0-9]+)*)(?:_twisted|_untwisted)?$")


@dataclass(frozen=True)
class Slice:
    """A topology string parsed once: the hardware's name and chips per dimension (GPU: slices x hosts
    x GPUs per host), checked against its platform."""

    name: str
    dims: tuple[int, ...]
    platform: str

    @property
    def spec(self) -> TargetSpec | None:
        """The generation's record; None for a TPU generation libtpu knows that has no figures here."""
        return SPECS.get(self.name)

    @property
    def devices(self) -> int:
        """Devices JAX lists: chips (the product of the dims) x devices per chip."""
        return math.prod(self.dims) * TPU_GENERATIONS.get(self.name, 1)

    def __str__(self) -> str:
        return f"{self.name}:{'x'.join(map(str, self.dims))}"


def parse_topology(topology: str) -> tuple[str, tuple[int, ...]]:
    """``"v6e:2x4"`` -> ``("v6e", (2, 4))``; ValueError when it is not of that form."""
    m = _TOPOLOGY.match(topology)
    if not m:
        raise ValueError(f"bad topology {topology!r} (expected e.g. 'v6e:2x4', 'tpu7x:2x2x1', 'h100:1x1x8')")
    return m.group(1).lower(), tuple(int(d) for d in m.group(2).split("x"))


def known_topologies(platform: str) -> list[str]:
    """The hardware names a ``platform`` topology may start with: TPU generations libtpu knows, or the
    GPUs with a spec (compiling for a GPU needs its spec's target description)."""
    if platform == "tpu":
        return list(TPU_GENERATIONS)
    return [name for name, spec in SPECS.items() if spec.platform == platform]


def check_topology(topology: str, platform: str) -> Slice:
    """``topology`` parsed, its hardware name checked against ``platform``'s known ones; ValueError
    naming them otherwise (a typo would fail only at run time, inside libtpu or the CUDA plugin)."""
    name, dims = parse_topology(topology)
    spec = SPECS.get(name)
    if spec is not None and spec.platform != platform:
        raise ValueError(f"{name!r} is a {spec.platform} target; platform is {platform!r}")
    known = known_topologies(platform)
    if name not in known:
        what = "TPU generation" if platform == "tpu" else f"{platform.upper()}"
        raise ValueError(
            f"unknown {what} {name!r} in topology {topology!r} (known: {', '.join(known)}; "
            f"e.g. {TOPOLOGY_EXAMPLES.get(platform, '')!r})"
        )
    if platform == "gpu" and len(dims) != 3:
        raise ValueError(f"a GPU topology is <gpu>:<slices>x<hosts>x<gpus per host>, got {topology!r}")
    return Slice(name, dims, platform)


# --------------------------------------------------------------------------- devices


def hardware_present(platform: str) -> bool:
    """Whether this machine has the platform's devices, judged without starting JAX.

    TPU VMs expose ``/dev/accel*`` (or ``/dev/vfio`` on newer generations); NVIDIA GPUs
    ``/dev/nvidia0``. Starting JAX to ask would make libtpu probe for a TPU (slow, noisy)
    on every CPU host.
    """
    import glob

    if platform == "cpu":
        return True
    if platform == "tpu":
        return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))
    if platform == "gpu":
        return bool(glob.glob("/dev/nvidia[0-9]*"))
    return False


# The CUDA plugin compiles for a GPU described by this text proto (stream_executor
# GpuTargetConfigProto); the numbers are the device's, as `nvidia-smi -q` / cudaGetDeviceProperties
# report them. No CUDA driver or library is needed to compile.
_GPU_TARGET_CONFIG = """gpu_device_info {{ threads_per_block_limit: 1024 threads_per_warp: 32
  shared_memory_per_block: 49152 shared_memory_per_core: 233472 threads_per_core_limit: 2048
  core_count: 132 fpus_per_core: 128 block_dim_limit_x: 2147483647 block_dim_limit_y: 65535
  block_dim_limit_z: 65535 memory_bandwidth: {bandwidth} l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: {memory} shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 }} registers_per_core_limit: 65536 registers_per_block_limit: 65536 }}
platform_name: "CUDA" dnn_version_info {{ major: 9 minor: 7 }} device_description_str: "{kind}" """


def gpu_target_config(spec: TargetSpec) -> str:
    """The CUDA plugin's target description of a Hopper GPU (H100 / H200 share everything but memory)."""
    return _GPU_TARGET_CONFIG.format(bandwidth=int(spec.hbm_bytes_per_s), memory=spec.hbm_bytes, kind=spec.device_kind)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def compile_devices(platform: str, topology: str) -> list[Any]:
    """Devices of ``topology`` to compile for, without the hardware (JAX must run with
    ``JAX_PLATFORMS=cpu``: the plugins are only asked to describe devices, not to open them)."""
    from jax.experimental import topologies

    if platform == "tpu":
        if not _installed("libtpu"):
            raise MissingExtra("tpu-aot", f"compiling for TPU topology {topology!r} without a TPU")
        return list(topologies.get_topology_desc(topology_name=topology, platform="tpu").devices)
    if platform == "gpu":
        if not _installed("jax_plugins.xla_cuda12"):
            raise MissingExtra("gpu-aot", f"compiling for GPU topology {topology!r} without a GPU")
        gpus = check_topology(topology, platform)
        config = gpu_target_config(SPECS[gpus.name])
        return list(
            topologies.get_topology_desc(
                platform="cuda", target_config=config, topology="x".join(map(str, gpus.dims))
            ).devices
        )
    raise ValueError(f"no compile-only devices for platform {platform!r}")


def compile_env(platform: str) -> dict[str, str]:
    """Environment for a compile-only worker: JAX on the host CPU; libtpu told it is not on a TPU VM
    (else it probes for one and logs errors) and that other processes may load it too (else a second
    compile-only process fails on libtpu's lockfile, /tmp/libtpu_lockfile). Never set these on a real
    TPU host."""
    env = {"JAX_PLATFORMS": "cpu"}
    if platform == "tpu":
        env.update(TPU_ACCELERATOR_TYPE="v6e-8", TPU_WORKER_HOSTNAMES="localhost", ALLOW_MULTIPLE_LIBTPU_LOAD="1")
    return env


def option_flag(name: str, value: bool | int | float | str) -> str:
    """A compiler option as a command-line flag: ``--name=value`` (booleans as true / false)."""
    return f"--{name}={str(value).lower() if isinstance(value, bool) else value}"


def run_flags_env(platform: str, options: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, str]:
    """The variables to set (on top of ``env``) so that every compile of a process that runs on the
    hardware gets ``options`` too, not only the ones given ``compiler_options``: what the backend reads
    once, before it loads -- ``LIBTPU_INIT_ARGS`` for TPU (libtpu's flags), ``XLA_FLAGS`` elsewhere.
    The flags go after those already there (a later flag wins)."""
    if not options:
        return {}
    var = "LIBTPU_INIT_ARGS" if platform == "tpu" else "XLA_FLAGS"
    flags = [option_flag(k, v) for k, v in options.items()]
    return {var: " ".join([*env.get(var, "").split(), *flags])}


# --------------------------------------------------------------------------- roofline


def roofline(
    spec: TargetSpec, flops: float | None, hbm_bytes: float | None, collective_bytes: float | None
) -> Roofline:
    """Lower-bound step time per device (seconds) from the spec's peaks; see the module docstring."""
    terms: dict[str, Any] = {
        "compute_s": None if flops is None else flops / spec.peak_bf16_flops,
        "hbm_s": None if hbm_bytes is None else hbm_bytes / spec.hbm_bytes_per_s,
        "interconnect_s": None if collective_bytes is None else collective_bytes / spec.interconnect_bytes_per_s,
    }
    known = {k: v for k, v in terms.items() if v is not None}
    return Roofline(
        **terms,
        step_s=max(known.values()) if known else None,
        step_serial_s=sum(known.values()) if known else None,
        bound_by=max(known, key=lambda k: known[k]).removesuffix("_s") if known else None,
        assumptions=list(ROOFLINE_ASSUMPTIONS),
    )


def fits(spec: TargetSpec, needed_bytes: float | None) -> bool | None:
    return None if needed_bytes is None else needed_bytes <= spec.hbm_bytes


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory available to new processes (Linux ``MemAvailable``), None where unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_memory_per_device(devices: int) -> tuple[int | None, str]:
    """(bytes, where the number comes from): the host memory available now, shared by ``devices``
    simulated CPU devices (they all allocate from it). None where the host does not say."""
    if (available := available_memory()) is not None:
        return available // max(devices, 1), f"host MemAvailable / {devices} devices"
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None, ""
    return available // max(devices, 1), f"host available memory / {devices} devices"


def device_memory(device: Any, devices: int) -> tuple[int | None, str]:
    """(bytes per device, source) of a JAX device: what its runtime says (``memory_stats()``), else the
    spec table by device kind, else on CPU the host's share (:func:`host_memory_per_device`)."""
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - a backend without memory stats
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{device.device_kind} memory_stats() bytes_limit"
    spec = next((s for s in SPECS.values() if s.device_kind == device.device_kind), None)
    if spec is not None:
        return spec.hbm_bytes, f"{spec.name} spec ({spec.source.split(':')[0]})"
    if device.platform == "cpu":
        return host_memory_per_device(devices)
    return None, ""
