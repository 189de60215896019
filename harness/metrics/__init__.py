"""Metric extraction: static (compiled program), recompiles (jax.monitoring) and traces (jax.profiler).

Importing this package loads nothing: :mod:`~harness.metrics.hlo` (the parsed HLO module) is
JAX-free, so a report can read its constants without JAX; :mod:`~harness.metrics.static`,
:mod:`~harness.metrics.recompile` and :mod:`~harness.metrics.trace` load JAX when imported. The
names below stay importable from the package itself, each loading its module on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "hlo": (
        "CollectiveCount",
        "CollectiveStats",
        "collective_instructions",
        "collective_stats",
        "parse",
        "shape_bytes",
    ),
    "recompile": ("CompileWatcher",),
    "static": (
        "CompileTiming",
        "CostMetrics",
        "MemoryMetrics",
        "StaticMetrics",
        "analyze_compiled",
        "compile_and_analyze",
        "lower_and_compile",
    ),
    "trace": (
        "CPU_NOTE",
        "DeviceMetrics",
        "OpEvent",
        "OpSummary",
        "OpTable",
        "TraceMetrics",
        "analyze_trace",
        "capture_trace",
        "device_metrics",
        "read_trace",
        "top_ops",
    ),
}
_MODULE_OF = {name: module for module, names in _HOMES.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)


__all__ = sorted(_MODULE_OF)
