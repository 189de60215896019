"""A predicted step with its interval, and what an order between two such steps can claim.

Shared by the report's rankings and the layout search's table: an order holds only where it
survives the constants' stated uncertainty; otherwise the two are a tie.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harness.families import Predicted


@dataclass(frozen=True)
class Uncertain:
    """A predicted step with its interval (:func:`harness.metrics.timeline.uncertainty`): ``points_s``
    the step at each evaluation of the constants' bounds, ``spec`` the spec they were priced on."""

    step_s: float
    interval_s: tuple[float, float] | None = None
    points_s: Mapping[str, float] = field(default_factory=dict)
    spec: str = ""

    @classmethod
    def of(cls, predicted: Predicted | None, scale: float = 1.0) -> Uncertain | None:
        """From a stage's ``predicted`` family (times multiplied by ``scale``); None without a step."""
        if predicted is None or not isinstance(step := predicted.step_s, int | float):
            return None
        unc = predicted.uncertainty
        interval = unc.interval_s if unc else None
        points = {str(k): float(v) * scale for k, v in ((unc.points_s if unc else None) or {}).items()}
        return cls(
            float(step) * scale,
            (float(interval[0]) * scale, float(interval[1]) * scale) if interval else None,
            points,
            predicted.spec_name or "",
        )


def ordering(a: Uncertain, b: Uncertain) -> str:
    """``<`` (a faster), ``>`` or ``tie``: on the same spec, an order holds only if it holds at every
    evaluation of the constants' bounds both were priced at (the constants are shared, so their
    errors move both steps together); across specs, only if the intervals do not overlap; without
    intervals, by the steps alone."""
    if a.spec and a.spec == b.spec and a.points_s and b.points_s:
        common = [k for k in a.points_s if k in b.points_s]
        signs = {(a.points_s[k] > b.points_s[k]) - (a.points_s[k] < b.points_s[k]) for k in common}
        if signs == {-1}:
            return "<"
        return ">" if signs == {1} else "tie"
    if a.interval_s and b.interval_s:
        if a.interval_s[1] < b.interval_s[0]:
            return "<"
        return ">" if b.interval_s[1] < a.interval_s[0] else "tie"
    return "<" if a.step_s < b.step_s else ">" if a.step_s > b.step_s else "tie"


def ranking_text(items: Sequence[tuple[str, Uncertain]]) -> str:
    """Names fastest first, ``<`` between a pair whose order survives the constants' uncertainty and
    ``≈`` between a tie (``a < b ≈ c``)."""
    ranked = sorted(items, key=lambda kv: (kv[1].step_s, kv[0]))
    out = ranked[0][0] if ranked else ""
    for (_, prev), (name, cur) in zip(ranked, ranked[1:], strict=False):
        out += (" ≈ " if ordering(prev, cur) == "tie" else " < ") + name
    return out
