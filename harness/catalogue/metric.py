"""The metric catalogue's vocabulary: the :class:`Metric` record, the families, kinds and gate
rules, and the names other modules build metric names from (a collective's, a scope's). A leaf."""

from __future__ import annotations

import re
from dataclasses import dataclass

FAMILIES = ("measured", "static", "trace", "predicted")
KIND_NAMES = ("deterministic", "timing", "info")
RULES = ("timing", "exact", "relative", "monotonic", "info")
GATED_RULES = ("timing", "exact", "relative", "monotonic")


@dataclass(frozen=True)
class Metric:
    """One metric of a stage (see the module docstring for the fields)."""

    name: str
    family: str
    unit: str  # "s", "bytes", "count", "flops", "fraction", "" (a flag)
    kind: str  # one of KIND_NAMES
    rule: str  # one of RULES
    label: str
    definition: str
    better: str = "lower"
    tolerance: float = 0.0  # default relative tolerance (exact and relative rules)
    optional: bool = False  # may be absent from a run for a good reason (a warm start has no cold compile)
    # Its chain of typed fields (``devices.<field>``: a trace's, mean over devices, per step); None: computed.
    path: str | None = None
    divisor: float = 1.0  # the recorded value over this is the metric (ns -> s: 1e9)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES or self.kind not in KIND_NAMES or self.rule not in RULES:
            raise ValueError(
                f"metric {self.name!r}: family, kind or rule unknown ({self.family}, {self.kind}, {self.rule})"
            )
        if (self.kind == "info") != (self.rule == "info") or (self.rule == "timing") > (self.kind == "timing"):
            raise ValueError(f"metric {self.name!r}: kind {self.kind!r} does not go with rule {self.rule!r}")

    @property
    def gated(self) -> bool:
        """Whether the gate can fail on it at all (timings only with ``--timings on``)."""
        return self.rule in GATED_RULES


# The names code reads by name (the report's summary columns, the flattener's computed metrics).
TIME, RECOMPILES, DOES_NOT_FIT, COMPILE_S = "time", "recompiles", "does_not_fit", "compile_s"
MEMORY_BOUND, MEMORY_PEAK, TRACE_WASTED = "memory.bound_bytes", "memory.peak_bytes", "trace.wasted_fraction"
# The metrics (and prefixes) a CPU program's backend passes decide, so the host's instruction set
# (:func:`host_codegen`): the memory XLA:CPU assigned, its cost, the traffic; and a variant's
# accuracy against its reference (float32 layouts differ by a few roundings, ~1e-8 relative, of the
# host's kernels: not measured across classes, so kept per class too).
HOST_CODEGEN = ("memory.temp_bytes", MEMORY_PEAK, MEMORY_BOUND, "cost.", "traffic.", "accuracy.")
PREDICTED_STEP = "predicted.step_s"
ACCURACY_L2, ACCURACY_MAX = "accuracy.rel_l2", "accuracy.max_abs"
TOTAL = "total"  # the collectives of every kind together


def collective(kind: str, what: str) -> str:
    """The metric of one collective kind (or :data:`TOTAL`): ``what`` is ``count`` or ``bytes``."""
    return f"collectives.{kind}.{what}"


MEMORY_FIELDS = {
    "argument_bytes": "the program's arguments (parameters, inputs) per device",
    "output_bytes": "the program's outputs per device",
    "temp_bytes": "scratch the program allocates per device",
    "peak_bytes": "the compiler's peak memory per device",
    "bound_bytes": "arguments + outputs + temporaries - aliased, per device: the memory the stage needs",
    "alias_bytes": "outputs that reuse an argument's buffer (donation), per device",
    "generated_code_bytes": "the compiled code's size",
}
TRANSFER_DIRECTIONS = ("host_to_device", "device_to_host", "device_to_device")


SCOPE, PREDICTED_SCOPE = "scope.", "predicted.scope."


def host_codegen(metric: str) -> bool:
    """Whether a CPU program's ``metric`` depends on the host XLA:CPU compiled it on: read after
    XLA:CPU's backend passes, which compile for the host's instruction set (fusion, layout, buffer
    assignment), so another CPU gives another program. Collectives (the SPMD partitioner's), argument
    and output bytes (shapes), analytic FLOPs and recompile counts do not depend on it (checked against
    two classes in benchmarks/results/cpu-machine-class-2026-11-29.md); :data:`HOST_CODEGEN` and a
    scope's traffic and FLOPs do. A TPU or GPU target's program is compiled for the target, whatever
    the host."""
    scoped = metric.startswith(SCOPE) and metric.endswith((".traffic_bytes", ".flops"))
    return scoped or metric.startswith(HOST_CODEGEN)


_SCOPED = re.compile(r"(predicted\.)?scope\.[^.]+\.(collectives\.[^.]+\.)?")


def scoped(scope: str, what: str, family: str = "") -> str:
    """A metric of one model scope (``transformer/attn1/qkv``), read by its template entry (:func:`get`)."""
    return f"{family}.{SCOPE}{scope}.{what}" if family else f"{SCOPE}{scope}.{what}"


def template(name: str) -> str:
    """The catalogue name a per-scope metric is read by (``scope.<scope>.flops``); other names as they are."""
    if (m := _SCOPED.match(name)) is None or m.end() == len(name):
        return name
    return f"{m.group(1) or ''}{SCOPE}<scope>.{'collectives.<kind>.' if m.group(2) else ''}{name[m.end() :]}"
