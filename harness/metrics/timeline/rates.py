"""Rates the hardware reaches, from published microbenchmark tables: each point cites its table and row.

A datasheet peak is an upper bound no kernel reaches; these tables say what real kernels reached, by
size. The simulator keeps the peak (``peak_flops_per_s``, ``hbm_bytes_per_s``, ``link_bytes_per_s``)
and prices an op at the peak times an *efficiency* read off a curve of the table's points
(:mod:`~harness.metrics.timeline.specs` carries them as constants, :mod:`~harness.metrics.timeline.
pricing` reads them):

* **Dots**: ``matmul_eff_n<N>`` = the table's measured TFLOP/s of an N x N x N bf16 GEMM over the
  datasheet peak (how a dot reads the curve, times its tile efficiency, which the table's sizes,
  all multiples of 256, never show: :mod:`~harness.metrics.timeline.pricing`).
* **HBM**: ``hbm_eff_b<B>`` = the measured copy bandwidth of a copy that accesses ``B`` bytes over
  the datasheet bandwidth per device. The table's "matrix size" is the tensor copied; a copy reads
  and writes it and the table's bandwidth counts both (8192 MiB in 5.3523 ms is 3209.8 GB/s only
  as read + write), so a row of size S is the point ``B = 2 S``.
* **Collectives**: ``collective_latency_s`` and ``link_efficiency`` from a least-squares fit of the
  all-gather table's times, ``time = latency + wire / bandwidth``, where ``wire`` is the bytes the
  simulator's ring model sends per device ((n - 1) / n of the output). The fitted bandwidth over
  the route bandwidth of the benchmark's group is the efficiency every route is priced at: the
  bandwidth a collective reaches then rises with its size as ``wire / (latency + wire / (link x
  efficiency))``. Replica groups enter through the route (:mod:`~harness.metrics.timeline.groups`).

tpu7x's tables time each op on the device, so a row's time holds the op's fixed cost, which the
simulator adds on its own (``op_overhead_s``): their rows are stored net of it (:func:`net_of_fixed`),
and a row is priced at its measured time. XLA's GPU GEMM rows are kept as they are (the GPU's
``op_overhead_s`` is assumed to be a launch, outside the kernel time; not checked against their generator).

Transfer to a generation without its own table (v6e from tpu7x; h200 from h100) keeps the
measured generation's efficiency at each size and applies it to the other's datasheet peaks; the
constants say ``assumed:`` (so they are priced wide), and :func:`harness.metrics.timeline.
uncertainty` evaluates the curves at their bounds and at the datasheet (no curve).

The tables, and the constants built from them; pure Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness import targets

MATMUL_PREFIX = "matmul_eff_n"
HBM_PREFIX = "hbm_eff_b"
LINK_EFFICIENCY = "link_efficiency"
CURVE_FAMILIES = (MATMUL_PREFIX, HBM_PREFIX, LINK_EFFICIENCY)


@dataclass(frozen=True)
class Row:
    """One row of a published table: its size, its measured value, and which row it is."""

    size: float
    value: float
    row: str


# ---------------------------------------------------------------- tpu7x (Ironwood), per device (one TensorCore)

_REAL = "../shared/reference/real-hardware/tpu7x-microbenchmarks"
TPU7X_GEMM_TABLE = (
    f"{_REAL}/tpu-recipes-ironwood-README.md (AI-Hypercomputer/tpu-recipes c8cfe2f6, "
    "microbenchmarks/ironwood/README.md), 'Results / GEMM': bf16 gemm_multiple_run, TFLOP/s per device"
)
TPU7X_GEMM = (  # m = n = k, FLOP/s per device
    Row(128, 2.589961271e12, "row 'Matrix Size 128'"),
    Row(256, 18.28645367e12, "row 256"),
    Row(512, 105.0783466e12, "row 512"),
    Row(1024, 349.7270639e12, "row 1024"),
    Row(2048, 679.284728e12, "row 2048"),
    Row(4096, 892.9445127e12, "row 4096"),
    Row(16384, 950.1286983e12, "row 16384"),
    Row(32768, 956.3824592e12, "row 32768"),
)
TPU7X_HBM_TABLE = (
    f"{_REAL}/hbm.md (AI-Hypercomputer/accelerator-microbenchmarks 9706b0e, Ironwood/guides/hbm), "
    "'Expected bandwidth for different matrix size' on tpu7x-2x2x1, GB/s/core (read + write)"
)
TPU7X_HBM = (  # bytes accessed (2 x the row's matrix size), B/s per core
    Row(2 * 2097152, 1379.335021e9, "row 2097152"),
    Row(2 * 4194304, 2249.746091e9, "row 4194304"),
    Row(2 * 8388608, 2246.129937e9, "row 8388608"),
    Row(2 * 16777216, 2757.308985e9, "row 16777216"),
    Row(2 * 33554432, 3009.83593e9, "row 33554432"),
    Row(2 * 67108864, 3097.217778e9, "row 67108864"),
    Row(2 * 134217728, 3176.50274e9, "row 134217728"),
    Row(2 * 268435456, 3167.144485e9, "row 268435456"),
    Row(2 * 536870912, 3199.020504e9, "row 536870912"),
    Row(2 * 1073741824, 3198.414211e9, "row 1073741824"),
    Row(2 * 2147483648, 3203.486119e9, "row 2147483648"),
    Row(2 * 4294967296, 3197.879607e9, "row 4294967296"),
    Row(2 * 8589934592, 3210.480912e9, "row 8589934592"),
)
TPU7X_ALL_GATHER_TABLE = (
    f"{_REAL}/all_gather.md (AI-Hypercomputer/accelerator-microbenchmarks 9706b0e, Ironwood/guides/"
    "collectives), 'Expected Results', topology 2x2x1 (the 2x2x2 rows agree within 3%)"
)
# Each row: f32[r, 8, 128] gathered 4 ways into f32[4r, 8, 128]; the table's "Transferred Data" is
# twice the ring's wire bytes per device (3/4 of the output): 0.001572864 GB for a 1 MiB output.
# Row(size = wire bytes per device, value = seconds = Transferred Data / Achieved Bandwidth).
TPU7X_ALL_GATHER = (
    Row(0.75 * 4 * 65536 * 4, 0.001572864 / 71.7703034, "row 2x2x1 65536 elements"),
    Row(0.75 * 4 * 262144 * 4, 0.006291456 / 129.1869148, "row 2x2x1 262144"),
    Row(0.75 * 4 * 1048576 * 4, 0.025165824 / 161.9040742, "row 2x2x1 1048576"),
    Row(0.75 * 4 * 4194304 * 4, 0.100663296 / 174.765465, "row 2x2x1 4194304"),
    Row(0.75 * 4 * 16777216 * 4, 0.402653184 / 178.7714158, "row 2x2x1 16777216"),
)
# The group's route on the simulator's tpu7x 2x2x1 model: the 4 gathering devices are one core on each
# of the 2 x 2 chips (two mesh dimensions without wraparound), and the other cores' group gathers at the
# same time over the same links: 2 links x 100 GB/s / 2 groups = 100 GB/s per device. Which devices:
# the table's config (AI-Hypercomputer/accelerator-microbenchmarks at ecd4c82, the commit that added the
# table, Ironwood/configs/collectives/all_gather_tpu7x_2x2x1.yaml) gathers over mesh axes d_0, d_1 of a
# 2x2x2 mesh of 8 devices ("sharding_strategy: 2x2x1", commented "Parallel Replica"), and jax's
# mesh_utils._7x_create_device_mesh orders the devices (0, 1, 2, 3, 6, 7, 4, 5), so the last axis, the
# one not gathered, is the core on the chip (jax 0.10.2).
TPU7X_ALL_GATHER_ROUTE_BYTES_PER_S = 2 * (1.2e12 / 6 / 2) / 2


# ---------------------------------------------------------------- H100 (sm_90), from XLA's measured tables

XLA_GEMM_TABLE = (
    "openxla/xla xla/service/gpu/model/matmul_interpolator_data.h (kDefaultMatmulPTable, key 'sm_90'; read "
    "in its ROCm/xla mirror at d02afb4), entries b: 1, m = n = k, flops 'BF16xBF16->BF16'"
)
H100_GEMM = (
    Row(256, 6186289085545, "entry b 1 m 256 n 256 k 256"),
    Row(512, 41221660933660, "entry b 1 m 512 n 512 k 512"),
    Row(1024, 246723764705882, "entry b 1 m 1024 n 1024 k 1024"),
    Row(4096, 786048187408492, "entry b 1 m 4096 n 4096 k 4096"),
)
XLA_COLLECTIVE_TABLE = (
    "openxla/xla xla/service/gpu/model/collective_interpolator_data.h at 040b3849 (kDefaultCollectivePTable, "
    "key 'sm_90', 8 GPUs)"
)
# all-gather F32[N], one group of 8 (num_replica_groups 1, num_devices_per_group 8): N -> XLA's
# network_throughput_bytes_per_sec, the instruction's (output) bytes over its time; every sm_90 size,
# 2^8 .. 2^29 elements. Row(size = output bytes, value = seconds).
_H100_ALL_GATHER_THROUGHPUT = {
    256: 32064128,
    512: 58447488,
    1024: 140814081,
    2048: 162539682,
    4096: 532224532,
    8192: 1777777777,
    16384: 3524956970,
    32768: 4437703141,
    65536: 7953398058,
    131072: 27443886097,
    262144: 33677286742,
    524288: 66264914054,
    1048576: 88983027834,
    2097152: 128944417117,
    4194304: 204003112840,
    8388608: 259355923818,
    16777216: 314227150134,
    33554432: 343936367363,
    67108864: 368082843352,
    134217728: 385603346434,
    268435456: 393268230936,
    536870912: 401897616481,
}
H100_ALL_GATHER = tuple(
    Row(4 * n, 4 * n / bps, f"entry all-gather F32[{n}], 1 group of 8: {bps} B/s")
    for n, bps in _H100_ALL_GATHER_THROUGHPUT.items()
)
# XLA has no HBM table: its GPU model reads the datasheet bandwidth times a coalescing factor. The one
# measured copy-by-size curve this project has is tpu7x's (hbm.md): a GPU's HBM curve is it, carried.
GPU_HBM_NOTE = (
    "XLA has no HBM table (xla/service/gpu/model/gpu_performance_model_base.cc, ReadTimeWithDRAMHeuristic: "
    "the datasheet bandwidth x a coalescing factor)"
)


# ---------------------------------------------------------------- curve arithmetic


def efficiencies(rows: Sequence[Row], peak: float) -> list[tuple[float, float, str]]:
    """(size, measured / peak, row) of each row, capped at 1 (a peak is an upper bound)."""
    return [(r.size, min(r.value / peak, 1.0), r.row) for r in rows]


def fit_latency_bandwidth(rows: Sequence[Row]) -> tuple[float, float]:
    """Least squares of ``seconds = latency + size / bandwidth`` over the rows: (latency s, bandwidth
    B/s). Rows are (size bytes, seconds); ValueError under two distinct sizes."""
    xs, ys = [r.size for r in rows], [r.value for r in rows]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx <= 0:
        raise ValueError("fit_latency_bandwidth: need two distinct sizes")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return my - slope * mx, 1.0 / slope


def split_misses(rows: Sequence[Row], latency: float, bandwidth: float) -> tuple[float, float]:
    """The fitted line's largest relative miss on the rows whose fitted time its latency dominates, and
    on those its bandwidth term dominates: each term's uncertainty is read where it sets the time."""
    lat = [abs(latency + r.size / bandwidth - r.value) / r.value for r in rows if latency >= r.size / bandwidth]
    bw = [abs(latency + r.size / bandwidth - r.value) / r.value for r in rows if latency < r.size / bandwidth]
    return max(lat, default=0.0), max(bw, default=0.0)


# ---------------------------------------------------------------- the constants a spec carries

Entry = tuple[float, str, str, "float | None"]  # value, unit, source, uncertainty (None: by the source's kind)


def cubic_tile_efficiency(n: int, tile: tuple[int, int, int]) -> float:
    """Useful over padded work of an n x n x n matmul on a matrix unit of ``tile`` (m, n, k)."""
    padded = 1
    for t in tile:
        padded *= -(-n // t) * t
    return n**3 / padded


def net_of_fixed(rows: Sequence[Row], fixed_s: float, work: Callable[[float], float]) -> tuple[Row, ...]:
    """Each row's rate with ``fixed_s`` of its time taken out: the per-op fixed cost the simulator adds
    on its own (``op_overhead_s``), which a table that times each op on the device already holds. A
    row's time is ``work(size) / value``; ValueError where the fixed cost is not below it."""
    out = []
    for r in rows:
        seconds = work(r.size) / r.value
        if seconds <= fixed_s:
            raise ValueError(f"rates: {r.row} takes {seconds:.3g} s, not above the fixed cost {fixed_s:.3g} s")
        out.append(Row(r.size, work(r.size) / (seconds - fixed_s), f"{r.row}, less {fixed_s * 1e9:g} ns per op"))
    return tuple(out)


def gemm_flops(n: float) -> float:
    """FLOPs of an n x n x n GEMM row."""
    return 2 * n**3


def _bytes(size: float) -> float:
    return size


def _curve(
    prefix: str,
    rows: Sequence[Row],
    peak: float,
    table: str,
    carried: str = "",
    tile: tuple[int, int, int] = (1, 1, 1),
) -> dict[str, Entry]:
    """``<prefix><size>`` efficiency constants of ``rows`` over ``peak``; ``carried``: the generation the
    rows were measured on, when they are applied to another (an assumption, said first). ``tile``: a
    GEMM row's efficiency is stored net of its own padding on the matrix unit's tile (the simulator
    multiplies the tile's efficiency back in), so the row is priced at its measured rate exactly;
    only tpu7x's 128 row is padded (to 256 on n and k). Rows timed per op on the device come net of
    the op's fixed cost (:func:`net_of_fixed`), so a row is priced at its measured time, overhead
    included, not that plus the overhead again."""
    out: dict[str, Entry] = {}
    for size, eff, row in efficiencies(rows, peak):
        pad = cubic_tile_efficiency(int(size), tile)
        eff = min(eff / pad, 1.0)
        row = row if pad == 1 else f"{row}, divided by its tile padding {pad:g}"
        where = f"{table}, {row}"
        source = (
            f"assumed: {carried}'s measured efficiency at this size carried to this generation's datasheet peak "
            f"(no table of its own); {where}"
            if carried
            else f"{where} over the datasheet peak {peak:.4g}"
        )
        out[f"{prefix}{int(size)}"] = (eff, "fraction", source, None)
    return out


def tpu7x_collectives(carried: str = "") -> dict[str, Entry]:
    """``collective_latency_s`` and ``link_efficiency`` from the tpu7x all-gather table (see the module
    docstring); their uncertainty is the fit's largest relative miss on its rows."""
    latency, bandwidth = fit_latency_bandwidth(TPU7X_ALL_GATHER)
    miss = max(abs(latency + r.size / bandwidth - r.value) / r.value for r in TPU7X_ALL_GATHER)  # the fit's largest
    fit = (
        f"{TPU7X_ALL_GATHER_TABLE}: least squares of time = latency + wire / bandwidth over its five rows "
        f"(latency {latency * 1e6:.1f} us, {bandwidth / 1e9:.1f} GB/s of ring wire bytes per device, largest "
        f"miss {miss:.1%})"
    )
    route = (
        f"; over the route of a 4-chip group, one core per chip, the other cores' group at once (2 links x "
        f"100 GB/s / 2 groups = {TPU7X_ALL_GATHER_ROUTE_BYTES_PER_S / 1e9:.0f} GB/s: the config at "
        "accelerator-microbenchmarks ecd4c82 gathers mesh axes d_0, d_1 of 2x2x2, 'Parallel Replica')"
    )
    pre = f"assumed: {carried}'s measured value carried to this generation (no table of its own); " if carried else ""
    return {
        "collective_latency_s": (latency, "s", pre + fit, None if carried else miss),
        LINK_EFFICIENCY: (
            min(bandwidth / TPU7X_ALL_GATHER_ROUTE_BYTES_PER_S, 1.0),
            "fraction",
            pre + fit + route,
            None if carried else miss,
        ),
    }


def tpu7x_fixed_s() -> float:
    """The fixed cost per op in tpu7x's tables: they time each op on the device (accelerator-
    microbenchmarks 9706b0e, ``multiple_iteration_timeit_from_trace``: the op's ``device_duration_ps``),
    so each row holds the op's fill/drain, which the simulator adds as tpu7x's ``op_overhead_s``."""
    return targets.SPECS["tpu7x"].constants["op_overhead_s"].value


def tpu(measured_here: bool) -> dict[str, Entry]:
    """A TPU generation's curves: tpu7x's own tables (``measured_here``), else tpu7x's efficiencies
    (fractions of tpu7x's datasheet peaks, ``harness.targets.SPECS``) carried to this generation's
    peaks (assumed)."""
    t = targets.SPECS["tpu7x"]
    carried = "" if measured_here else "tpu7x"
    gemm, hbm = (net_of_fixed(rows, tpu7x_fixed_s(), w) for rows, w in ((TPU7X_GEMM, gemm_flops), (TPU7X_HBM, _bytes)))
    return {
        **_curve(MATMUL_PREFIX, gemm, t.peak_bf16_flops, TPU7X_GEMM_TABLE, carried, t.tile),
        **_curve(HBM_PREFIX, hbm, t.hbm_bytes_per_s, TPU7X_HBM_TABLE, carried),
        **tpu7x_collectives(carried),
    }


def gpu(measured_here: bool) -> dict[str, Entry]:
    """An NVIDIA Hopper GPU's curves from XLA's sm_90 tables (H100); for H200 (the same GH100 compute
    and NVLink 4, faster HBM: no table of its own) carried, assumed. Collectives: least squares of
    ``time = latency + output / bandwidth`` over the 22 sm_90 all-gather sizes of one group of 8 (the
    ring sends 7/8 of the output per GPU); the latency's uncertainty is the line's largest miss on the
    rows its latency dominates (small messages: XLA's table scatters 18-50 us there), the
    efficiency's on the rows its bandwidth term dominates. HBM: no table exists (:data:`GPU_HBM_NOTE`),
    so tpu7x's measured copy efficiency by size is carried to the GPU's datasheet bandwidth, assumed."""
    carried = "" if measured_here else "H100 (sm_90)"
    t, tpu7x = targets.SPECS["h100"], targets.SPECS["tpu7x"]
    latency, bandwidth = fit_latency_bandwidth(H100_ALL_GATHER)
    lat_miss, bw_miss = split_misses(H100_ALL_GATHER, latency, bandwidth)
    where = (
        f"{XLA_COLLECTIVE_TABLE}: least squares of time = latency + output / bandwidth over its 22 all-gather "
        f"sizes F32[256] .. F32[536870912] (latency {latency * 1e6:.1f} us, largest miss {lat_miss:.0%} where it "
        f"dominates; {bandwidth / 1e9:.1f} GB/s of output, largest miss {bw_miss:.1%} where it dominates)"
    )
    eff = 7 / 8 * bandwidth / t.interconnect_bytes_per_s
    nvlink = t.interconnect_bytes_per_s
    route = f"; the ring's 7/8 of the output per GPU over NVLink's {nvlink / 1e9:.0f} GB/s one direction"
    pre = f"assumed: {carried}'s measured value carried (no table of its own); " if carried else ""
    return {
        **_curve(MATMUL_PREFIX, H100_GEMM, t.peak_bf16_flops, XLA_GEMM_TABLE, carried, t.tile),
        **_curve(
            HBM_PREFIX,
            net_of_fixed(TPU7X_HBM, tpu7x_fixed_s(), _bytes),
            tpu7x.hbm_bytes_per_s,
            f"{TPU7X_HBM_TABLE}; {GPU_HBM_NOTE}",
            "tpu7x",
        ),
        "collective_latency_s": (latency, "s", pre + where, None if carried else lat_miss),
        LINK_EFFICIENCY: (min(eff, 1.0), "fraction", pre + where + route, None if carried else bw_miss),
    }


def best_matmul_efficiency(curve: Sequence[tuple[float, float]]) -> float:
    """The best point of a matmul curve: the fraction of peak the best measured GEMM reaches (1 without one)."""
    return min(max((e for _, e in curve), default=1.0), 1.0)


def best_gemm_flops_per_s(name: str) -> tuple[float, str] | None:
    """The best measured bf16 GEMM rate per device of generation ``name`` and where it comes from (for
    a generation without a table: the measured one's best efficiency times its own datasheet peak,
    said so); None for a generation with neither."""
    if name not in targets.SPECS:
        return None
    peak = targets.SPECS[name].peak_bf16_flops
    if name == "tpu7x":
        best = max(TPU7X_GEMM, key=lambda r: r.value)
        return best.value, f"{TPU7X_GEMM_TABLE}, {best.row}"
    if name == "h100":
        best = max(H100_GEMM, key=lambda r: r.value)
        return best.value, f"{XLA_GEMM_TABLE}, {best.row}"
    rows, table, origin = (
        (TPU7X_GEMM, TPU7X_GEMM_TABLE, "tpu7x")
        if targets.SPECS[name].platform == "tpu"
        else (H100_GEMM, XLA_GEMM_TABLE, "h100")
    )
    best = max(rows, key=lambda r: r.value)
    eff = best.value / targets.SPECS[origin].peak_bf16_flops
    return (
        peak * eff,
        f"assumed: {origin}'s best measured GEMM efficiency ({eff:.3f}; {table}, {best.row}) x the datasheet peak",
    )


def matmul_rates(name: str) -> dict[str, Any] | None:
    """What a matmul floor divides by on generation ``name``: the best measured GEMM rate per device
    (``achievable_flops_per_s``, with its ``source``) and the datasheet peak (``datasheet_flops_per_s``);
    None for a generation with neither. The floor the reports quote is the step's matmul FLOPs at
    the achievable rate, the datasheet one beside it."""
    best = best_gemm_flops_per_s(name)
    if best is None:
        return None
    return {
        "achievable_flops_per_s": best[0],
        "datasheet_flops_per_s": targets.SPECS[name].peak_bf16_flops,
        "source": best[1],
    }


def label(constants: Any, platform: str) -> str:
    """How a prediction on a spec with these constants is labelled wherever it is shown: ``predicted,
    tpu7x curves`` / ``predicted, H100 curves`` where the spec carries a published table's curves (its
    own or carried), ``predicted, measured rates`` for a CPU spec (measured on the host), else
    ``predicted, datasheet rates``."""
    if platform == "cpu":
        return "predicted, measured rates"
    curves = any(k.startswith((MATMUL_PREFIX, HBM_PREFIX)) or k == LINK_EFFICIENCY for k in constants)
    if not curves:
        return "predicted, datasheet rates"
    return "predicted, tpu7x curves" if platform == "tpu" else "predicted, H100 curves"
