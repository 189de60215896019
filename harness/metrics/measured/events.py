"""One op execution on one device, and a trace's table of them: what every timeline reader
produces (a profiler's XSpace, :mod:`harness.metrics.measured.xspace`; Chrome trace-event JSON,
:mod:`harness.metrics.measured.chrome`) and the simulator's predicted timeline
(:mod:`harness.metrics.timeline`) is written as. Pure Python (no JAX)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from harness.vocabulary import COMPUTE, KINDS

_KIND_PREFIX = re.compile(r"^(" + "|".join(sorted(KINDS, key=len, reverse=True)) + r")(?:$|[.\-_])")


@dataclass(frozen=True)
class OpEvent:
    """One execution of one HLO op on one device; times in ns from the profile start. ``self_ns``:
    its duration minus the ops nested in it (None: nothing nested, the duration)."""

    device: int
    module: str
    op: str
    category: str
    start_ns: float
    end_ns: float
    rendezvous_wait_ns: float = 0.0
    self_ns: float | None = None

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns

    @property
    def exclusive_ns(self) -> float:
        return self.duration_ns if self.self_ns is None else self.self_ns


@dataclass(frozen=True)
class OpTable:
    """The op executions of one trace, sorted by device then start time, and the step windows
    (start, end) in ns, in order (empty when the trace has no step annotations).

    ``async_events``: spans beside the op stream (a TPU's ``Async XLA Ops`` line: an async copy
    from its start to its done), never counted as op time; ``host_offload``: the ``(module, op)``
    pairs whose HLO moves data to or from host memory (memory space ``S(5)``)."""

    platform: str
    events: tuple[OpEvent, ...]
    steps: tuple[tuple[float, float], ...] = ()
    async_events: tuple[OpEvent, ...] = ()
    host_offload: frozenset[tuple[str, str]] = frozenset()

    @property
    def devices(self) -> tuple[int, ...]:
        return tuple(sorted({e.device for e in self.events}))


def op_category(op: str, categories: Mapping[str, str] | None = None) -> str:
    """``compute``, or the collective kind of an op (``all-gather-start.3`` -> ``all-gather``).

    ``categories`` (instruction name -> kind, from ``hlo.collective_instructions``) wins over
    the name, which is all there is otherwise: a collective fused on TPU may be called
    ``fusion.65``, and only the HLO says it is a reduce-scatter.
    """
    if categories is not None and op in categories:
        return categories[op]
    if op.startswith("all-reduce-scatter"):
        return "reduce-scatter"
    m = _KIND_PREFIX.match(op)
    return m.group(1) if m else COMPUTE
