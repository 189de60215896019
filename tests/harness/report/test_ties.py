"""Orderings of predicted steps against the constants' uncertainty: an order that flips is a tie."""

from __future__ import annotations

from harness.families import Predicted
from harness.report.predicted import interval_text
from harness.results.uncertain import Uncertain, ordering, ranking_text


def _u(base: float, fast: float, slow: float, spec: str = "v6e:2x4", **more: float) -> Uncertain:
    return Uncertain(base, (min(fast, base), max(slow, base)), {"base": base, "fast": fast, "slow": slow, **more}, spec)


def test_same_spec_orders_hold_only_at_every_bound() -> None:
    a, b = _u(0.4326, 0.40, 0.47), _u(0.4361, 0.39, 0.48)  # b gains more from fast constants: flips
    assert ordering(a, b) == "tie" and ordering(b, a) == "tie"
    c = _u(0.50, 0.46, 0.56)  # slower at every bound, though its interval overlaps a's
    assert ordering(a, c) == "<" and ordering(c, a) == ">"
    d = _u(0.60, 0.55, 0.65, **{"op_overhead_s:fast": 0.40})  # the extra point is not shared: ignored
    assert ordering(a, d) == "<"


def test_across_specs_intervals_decide() -> None:
    a, b = _u(1.0, 0.9, 1.1, spec="v6e:2x4"), _u(1.3, 1.2, 1.4, spec="tpu7x:2x2x1")
    assert ordering(a, b) == "<" and ordering(b, a) == ">"
    assert ordering(a, _u(1.05, 1.0, 1.2, spec="tpu7x:2x2x1")) == "tie"
    assert ordering(Uncertain(1.0), Uncertain(2.0)) == "<"  # no intervals: the steps alone


def test_the_ranking_marks_ties_between_neighbours() -> None:
    items = [("naive", _u(0.60, 0.55, 0.65)), ("b", _u(0.4361, 0.39, 0.48)), ("a", _u(0.4326, 0.40, 0.47))]
    assert ranking_text(items) == "a \u2248 b < naive"
    assert interval_text(items[0][1]) == "550 ms..650 ms"
    assert interval_text(None) == "-"


def test_uncertain_reads_a_predicted_object_and_scales_it() -> None:
    predicted = {
        "step_s": 0.5,
        "spec": {"name": "v6e:2x4"},
        "uncertainty": {"interval_s": [0.4, 0.7], "points_s": {"base": 0.5, "fast": 0.4, "slow": 0.7}},
    }
    u = Uncertain.of(Predicted.from_dict(predicted), scale=2.0)
    assert u == Uncertain(1.0, (0.8, 1.4), {"base": 1.0, "fast": 0.8, "slow": 1.4}, "v6e:2x4")
    assert Uncertain.of(Predicted(step_s=None)) is None and Uncertain.of(None) is None
