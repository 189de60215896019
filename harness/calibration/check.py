"""Predicted against measured: how well the timeline simulator's step times match CPU measurements.

A :class:`Point` is one (variant, stage) whose record has both a predicted step
(``predicted.step_s``) and measured samples. What is compared is one measured call of the stage:
one call of its compiled program, or, for a stage whose call is a host loop around its program
(``predicted.host_loop``), the loop's program calls (``step_s x calls_per_video``); what the host
does between those calls is in no compiled program, so it counts against the prediction. A point
is *gated* (scored) when its prediction models its device count: one device, or a CPU spec measured
with as many simulated devices sharing the host's cores (``predicted.calibration.devices``); other
multi-device points are shown, not scored.

:func:`summarize` scores the gated points (Spearman rank correlation, median and worst
``|ln(predicted / measured)|``) against the bars :data:`TARGET_SPEARMAN`, :data:`TARGET_LOG_RATIO`
and :data:`TARGET_WORST_LOG_RATIO`. The CPU constants are measured, never fitted to these numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from harness import agreement
from harness.results import stats
from harness.results.record import Record
from harness.vocabulary import StageStatus

TARGET_SPEARMAN = 0.9
TARGET_LOG_RATIO = math.log(1.5)
TARGET_WORST_LOG_RATIO = math.log(3.0)


@dataclass(frozen=True)
class Point:
    variant: str
    stage: str
    devices: int
    predicted_s: float
    measured_s: float
    gated: bool
    host_loop: bool = False  # predicted_s is step_s x calls_per_video (see the module docstring)

    @property
    def ratio(self) -> float:
        """predicted / measured (> 1: the simulator is pessimistic)."""
        return self.predicted_s / self.measured_s


@dataclass(frozen=True)
class Summary:
    n: int
    spearman: float
    median_abs_log_ratio: float
    worst_abs_log_ratio: float

    @property
    def met(self) -> bool:
        """All three bars (see the module docstring); a nan Spearman (under 3 points) misses."""
        return (
            self.spearman >= TARGET_SPEARMAN
            and self.median_abs_log_ratio <= TARGET_LOG_RATIO
            and self.worst_abs_log_ratio <= TARGET_WORST_LOG_RATIO
        )

    @property
    def worst_factor(self) -> float:
        """exp(worst |ln ratio|): every prediction is within this factor of its measurement."""
        return math.exp(self.worst_abs_log_ratio)

    @property
    def typical_factor(self) -> float:
        """exp(median |ln ratio|): a typical prediction is within this factor of the measurement."""
        return math.exp(self.median_abs_log_ratio)


def points(records: Sequence[Record]) -> list[Point]:
    """Every comparable (variant, stage) of successful records, in record order."""
    out = []
    for r in records:
        if not r.ok or r.target.mode_used != "measure":
            continue
        devices = math.prod(r.target.mesh.values()) if r.target.mesh else 1
        for stage, entry in r.stages.items():
            pred = entry.predicted
            samples = entry.measured.samples if entry.measured is not None else []
            step = pred.step_s if pred is not None else None
            if (
                pred is None
                or entry.status != StageStatus.OK
                or not samples
                or not isinstance(step, int | float)
                or step <= 0
            ):
                continue
            host_loop = bool(pred.host_loop)
            predicted = float(step) * ((pred.calls_per_video or 1) if host_loop else 1)
            modelled = devices == 1 or (pred.calibration is not None and pred.calibration.devices == devices)
            out.append(Point(r.variant.name, stage, devices, predicted, stats.median(samples), modelled, host_loop))
    return out


def summarize(pts: Sequence[Point]) -> Summary | None:
    """Scores over the gated points; None when there are none."""
    gated = [p for p in pts if p.gated]
    if not gated:
        return None
    pred, meas = [p.predicted_s for p in gated], [p.measured_s for p in gated]
    worst = max(abs(math.log(p / m)) for p, m in zip(pred, meas, strict=True))
    return Summary(len(gated), agreement.spearman(pred, meas), agreement.median_abs_log_ratio(pred, meas), worst)
