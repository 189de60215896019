"""The metric reference: every metric a record's stage flattens to (:mod:`harness.results.metric_names`),
its family, unit and how the gate compares it (:data:`harness.results.compare.CATALOG`), and what it
is (:data:`DEFINITIONS`, until the metric catalogue carries definitions itself).
``tests/harness/docgen/test_metrics.py`` fails when a metric has no definition here."""

from __future__ import annotations

import fnmatch

from harness.docgen.md import code, page, table
from harness.results.compare import GATED_KINDS, spec_for
from harness.results.metric_names import METRICS

# fnmatch pattern -> definition; the first match wins.
DEFINITIONS: tuple[tuple[str, str], ...] = (
    ("time", "Wall time of one call of the stage, per repeat after warm-up (raw samples; reports show the median)."),
    ("recompiles", "XLA compilations during the timed repeats (jax.monitoring); anything above 0 is a recompile."),
    (
        "transfers.*",
        "Implicit host/device transfers in one untimed call after the repeats, by direction (jax's transfer guard).",
    ),
    ("collectives.total.count", "Collective ops in the compiled program, all kinds."),
    ("collectives.total.bytes", "Bytes the program's collectives move per device, all kinds."),
    ("collectives.*.count", "Collective ops of this kind in the compiled program (async start/done pairs count once)."),
    ("collectives.*.bytes", "Bytes collectives of this kind move per device (their operands' sizes)."),
    ("memory.argument_bytes", "Per-device bytes of the program's arguments (compiled memory_analysis)."),
    ("memory.output_bytes", "Per-device bytes of the program's outputs."),
    ("memory.temp_bytes", "Per-device scratch bytes the program allocates."),
    ("memory.peak_bytes", "Per-device peak bytes the compiler reports for the program."),
    ("memory.bound_bytes", "Per-device upper bound: arguments + outputs + temporaries - aliased bytes."),
    ("memory.alias_bytes", "Per-device bytes of outputs aliased to (donated) arguments."),
    ("memory.generated_code_bytes", "Size of the generated code."),
    ("cost.flops", "FLOPs per device of the compiled program (XLA cost_analysis)."),
    ("cost.bytes_accessed", "Bytes per device the program reads and writes (XLA cost_analysis)."),
    ("cost.transcendentals", "Transcendental ops per device (XLA cost_analysis)."),
    ("analytic_flops", "FLOPs of the stage computed from the model config (ltx2's analytic estimate), whole model."),
    ("compile_s", "Seconds to lower and compile the stage (as it happened: cache hits are fast)."),
    ("compile.cold_s", "First compile's seconds when it missed the persistent compilation cache."),
    ("compile.warm_s", "Seconds of a recompile with JAX's in-memory caches cleared, served from the disk cache."),
    ("compile.warm_misses", "Persistent-cache misses of that recompile: above 0 is an unexpected cache miss."),
    ("compile.first_hit", "1 when the first compile was served from the persistent cache."),
    ("does_not_fit", "1 when the stage's memory per device exceeds the device's (where the fit is known)."),
    ("trace.compute_s", "Traced device time in compute ops per step (jax.profiler trace)."),
    ("trace.exposed_collective_s", "Traced collective time not overlapped by compute, per step."),
    ("trace.idle_s", "Traced device time with nothing running, per step."),
    ("trace.wasted_fraction", "(exposed collective + idle) / the traced step."),
    ("predicted.step_s", "The step simulated from the scheduled program on the target's spec (a prediction)."),
    ("predicted.video_s", "Predicted seconds per video (the step times the steps a video takes)."),
    ("predicted.exposed_all_gather_fraction", "Predicted all-gather time not overlapped by compute, over the step."),
    ("predicted.wasted_fraction", "Predicted (exposed collective + idle) / the step."),
)


def definition(metric: str) -> str | None:
    return next((text for pattern, text in DEFINITIONS if fnmatch.fnmatchcase(metric, pattern)), None)


def _rule(metric: str) -> str:
    spec = spec_for(metric)
    if spec.kind not in GATED_KINDS:
        return "shown, never gated"
    if spec.kind == "timing":
        return "ratio of medians beyond [gate] timing_ratio and a significant Mann-Whitney test"
    if spec.kind == "monotonic":
        return "any increase regresses"
    if spec.kind == "exact" or not spec.tolerance:
        return "must equal the baseline (or within [gate.tolerances])"
    return f"relative change beyond {spec.tolerance:g} (or [gate.tolerances])" + (
        " when present" if spec.optional else ""
    )


def rows() -> list[list[str]]:
    out = []
    for fam, names in METRICS.items():
        for metric in names:
            spec = spec_for(metric)
            out.append([code(metric), fam, spec.unit, spec.kind, _rule(metric), definition(metric) or ""])
    return out


def render() -> str:
    intro = (
        "Each stage of a record flattens to these metric names (`collectives.<kind>.*` for every collective "
        "kind). The gate compares each by its kind: `timing` (raw samples), `exact` (counts), `relative` "
        "(deterministic amounts within a tolerance), `monotonic` (must not grow), `info` (shown only). "
        "`predicted.*` metrics are model outputs, labelled predicted wherever shown."
    )
    return page(
        "Metrics",
        "harness/results/metric_names.py, harness/results/compare.py CATALOG",
        intro,
        table(["metric", "family", "unit", "kind", "how it is gated", "definition"], rows()),
        wide=True,
    )
