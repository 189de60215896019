"""The metric names a record's stage flattens to (:func:`harness.results.compare.flatten_stage`), and
which ``[gate] tolerances`` keys name them. Data only: the manifest checks its tolerances with it
without loading the comparison (or JAX).

A tolerance key is a metric's name, a dotted prefix of it, or a collective metric without its kind
(``collectives.count``), optionally after its record family (``static.memory``) and a stage name
(``denoise_step.static.memory``), exactly the forms :func:`harness.results.compare.tolerance_keys`
looks up. A key that names no metric would silently gate nothing, so the manifest rejects it.
"""

from __future__ import annotations

import difflib
import functools

from harness.vocabulary import KINDS

FAMILIES = ("measured", "static", "trace", "predicted")
MEMORY_FIELDS = (
    "argument_bytes",
    "output_bytes",
    "temp_bytes",
    "peak_bytes",
    "bound_bytes",
    "alias_bytes",
    "generated_code_bytes",
)
TRANSFER_DIRECTIONS = ("host_to_device", "device_to_host", "device_to_device")

# family -> the metric names a stage entry of that family can have.
METRICS: dict[str, tuple[str, ...]] = {
    "measured": ("time", "recompiles", *(f"transfers.{d}" for d in TRANSFER_DIRECTIONS)),
    "static": (
        *(f"collectives.{k}.{f}" for k in (*KINDS, "total") for f in ("count", "bytes")),
        *(f"memory.{m}" for m in MEMORY_FIELDS),
        "cost.flops",
        "cost.bytes_accessed",
        "cost.transcendentals",
        "analytic_flops",
        "compile_s",
        "compile.cold_s",
        "compile.warm_s",
        "compile.warm_misses",
        "compile.first_hit",
        "does_not_fit",
    ),
    "trace": ("trace.compute_s", "trace.exposed_collective_s", "trace.idle_s", "trace.wasted_fraction"),
    "predicted": (
        "predicted.step_s",
        "predicted.video_s",
        "predicted.exposed_all_gather_fraction",
        "predicted.wasted_fraction",
    ),
}


def family(metric: str) -> str:
    """The record family (``measured``, ``static``, ``trace``, ``predicted``) a metric comes from."""
    if metric == "time" or metric.startswith(("recompiles", "transfers.")):
        return "measured"
    for fam in ("trace", "predicted"):
        if metric.startswith(f"{fam}."):
            return fam
    return "static"


def tolerance_forms(metric: str) -> list[str]:
    """The tolerance keys (without a stage) that apply to ``metric``, most specific first."""
    parts = metric.split(".")
    names = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
    if parts[0] == "collectives" and len(parts) == 3:
        names.insert(1, f"collectives.{parts[2]}")
    fam = family(metric)
    forms = [form for n in names for form in (n if n == fam or n.startswith(f"{fam}.") else f"{fam}.{n}", n)]
    return list(dict.fromkeys(forms))


@functools.cache
def tolerance_names() -> frozenset[str]:
    """Every tolerance key (without a stage) that names at least one metric."""
    return frozenset(form for names in METRICS.values() for metric in names for form in tolerance_forms(metric))


def split_tolerance_key(key: str) -> tuple[str | None, str]:
    """``(stage or None, the metric part)`` of a tolerance key; ValueError if it names no metric."""
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
