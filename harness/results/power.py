"""The timing gate's error rates on this machine, from measured runs, and the settings that meet a target.

Input: several records per variant (each one run of the same code: an A/A history). For each gated
timing (variant, stage) the runs' samples are resampled (:func:`harness.results.stats.gate_error_rates`)
over a grid of repeats, timing thresholds and alphas. The gate fails when any of its timings fires,
so its false-alarm rate is ``1 - prod(1 - fa_i)`` over the timings (independent timings assumed)
and its power to see one slowed stage is the lowest power of any timing (the slowdown may hit the
noisiest one). :func:`recommend` picks the cheapest setting that meets the target.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harness.results import stats
from harness.results.record import Record

Key = tuple[str, str]  # (variant, stage)


@dataclass(frozen=True)
class Cell:
    """One setting of the gate and its rates, for the whole gate and per timing."""

    repeats: int
    threshold: float
    alpha: float
    false_alarm: float  # gate level: any timing fires on an A/A pair
    power: float  # gate level: the weakest timing's chance to catch the slowdown
    per_timing: Mapping[Key, stats.ErrorRates]

    def meets(self, false_alarm: float, power: float) -> bool:
        return self.false_alarm <= false_alarm and self.power >= power


def sample_runs(records: Sequence[Record], dropped: list[Key] | None = None) -> dict[Key, list[list[float]]]:
    """(variant, stage) -> one list of timing samples per ok record that has them. A run whose samples
    were taken under load (``measured.load.loaded``: other processes kept a quarter of the cores busy,
    :mod:`harness.run.load`) is left out: the error rates are the machine's own noise, not another
    job's; each one left out is appended to ``dropped``."""
    out: dict[Key, list[list[float]]] = {}
    for r in records:
        if not r.ok:
            continue
        for stage, entry in r.stages.items():
            xs = entry.measured.samples if entry.measured is not None else []
            if xs and entry.measured is not None and entry.measured.load and entry.measured.load.loaded:
                if dropped is not None:
                    dropped.append((r.variant.name, stage))
            elif xs:
                out.setdefault((r.variant.name, stage), []).append(xs)
    return out


def grid(
    runs: Mapping[Key, Sequence[Sequence[float]]],
    repeats: Sequence[int],
    thresholds: Sequence[float],
    alphas: Sequence[float],
    slowdown: float,
    *,
    trials: int = 400,
    seed: int = 0,
) -> list[Cell]:
    """Every (repeats, threshold, alpha) setting with its gate-level and per-timing rates."""
    if not runs:
        raise ValueError("no timing samples: the records have no measured stage")
    per_key = {
        key: stats.gate_error_rates(pools, repeats, thresholds, alphas, slowdown, trials=trials, seed=seed)
        for key, pools in runs.items()
    }
    cells = []
    for i, first in enumerate(next(iter(per_key.values()))):
        rates = {key: cell[i] for key, cell in per_key.items()}
        fa = 1.0 - math.prod(1.0 - r.false_alarm for r in rates.values())
        power = min(r.power for r in rates.values())
        cells.append(Cell(first.repeats, first.threshold, first.alpha, fa, power, rates))
    return cells


def recommend(cells: Sequence[Cell], false_alarm: float, power: float) -> Cell | None:
    """The fewest repeats meeting the target; among those the largest threshold (the least sensitive to
    a drift of the machine), then the smallest alpha. None if no setting of the grid meets it."""
    ok = [c for c in cells if c.meets(false_alarm, power)]
    return min(ok, key=lambda c: (c.repeats, -c.threshold, c.alpha)) if ok else None


def find(cells: Sequence[Cell], repeats: int, threshold: float, alpha: float) -> Cell | None:
    return next(
        (
            c
            for c in cells
            if c.repeats == repeats and math.isclose(c.threshold, threshold) and math.isclose(c.alpha, alpha)
        ),
        None,
    )
