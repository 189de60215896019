"""One record per hardware generation: its published per-chip figures, how its chips are wired (ICI
ports per chip, the pod's extent, which dimensions of a slice wrap around) and the constants the
simulator assumes for it, each with its source. Read by :mod:`harness.targets` (fit, roofline,
compile-only devices) and by the timeline's spec (:func:`harness.metrics.timeline.specs.spec_for`).
Imports nothing of the harness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GiB = 2**30
TB = 1e12


@dataclass(frozen=True)
class Figure:
    """A constant the simulator prices a generation with: value, unit and where it comes from
    (``assumed: <why>`` where no published figure stands behind it)."""

    value: float
    unit: str
    source: str


@dataclass(frozen=True)
class TargetSpec:
    """One hardware generation, once: its published per-chip figures (read per device, a chip's share;
    a device is what JAX lists), how its chips are wired (ICI ports per chip, the pod's extent and
    which dimensions of a slice wrap around; a GPU has neither: NVSwitch) and the constants the
    simulator assumes for it, each with its source. Read by the roofline here and by the timeline's
    spec (:func:`harness.metrics.timeline.specs.spec_for`)."""

    name: str  # topology prefix as written in manifests: "v6e", "tpu7x", "h100", "h200"
    platform: str  # "tpu" | "gpu"
    device_kind: str  # what jax reports, e.g. "TPU v6 lite"
    devices_per_chip: int
    hbm_bytes: int  # per device, as the compiler sees it
    chip_bf16_flops: float  # per chip, dense
    chip_hbm_bytes_per_s: float  # per chip
    chip_interconnect_bytes_per_s: float  # per chip, all links, both directions (as published)
    interconnect: str
    source: str
    link_source: str  # how one link's bandwidth follows from the chip's (:attr:`link_bytes_per_s`)
    constants: Mapping[str, Figure]  # the simulator's own: matrix-unit tile, op overhead, host link
    ports: int = 0  # ICI ports per chip; 0: a switch (every device reaches any group at its full bandwidth)
    pod_extent: int = 0  # chips per dimension of a whole pod (v6e) or cube (tpu7x)
    wrap: str = ""  # "dimension": a dimension of whole extents wraps; "cube": all wrap when all are whole
    wrap_source: str = ""

    @property
    def peak_bf16_flops(self) -> float:  # per device, dense
        return self.chip_bf16_flops / self.devices_per_chip

    @property
    def hbm_bytes_per_s(self) -> float:  # per device
        return self.chip_hbm_bytes_per_s / self.devices_per_chip

    @property
    def interconnect_bytes_per_s(self) -> float:  # per device, one direction, all links
        return self.chip_interconnect_bytes_per_s / 2 / self.devices_per_chip

    @property
    def link_bytes_per_s(self) -> float:
        """One ICI port, one direction (TPU); a GPU's whole NVLink bandwidth, one direction (NVSwitch)."""
        return self.chip_interconnect_bytes_per_s / self.ports / 2 if self.ports else self.interconnect_bytes_per_s

    @property
    def tile(self) -> tuple[int, int, int]:
        """The matrix unit's tile a matmul pads to (m, n, k)."""
        return (
            int(self.constants["tile_m"].value),
            int(self.constants["tile_n"].value),
            int(self.constants["tile_k"].value),
        )

    def wraparound(self, dims: Sequence[int]) -> tuple[bool, ...]:
        """Per dimension, whether a slice of ``dims`` chips has wraparound links (:attr:`wrap_source`)."""
        whole = tuple(self.pod_extent > 0 and n >= self.pod_extent and n % self.pod_extent == 0 for n in dims)
        return tuple(all(whole) for _ in dims) if self.wrap == "cube" else whole

    def to_dict(self) -> dict[str, Any]:
        """The per-device figures a static record's ``target.spec`` holds."""
        return {k: getattr(self, k) for k in _RECORDED}


_RECORDED: tuple[str, ...] = ("name", "platform", "device_kind", "devices_per_chip", "hbm_bytes", "peak_bf16_flops")
_RECORDED += ("hbm_bytes_per_s", "interconnect_bytes_per_s", "interconnect", "source")
_V6E_DOC = "cloud.google.com/tpu/docs/v6e"
_TPU7X_DOC = "cloud.google.com/tpu/docs/tpu7x"
_SCALING_BOOK = "jax-ml.github.io/scaling-book/tpus"


def _tile(m: int, n: int, k: int, source: str) -> dict[str, Figure]:
    return {f"tile_{d}": Figure(v, "elements", source) for d, v in zip("mnk", (m, n, k), strict=True)}


def _overhead(seconds: float, source: str) -> dict[str, Figure]:
    return {"op_overhead_s": Figure(seconds, "s", source)}


_TPU_OVERHEAD = _overhead(
    1e-6,
    "assumed: ~1 us fixed cost per executed HLO op inside a program (pipeline fill/drain of a fusion); "
    "no published v6e figure. tpu7x's tables time each op on the device (accelerator-microbenchmarks "
    "9706b0e benchmark_utils.multiple_iteration_get_metrics_from_trace: the marked op's "
    "device_duration_ps, not the program's launch): hbm.md's 32 and 64 MiB copy rows extrapolate to "
    "~1.3 us at zero bytes, the 128^3 bf16 GEMM row (2.59 TFLOP/s) is 1.62 us for ~0.04 us of "
    "work: a small kernel's fixed cost 1.3-1.6 us, inside this value's +-50%",
)


_V6E_PROFILE = (
    "tests/harness/fixtures/real/v6e-tpu_inference_2.xplane.pb (xprof's real v6e XSpace; its jit_f and "
    "jit_broadcast_in_dim, not jit_convert_element_type, whose time is predicted with it)"
)


def _small(carried: str = "") -> dict[str, Figure]:
    """A TPU program's launch and a scalar op's cost, measured on v6e (``carried``: the generation they are
    carried to, assumed). The profile's per-op device times say a non-kernel op (a DMA's issue, a done
    that does not wait) costs 1-6 ns, not a kernel's fill/drain (``op_overhead_s``)."""
    pre = f"assumed: v6e's measured value carried to {carried} (no figure of its own); " if carried else "measured: "
    return {
        "program_launch_s": Figure(
            319.922e-9,
            "s",
            f"{pre}{_V6E_PROFILE}: from a program's start to its first op, median of jit_f's 400 executions on "
            "4 devices (XLA Modules to XLA Ops; 5-95% 309-344 ns)",
        ),
        "scalar_op_s": Figure(
            190.0e-9,
            "s",
            f"{pre}{_V6E_PROFILE}: a scalar op (a copy of an f32[] into S(6)), jit_broadcast_in_dim's start to its "
            "broadcast kernel, 509.9 ns (its one execution; the copy the only op before it) less the launch "
            "above; no XLA Ops event of its own",
        ),
    }


def _hopper(name: str, device_kind: str, hbm_bytes: int, hbm_tb_per_s: float, source: str) -> TargetSpec:
    """An NVIDIA Hopper GPU (H100 and H200 share everything but memory)."""
    return TargetSpec(
        name,
        "gpu",
        device_kind,
        1,
        hbm_bytes=hbm_bytes,
        chip_bf16_flops=989e12,
        chip_hbm_bytes_per_s=hbm_tb_per_s * TB,
        chip_interconnect_bytes_per_s=900e9,  # NVLink 4: 900 GB/s bidirectional
        interconnect="NVLink",
        source=source,
        link_source=f"{source.split(':')[0]}: NVLink 4, 900 GB/s bidirectional per GPU; through NVSwitch: "
        "450 GB/s one direction to any group",
        constants={
            **_tile(
                128,
                128,
                64,
                "assumed: a 128x128x64 thread-block tile, common for cuBLAS / CUTLASS bf16 GEMMs on Hopper "
                "(no figure for the kernels XLA picks)",
            ),
            **_overhead(
                4e-6,
                "assumed: ~4 us per kernel (launch + tail), XLA GPU without CUDA graphs; check against an nsys / "
                "XProf trace",
            ),
        },
    )


SPECS: dict[str, TargetSpec] = {
    s.name: s
    for s in (
        TargetSpec(
            "v6e",
            "tpu",
            "TPU v6 lite",
            1,
            hbm_bytes=int(31.25 * GiB),  # 32 GB chip; libtpu's compile-time limit ("available HBM (31.25G)")
            chip_bf16_flops=918e12,
            chip_hbm_bytes_per_s=1.64 * TB,
            chip_interconnect_bytes_per_s=3584e9 / 8,  # 3,584 Gbps bidirectional per chip
            interconnect="ICI",
            source="cloud.google.com/tpu/docs/v6e: 918 TFLOP/s bf16, 32 GB HBM at 1,640 GB/s, ICI 3,584 Gbps",
            link_source=f"{_V6E_DOC}: ICI bandwidth 3,584 Gbps per chip, 4 ICI ports per chip, 2D torus; one port, "
            "one direction = 3584e9/8/4/2",
            constants={
                **_tile(
                    8,
                    256,
                    256,
                    f"{_SCALING_BOOK}: the MXU multiplies an [8, K] LHS block per pass; v6e's MXU is a 256x256 "
                    "systolic array (v2-v5: 128x128), so N and K pad to 256 and M to 8",
                ),
                **_TPU_OVERHEAD,
                **_small(),
                "host_bytes_per_s": Figure(
                    32e9,
                    "B/s",
                    f"{_SCALING_BOOK}: PCIe 'Trillium (TPU v6e) has 32GB/s' per chip, 'about 2x higher than v5' "
                    "(whose 16 GB/s it gives 'each way'), read as one direction; "
                    f"{_V6E_DOC}: each chip connects to the host through a PCIe Gen5 interface",
                ),
            },
            ports=4,
            pod_extent=16,
            wrap="dimension",
            wrap_source="assumed: a v6e dimension wraps around only when the slice spans the pod's full 16 chips "
            f"in it ({_V6E_DOC} lists the pod as one 16x16 2D torus and says nothing of sub-slices; no second "
            "source found); shorter dimensions are lines",
        ),
        TargetSpec(
            "tpu7x",
            "tpu",
            "TPU7x",
            2,
            hbm_bytes=96 * 10**9,  # 192 GB per chip, two TensorCores (devices) per chip
            chip_bf16_flops=2307e12,
            chip_hbm_bytes_per_s=7.37 * TB,
            chip_interconnect_bytes_per_s=1.2 * TB,  # 1.2 TB/s bidirectional per chip
            interconnect="ICI",
            source="cloud.google.com/tpu/docs/tpu7x (Ironwood): 2,307 TFLOP/s bf16, 192 GB HBM at 7.37 TB/s, "
            "ICI 1.2 TB/s bidirectional, per chip of 2 devices",
            link_source=f"{_TPU7X_DOC}: ICI 1.2 TB/s bidirectional per chip, 3D torus; assumed 6 ports (+-x, +-y, "
            "+-z): one port, one direction = 1.2e12/6/2",
            constants={
                **_tile(
                    8,
                    256,
                    256,
                    f"assumed: tpu7x's MXU is 256x256 like v6e's ({_SCALING_BOOK} gives v6e's; no published "
                    "tpu7x figure found), an [8, K] LHS block per pass",
                ),
                **_TPU_OVERHEAD,
                **_small("tpu7x"),
            },
            ports=6,
            pod_extent=4,
            wrap="cube",
            wrap_source="cloud.google.com/tpu/docs/v5p ('All 4x4x4 and larger slices (one cube) have full 3D "
            "torus') and cloud.google.com/tpu/docs/v4 (slices of one or more full 4x4x4 cubes, each dimension a "
            "multiple of 4, have wraparound links; smaller slices are a 3D mesh without them), applied to tpu7x, "
            f"which {_TPU7X_DOC} says shares v5p's design: every dimension wraps when all are multiples of 4, "
            "none otherwise",
        ),
        _hopper(
            "h100",
            "NVIDIA H100 80GB HBM3",
            84_929_347_584,
            3.35,
            "NVIDIA H100 SXM datasheet: 989 TFLOP/s dense bf16, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s",
        ),
        _hopper(
            "h200",
            "NVIDIA H200",
            150_754_820_096,
            4.8,
            "NVIDIA H200 SXM datasheet: 989 TFLOP/s dense bf16, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s",
        ),
    )
}

# TPU generations libtpu describes as topologies (``<generation>:<chips per dim>``), and the devices JAX
# lists per chip: v4 and v5p run their two TensorCores as one megacore device. Only those in SPECS have
# the numbers for fit and roofline.
TPU_GENERATIONS: dict[str, int] = {"v4": 1, "v5e": 1, "v5p": 1}
TPU_GENERATIONS.update({n: s.devices_per_chip for n, s in SPECS.items() if s.platform == "tpu"})
