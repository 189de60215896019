"""The benchmark's markdown table (``reports/bench.md``) from pytest-benchmark's JSON: a module of its own
so that a test imports it without the conftest's XLA_FLAGS edit."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.1f}"


def matmul_peak(benchmarks: Sequence[dict[str, Any]]) -> tuple[float, str] | None:
    """The machine's measured matmul ceiling: the faster library's GFLOP/s on the reference matmul
    case (its ``extra_info["matmul_reference"]`` names it), with that name."""
    rates = [
        (x["analytic_gflop"] / min(x["jax_median_s"], x["torch_median_s"]), str(x["matmul_reference"]))
        for x in (b.get("extra_info", {}) for b in benchmarks)
        if x.get("matmul_reference") and "torch_median_s" in x
    ]
    return max(rates, default=None)


def markdown_table(benchmarks: Sequence[dict[str, Any]], machine: dict[str, Any]) -> str:
    """The JSON's benchmarks as one markdown table (times in ms; ratio = JAX time / PyTorch time of
    interleaved pairs, < 1 means JAX is faster; GFLOP/s from the analytic matmul FLOPs, as a fraction
    of the reference matmul's rate measured in the same run)."""
    head = (
        "| case | preset | dtype | JAX median ms | PyTorch median ms | JAX/PyTorch time (paired median) "
        "| speed-up | JAX GFLOP/s (of peak) | PyTorch GFLOP/s | JAX compile s | JAX peak MiB | PyTorch peak MiB "
        "| rounds |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows, threads, reference = [], set(), matmul_peak(benchmarks)
    peak = reference[0] if reference else None
    for b in benchmarks:
        x = b.get("extra_info", {})
        if "torch_median_s" not in x:
            continue
        ratio = x["paired_time_ratio_median"]
        threads.add(str(x.get("torch_threads", "?")))
        rates = "| - | -"
        if "analytic_gflop" in x:
            jax_rate, torch_rate = (x["analytic_gflop"] / x[k] for k in ("jax_median_s", "torch_median_s"))
            share = f" ({jax_rate / peak:.0%})" if peak else ""
            rates = f"| {jax_rate:.1f}{share} | {torch_rate:.1f}"
        rows.append(
            f"| {x.get('component', b['name'])} | {x.get('preset', '')} | {x.get('dtype', '')} "
            f"| {x['jax_median_s'] * 1e3:.2f} | {x['torch_median_s'] * 1e3:.2f} | {ratio:.2f} | {1 / ratio:.2f}x "
            f"{rates} | {x['jax_trace_lower_s'] + x['jax_compile_s']:.1f} | {_mib(x['jax_peak_bytes'])} "
            f"| {_mib(x['torch_peak_bytes'])} | {b['stats']['rounds']} |"
        )
    cpu = machine.get("cpu", {}).get("brand_raw", machine.get("processor", "?"))
    peak_note = f"{reference[0]:.1f} GFLOP/s (the faster library's {reference[1]})" if reference else "not measured"
    note = (
        f"\nMachine: {cpu}, {machine.get('cpu', {}).get('count', '?')} logical CPUs; load average at the end "
        f"{_loadavg()}; PyTorch threads {', '.join(sorted(threads)) or '?'}. Matmul peak: {peak_note}.\n"
        "JAX compile s = trace + lower + XLA compile (not in the run times). Peak MiB: XLA "
        "temp + output buffers of the compiled program; PyTorch: peak live bytes of tensors allocated during "
        "one call (TorchDispatchMode count). Both exclude weights and inputs.\n"
    )
    return "# JAX vs diffusers (PyTorch eager)\n\n" + head + "\n".join(rows) + "\n" + note


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"
