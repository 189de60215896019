"""A compiled program's optimized HLO text (``jax.stages.Compiled.as_text()``), parsed once into
the typed, immutable :class:`HloModule` that static metrics, attribution and the timeline read.

* :mod:`~harness.metrics.hlo.text`: the printed lines, shapes and source tables;
* :mod:`~harness.metrics.hlo.model`: the module, computations and instructions;
* :mod:`~harness.metrics.hlo.parse`: :func:`parse`, text -> model;
* :mod:`~harness.metrics.hlo.loops`: callees, trip counts, what runs and how often;
* :mod:`~harness.metrics.hlo.collectives`: kinds, device groups and per-kind totals;
* :mod:`~harness.metrics.hlo.cost`: matmul FLOPs and memory traffic;
* :mod:`~harness.metrics.hlo.replica_groups`: every printed form of a collective's device groups.

Pure Python.
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
