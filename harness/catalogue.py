"""The metric catalogue: every metric a record's stage flattens to, declared once.

A :class:`Metric` says what one flat, dotted metric name (``time``, ``memory.peak_bytes``,
``collectives.all-gather.count``, ``predicted.step_s``) is: its record family, unit, kind, which
way is better, how the gate compares it and with what default tolerance, a short label, a one-line
definition, and where its value sits in its typed family (``path``: a chain of fields of
:mod:`harness.results.families`). Everything that lists or describes metrics derives from
:data:`METRICS`: the flattening (:func:`harness.results.compare.flatten_stage`), the gate's rules
and tolerances, the manifest's tolerance keys, the CSV's columns, the page's labels and tooltips,
the CLI's tables and the docs' metric reference. A leaf: imports only :mod:`harness.vocabulary`.

API: :data:`METRICS` (table order), :data:`NAMES`; :func:`get` (an uncatalogued name reads as
:data:`UNKNOWN`: shown, never gated), :func:`rank`, :func:`of_family`; :func:`tolerance_forms`,
:func:`tolerance_names`, :func:`split_tolerance_key` (the ``[gate] tolerances`` keys: a metric, a
dotted prefix, or a collective metric without its kind, optionally after its family and a stage).

Adding a metric is one entry here plus the producer that fills its field: with a ``path`` nothing
else changes; a metric with ``path=None`` is computed by the flattener (its definition says how).

Fields: ``kind``: ``deterministic`` (a function of the compiled program and the spec), ``timing``
(measured on this machine: gated only against the same kind of machine) or ``info`` (never gated).
``rule``: ``timing`` (raw samples, ratio of medians + Mann-Whitney), ``exact`` (a count that must not
change), ``relative`` (within ``tolerance``), ``monotonic`` (any increase regresses) or ``info``.
``better``: ``lower``, ``higher`` (the gate reads a drop as the regression) or ``""`` (neither).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
from dataclasses import dataclass
from typing import Any

from harness.vocabulary import KINDS

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


def _collectives() -> list[Metric]:
    out = []
    for kind in (*KINDS, TOTAL):
        what = "all collectives" if kind == TOTAL else f"{kind} collectives"
        out.append(
            Metric(
                collective(kind, "count"),
                "static",
                "count",
                "deterministic",
                "exact",
                f"{kind} count",
                f"{what} one call of the compiled program runs, loops counted by trip count (async start/done "
                "pairs count once); a kind absent from a stage that has collectives ran 0 times",
            )
        )
        out.append(
            Metric(
                collective(kind, "bytes"),
                "static",
                "bytes",
                "deterministic",
                "relative",
                f"{kind} bytes",
                f"operand bytes of {what} per call, per device",
            )
        )
    return out


def _memory() -> list[Metric]:
    return [
        Metric(
            f"memory.{name}",
            "static",
            "bytes",
            "info" if name in ("alias_bytes", "generated_code_bytes") else "deterministic",
            "info" if name in ("alias_bytes", "generated_code_bytes") else "relative",
            name.removesuffix("_bytes").replace("_", " ") + " memory",
            definition + " (memory_analysis)",
            tolerance=0.0 if name in ("alias_bytes", "generated_code_bytes") else 0.02,
            path=f"memory.{name}",
        )
        for name, definition in MEMORY_FIELDS.items()
    ]


SCOPE, PREDICTED_SCOPE = "scope.", "predicted.scope."
_SCOPED = re.compile(r"(predicted\.)?scope\.[^.]+\.(collectives\.[^.]+\.)?")


def scoped(scope: str, what: str, family: str = "") -> str:
    """A metric of one model scope (``transformer/attn1/qkv``), read by its template entry (:func:`get`)."""
    return f"{family}.{SCOPE}{scope}.{what}" if family else f"{SCOPE}{scope}.{what}"


def template(name: str) -> str:
    """The catalogue name a per-scope metric is read by (``scope.<scope>.flops``); other names as they are."""
    if (m := _SCOPED.match(name)) is None or m.end() == len(name):
        return name
    return f"{m.group(1) or ''}{SCOPE}<scope>.{'collectives.<kind>.' if m.group(2) else ''}{name[m.end() :]}"


def _traffic() -> list[Metric]:
    """HBM traffic (on-chip buffers not counted), matmul FLOPs (loops by trip count), per device and call."""
    rows = (  # name, unit, rule, label, definition
        ("traffic.hbm_bytes", "bytes", "relative", "HBM traffic", "HBM bytes per device of one call"),
        ("cost.matmul_flops", "flops", "relative", "matmul FLOPs", "matmul FLOPs per device of one call"),
        ("scope.<scope>.traffic_bytes", "bytes", "relative", "scope HBM traffic", "HBM bytes of this scope's ops"),
        ("scope.<scope>.flops", "flops", "relative", "scope matmul FLOPs", "matmul FLOPs in this scope"),
        ("scope.<scope>.collectives.<kind>.count", "count", "exact", "scope collectives", "this kind's, here"),
        ("scope.<scope>.collectives.<kind>.bytes", "bytes", "relative", "scope collective bytes", "their bytes"),
    )
    paths = {"traffic.hbm_bytes": "memory_traffic_bytes", "cost.matmul_flops": "matmul_flops"}
    return [
        Metric(n, "static", u, "deterministic", r, lab, d, better="" if u == "flops" else "lower", path=paths.get(n))
        for n, u, r, lab, d in rows
    ]


def _predicted() -> list[Metric]:
    # A pure function of program and spec: within 0.5 % (a 2 % change fails, float sums do not) where
    # both sides were priced by the same fixed model (harness.results.compare.model_of), else shown.
    info: dict[str, Any] = dict(family="predicted", kind="deterministic", rule="relative", tolerance=0.005)
    return [
        Metric(
            PREDICTED_STEP,
            unit="s",
            label="predicted step",
            definition="one call's time on the timeline simulated from the compiled, scheduled program",
            path="step_s",
            **info,
        ),
        Metric(
            "predicted.video_s",
            unit="s",
            label="predicted per video",
            definition="predicted seconds per video: the predicted step times the calls one video makes",
            path="video_s",
            **info,
        ),
        Metric(
            "predicted.exposed_all_gather_fraction",
            unit="fraction",
            label="our exposed AG (predicted)",
            definition="all-gather time not overlapped by compute / step window, predicted",
            path="exposed_all_gather_fraction",
            **info,
        ),
        Metric(
            "predicted.exposed_collective_fraction",
            unit="fraction",
            label="our exposed collectives (predicted)",
            definition="collective time of every kind not overlapped by compute / step window, predicted",
            path="exposed_collective_fraction",
            **info,
        ),
        Metric(
            "predicted.flops_utilization",
            unit="fraction",
            label="FLOPs utilization (predicted)",
            definition="the step's FLOPs / (predicted step x the datasheet's peak FLOP/s): XProf's op-profile "
            "FLOPs utilization of the simulated step (the hardware's share of its peak the program reaches)",
            better="higher",
            path="xprof.root.flops_utilization",
            **info,
        ),
        Metric(
            "predicted.wasted_fraction",
            unit="fraction",
            label="our wasted (predicted)",
            definition="(exposed collective time + idle) / step window, predicted",
            path="wasted_fraction",
            **info,
        ),
        Metric(
            scoped("<scope>", "time_s", "predicted"),
            unit="s",
            label="predicted time of a scope",
            definition="seconds of the predicted step's critical path in this model scope (ops run or waited on)",
            **info,
        ),
    ]


def _trace() -> list[Metric]:
    """Means over the traced devices with a window: seconds per traced step, the wasted share."""
    rows = (  # name, unit, the per-device value averaged, label, definition
        ("trace.compute_s", "s", "compute_ns", "traced compute", "op time on the compute stream"),
        ("trace.exposed_collective_s", "s", "exposed_collective_ns", "traced exposed", "collectives not hidden"),
        ("trace.idle_s", "s", "idle_ns", "traced idle", "time with no op running"),
        (TRACE_WASTED, "fraction", "wasted_fraction", "our wasted (traced)", "(exposed collectives + idle) / window"),
    )
    mean = "mean over the traced devices (seconds: per traced step)"
    return [
        Metric(n, "trace", u, "info", "info", lab, f"{d}; {mean}", path=f"devices.{k}", divisor=1e9 if u == "s" else 1)
        for n, u, k, lab, d in rows
    ]


def _accuracy() -> list[Metric]:
    """Output vs the reference's (run/accuracy.py): reordered sums move the rel L2 of n roundings ~1/sqrt(2n),
    one more rounding each sqrt(2): 25 % lies between. The compile-only probe (run/probe.py): never gated."""
    of = " of the output vs its reference variant's, on the reference's seeded inputs"
    on = " of the variant's knobs on CPU, small config (accuracy probe: the step's update vs float32's"
    rows = (  # name, family, unit, kind, rule, tolerance, label, definition
        ("rel_l2", "measured", "fraction", "deterministic", "relative", 0.25, "rel L2 vs ref", "rel L2" + of),
        ("max_abs", "measured", "", "info", "info", 0.0, "max abs vs ref", "max |out - ref|" + of),
        ("probe_rel_l2", "static", "fraction", "info", "info", 0.0, "rel L2 (CPU probe)", "rel L2" + on + ")"),
        ("probe_ratio", "static", "", "info", "info", 0.0, "x plain bf16 (CPU probe)", "rel L2 / bf16's" + on),
    )
    return [
        Metric(f"accuracy.{n}", f, u, k, r, lab, d, "lower", t, True, f"accuracy.{n}".replace(".probe_", "_probe."))
        for n, f, u, k, r, t, lab, d in rows
    ]


METRICS: tuple[Metric, ...] = (
    Metric(
        TIME,
        "measured",
        "s",
        "timing",
        "timing",
        "time",
        "wall time of one call of the stage, per repeat after warm-up (raw samples; reports show the median)",
    ),
    Metric(
        RECOMPILES,
        "measured",
        "count",
        "deterministic",
        "monotonic",
        "recompiles",
        "XLA compilations during the timed repeats (jax.monitoring); anything above 0 is a recompile",
        path="recompiles.count",
    ),
    Metric(
        DOES_NOT_FIT,
        "static",
        "",
        "deterministic",
        "monotonic",
        "does not fit",
        "1 when the stage's memory exceeds the device's, 0 where the fit is known",
    ),
    *_collectives(),
    *_memory(),
    Metric(
        "cost.flops",
        "static",
        "flops",
        "deterministic",
        "relative",
        "FLOPs",
        "FLOPs per device of one call of the compiled program (XLA cost_analysis)",
        better="",
        tolerance=0.01,
        path="cost.flops",
    ),
    Metric(
        "cost.bytes_accessed",
        "static",
        "bytes",
        "deterministic",
        "relative",
        "bytes accessed",
        "bytes per device one call reads and writes (XLA cost_analysis)",
        tolerance=0.01,
        path="cost.bytes_accessed",
    ),
    *_traffic(),
    Metric(
        "cost.transcendentals",
        "static",
        "count",
        "info",
        "info",
        "transcendentals",
        "transcendental ops per device of one call (XLA cost_analysis)",
        better="",
        path="cost.transcendentals",
    ),
    Metric(
        "analytic_flops",
        "static",
        "flops",
        "deterministic",
        "relative",
        "analytic FLOPs",
        "the stage's FLOPs computed from the model config (ltx2's analytic estimate), whole model",
        better="",
        path="analytic_flops",
    ),
    Metric(
        "compile.cold_s",
        "static",
        "s",
        "timing",
        "relative",
        "cold compile",
        "the first compile's seconds when it missed the persistent compilation cache (only then)",
        tolerance=0.5,
        optional=True,
        path="compile_cache.cold_s",
    ),
    Metric(
        "compile.first_hit",
        "static",
        "",
        "info",
        "info",
        "first compile hit the cache",
        "1 when the first compile was served by the persistent cache",
        better="",
        path="compile_cache.first.hit",
    ),
    Metric(
        "compile.warm_misses",
        "static",
        "count",
        "deterministic",
        "monotonic",
        "warm cache misses",
        "persistent-cache misses of that recompile: above 0 is an unexpected cache miss",
        path="compile_cache.warm_misses",
    ),
    Metric(
        "compile.warm_s",
        "static",
        "s",
        "timing",
        "relative",
        "warm compile",
        "seconds of a recompile with JAX's in-memory caches cleared, served from the disk cache",
        tolerance=0.5,
        path="compile_cache.warm_s",
    ),
    Metric(
        COMPILE_S,
        "static",
        "s",
        "info",
        "info",
        "compile",
        "seconds to lower and compile the stage, as it happened (cache hits are fast)",
        path="timing.compile_seconds",
    ),
    *_trace(),
    *_predicted(),
    *_accuracy(),
    *(
        Metric(
            f"transfers.{d}",
            "measured",
            "count",
            "info",
            "info",
            d.replace("_", " ") + " transfers",
            f"implicit {d.replace('_', '-')} transfers in one untimed call after the repeats (jax's transfer guard)",
            path=f"transfers.{d}",
        )
        for d in TRANSFER_DIRECTIONS
    ),
)
NAMES: dict[str, Metric] = {m.name: m for m in METRICS}
UNKNOWN = Metric("(unknown)", "static", "", "info", "info", "", "not in the catalogue: shown, never gated", better="")


def get(name: str) -> Metric:
    """The catalogue's entry for ``name``; an uncatalogued name (a collective kind an older record
    has) reads as :data:`UNKNOWN` under its own name: shown, never gated."""
    metric = NAMES.get(name)
    if metric is not None:
        return metric
    if (tpl := NAMES.get(template(name))) is not None:
        return dataclasses.replace(tpl, name=name, label=f"{tpl.label}: {name}", path=None)
    if name.startswith("collectives.") and (kin := NAMES.get(collective(TOTAL, name.rsplit(".", 1)[-1]))):
        return Metric(name, kin.family, kin.unit, kin.kind, kin.rule, name, kin.definition, kin.better, kin.tolerance)
    return Metric(name, family(name), "", "info", "info", name, UNKNOWN.definition, better="")


def rank(name: str) -> int:
    """A metric's place in table order (uncatalogued ones last)."""
    return _RANK.get(name, len(_RANK))


_RANK = {m.name: i for i, m in enumerate(METRICS)}


def of_family(fam: str) -> tuple[Metric, ...]:
    """The catalogued metrics of one record family, in table order."""
    return tuple(m for m in METRICS if m.family == fam)


def family(name: str) -> str:
    """The record family (``measured``, ``static``, ``trace``, ``predicted``) a metric comes from."""
    if name in NAMES:
        return NAMES[name].family
    prefix = name.split(".")[0]
    if prefix in ("trace", "predicted"):
        return prefix
    return "measured" if prefix in ("time", "recompiles", "transfers", "accuracy") else "static"


# --------------------------------------------------------------------------- tolerance keys


def tolerance_forms(name: str) -> list[str]:
    """The tolerance keys (without a stage) that apply to a metric, most specific first."""
    parts = name.split(".")
    names = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
    if parts[0] == "collectives" and len(parts) == 3:
        names.insert(1, f"collectives.{parts[2]}")
    fam = family(name)
    forms = [form for n in names for form in (n if n == fam or n.startswith(f"{fam}.") else f"{fam}.{n}", n)]
    return list(dict.fromkeys(forms))


@functools.cache
def tolerance_names() -> frozenset[str]:
    """Every tolerance key (without a stage) that names at least one metric."""
    return frozenset(form for m in METRICS for form in tolerance_forms(m.name))


def split_tolerance_key(key: str) -> tuple[str | None, str]:
    """``(stage or None, the metric part)`` of a tolerance key; ValueError if it names no metric.
    A key that names no metric would silently gate nothing, so the manifest rejects it."""
    names = tolerance_names()
    if key in names:
        return None, key
    stage, _, rest = key.partition(".")
    if rest in names and stage not in FAMILIES and stage not in {n.split(".")[0] for n in names}:
        return stage, rest
    close = difflib.get_close_matches(rest if rest in names else key, sorted(names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"matches no metric (a metric name or prefix, e.g. 'time', 'static.memory', "
        f"'collectives.count', optionally after a stage name){hint}"
    )
