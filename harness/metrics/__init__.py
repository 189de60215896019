"""Metric extraction: static (compiled program), recompiles (jax.monitoring) and traces (jax.profiler)."""

from harness.metrics.hlo import (
    KINDS,
    CollectiveCount,
    CollectiveStats,
    collective_instructions,
    collective_stats,
    shape_bytes,
)
from harness.metrics.recompile import CompileWatcher
from harness.metrics.static import (
    CompileTiming,
    CostMetrics,
    MemoryMetrics,
    StaticMetrics,
    analyze_compiled,
    compile_and_analyze,
    lower_and_compile,
)
from harness.metrics.trace import (
    CPU_NOTE,
    DeviceMetrics,
    OpEvent,
    OpSummary,
    OpTable,
    TraceMetrics,
    analyze_trace,
    capture_trace,
    device_metrics,
    read_trace,
    top_ops,
)

__all__ = [
    "CPU_NOTE",
    "KINDS",
    "CollectiveCount",
    "CollectiveStats",
    "CompileTiming",
    "CompileWatcher",
    "CostMetrics",
    "DeviceMetrics",
    "MemoryMetrics",
    "OpEvent",
    "OpSummary",
    "OpTable",
    "StaticMetrics",
    "TraceMetrics",
    "analyze_compiled",
    "analyze_trace",
    "capture_trace",
    "collective_instructions",
    "collective_stats",
    "compile_and_analyze",
    "device_metrics",
    "lower_and_compile",
    "read_trace",
    "shape_bytes",
    "top_ops",
]
