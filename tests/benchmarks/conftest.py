"""JAX vs diffusers benchmark plumbing: paired, interleaved timing on pytest-benchmark, compile time
apart from run time, peak working memory of both sides, and a markdown table next to the JSON.

Run through ``nox -s bench`` (``pytest tests/benchmarks --benchmark-json=reports/bench.json``);
the normal test run never collects this directory (``norecursedirs`` in pyproject.toml).

Every case is one pytest-benchmark entry timing the compiled JAX program; the PyTorch call runs
in the untimed ``setup`` slot before each JAX round, so the two alternate sample by sample and
share the machine's state (this box's cores are shared: between-run noise dwarfs within-run).
The PyTorch samples, their median, the median of per-pair time ratios, compile time and memory go
to ``extra_info``; ``pytest_benchmark_update_json`` writes it as
``reports/bench.md`` (:func:`tests.benchmarks.table.markdown_table`).
"""

from __future__ import annotations

import os

# The benchmark times single-device programs on the real machine. tests/conftest.py (loaded first)
# simulates 8 CPU devices for the sharding tests; under that flag XLA:CPU ran the `small` step
# 1.5x slower (58 vs 38 ms, same program, one device used), so it is undone here, before any JAX
# backend exists, and `_one_device` below refuses to time if it was too late.
# tests/conftest.py's fast-compile flags go too: the benchmark times optimised code.
os.environ["XLA_FLAGS"] = " ".join(
    f
    for f in os.environ.get("XLA_FLAGS", "").split()
    if not f.startswith(
        ("--xla_force_host_platform_device_count", "--xla_backend_optimization_level", "--xla_cpu_use_fusion_emitters")
    )
)

import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import pytest

from tests.benchmarks.table import markdown_table

# Idle gap before each timed call: XLA's and PyTorch's worker threads spin-wait after their work;
# on 2 cores a still-spinning pool of one library would steal the next call's cores from the other.
SETTLE_S = 0.02
# Per case: enough rounds for a stable median, bounded so a slow case stays within ~this budget.
TIME_BUDGET_S = 12.0
MIN_ROUNDS, MAX_ROUNDS = 5, 30


@dataclass
class Case:
    """One side-by-side measurement: ``jax_fn(*jax_args)`` (jitted here) vs ``torch_fn()`` (eager)."""

    jax_fn: Callable[..., Any]
    jax_args: Sequence[Any]
    torch_fn: Callable[[], Any]
    info: dict[str, Any] = field(default_factory=dict)
    jit: bool = True  # False: jax_fn compiles its own programs on its first call


def torch_peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes of tensors the call allocates and holds at once (intermediates + outputs; weights
    and inputs excluded), counted op by op with a ``TorchDispatchMode``: new (non-view) outputs
    add their storage, a tensor's collection subtracts it. The analogue of XLA's temp + output."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    state = {"live": 0, "peak": 0}
    seen: set[int] = set()

    def free(key: int, nbytes: int) -> None:
        seen.discard(key)
        state["live"] -= nbytes

    class Peak(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t._base is None:
                    key = t.untyped_storage().data_ptr()
                    if key and key not in seen:
                        nbytes = t.untyped_storage().nbytes()
                        seen.add(key)
                        state["live"] += nbytes
                        state["peak"] = max(state["peak"], state["live"])
                        weakref.finalize(t, free, key, nbytes)
            return out

    with torch.inference_mode(), Peak():
        result = fn()
    del result
    return state["peak"]


def _jax_peak_bytes(compiled: Any) -> int | None:
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    return int(mem.temp_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes)


def _block(x: Any) -> Any:
    return jax.block_until_ready(x)


def run_case(benchmark: Any, case: Case) -> None:
    """Compile (timed apart), warm up both sides, then time JAX rounds interleaved with PyTorch."""
    import torch

    t0 = time.perf_counter()
    if case.jit:
        lowered = jax.jit(case.jax_fn).lower(*case.jax_args)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
    else:  # compile time: the first call's excess over a warm call (below)
        compiled = case.jax_fn
        _block(compiled(*case.jax_args))
        t1 = t2 = time.perf_counter()
    args = case.jax_args

    def jax_call() -> Any:
        return _block(compiled(*args))

    torch_samples: list[float] = []

    def torch_round() -> None:
        time.sleep(SETTLE_S)
        with torch.inference_mode():
            start = time.perf_counter()
            case.torch_fn()
            torch_samples.append(time.perf_counter() - start)
        time.sleep(SETTLE_S)  # the timed JAX call follows this untimed setup

    jax_call()
    torch_round()  # warm-up of both sides (allocator, oneDNN primitive caches)
    t_jax = min(_timed(jax_call) for _ in range(2))
    if not case.jit:
        t1, t2 = t0, t0 + (t2 - t0) - t_jax
    torch_samples.clear()
    torch_round()
    rounds = int(min(MAX_ROUNDS, max(MIN_ROUNDS, TIME_BUDGET_S // max(t_jax + torch_samples[0], 1e-6))))
    torch_samples.clear()
    benchmark.pedantic(jax_call, setup=torch_round, rounds=rounds, iterations=1, warmup_rounds=0)
    jax_samples = list(benchmark.stats.stats.data)
    pairs = [j / t for j, t in zip(jax_samples, torch_samples, strict=True)]
    benchmark.extra_info.update(
        case.info,
        jax_trace_lower_s=t1 - t0,
        jax_compile_s=t2 - t1,
        jax_median_s=statistics.median(jax_samples),
        torch_median_s=statistics.median(torch_samples),
        torch_samples_s=torch_samples,
        paired_time_ratio_median=statistics.median(pairs),  # JAX time / PyTorch time, per pair
        jax_peak_bytes=_jax_peak_bytes(compiled) if case.jit else None,
        torch_peak_bytes=torch_peak_bytes(case.torch_fn),
        torch_threads=torch.get_num_threads(),
        jax_backend=jax.default_backend(),
        jax_devices=jax.device_count(),
    )


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def pytest_addoption(parser: Any) -> None:
    parser.addoption(
        "--torch-threads",
        type=int,
        default=None,
        help="torch.set_num_threads for the diffusers side (default: torch's). On a loaded 2-core box, "
        "2 OpenMP threads spin on barriers while preempted: a small step measured 2.6 s at 2 threads vs "
        "0.16 s at 1 thread (load average 6); pass 1 there.",
    )


@pytest.fixture(scope="session", autouse=True)
def _one_device() -> None:
    if jax.default_backend() == "cpu" and jax.device_count() != 1:
        pytest.exit(
            f"the benchmark needs the machine's single CPU device, JAX has {jax.device_count()}: a JAX backend "
            "was created before tests/benchmarks/conftest.py removed --xla_force_host_platform_device_count "
            "from XLA_FLAGS; run `nox -s bench` or `pytest tests/benchmarks` on its own",
            returncode=4,
        )


@pytest.fixture(scope="session", autouse=True)
def _torch_threads(request: Any) -> None:
    threads = request.config.getoption("--torch-threads")
    if threads:
        import torch

        torch.set_num_threads(threads)


@pytest.fixture
def compare(benchmark: Any) -> Callable[..., None]:
    """``compare(jax_fn, jax_args, torch_fn, info)``: the paired measurement of one case."""
    return lambda *args: run_case(benchmark, Case(*args))


def pytest_benchmark_update_json(config: Any, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """Write ``<json stem>.md`` next to ``--benchmark-json``."""
    path = config.getoption("benchmark_json")
    if path is None:
        return
    md = Path(path).with_suffix(".md")
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(markdown_table(output_json["benchmarks"], output_json.get("machine_info", {})))
