"""The catalogue's entries: every metric, once, in table order (:data:`METRICS`). Adding a metric
is one entry here plus the producer that fills its field."""

from __future__ import annotations

from typing import Any

from harness.catalogue.metric import (
    COMPILE_S,
    DOES_NOT_FIT,
    MEMORY_FIELDS,
    PREDICTED_STEP,
    RECOMPILES,
    TIME,
    TOTAL,
    TRACE_WASTED,
    TRANSFER_DIRECTIONS,
    Metric,
    collective,
    scoped,
)
from harness.vocabulary import KINDS


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
