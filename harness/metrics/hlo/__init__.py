"""A compiled program's optimized HLO text (``jax.stages.Compiled.as_text()``), parsed once into
the typed, immutable :class:`HloModule` that static metrics, attribution and the timeline read.
Pure Python; its modules are listed in ARCHITECTURE.md (``harness/metrics/hlo/``).
"""

from __future__ import annotations

from harness.metrics.hlo.collectives import (
    KINDS,
    CollectiveCount,
    collective_instructions,
    collective_stats,
)
from harness.metrics.hlo.cost import matmul_flops, memory_traffic_bytes
from harness.metrics.hlo.model import HloModule
from harness.metrics.hlo.parse import parse
from harness.metrics.hlo.text import shape_bytes

__all__ = [
    "KINDS",
    "CollectiveCount",
    "HloModule",
    "collective_instructions",
    "collective_stats",
    "matmul_flops",
    "memory_traffic_bytes",
    "parse",
    "shape_bytes",
]
