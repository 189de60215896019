"""The CPU gate's accuracy metrics (a variant's output against its reference's) against the committed
baseline, per machine class."""

from __future__ import annotations

import copy

from harness.results import gate
from tests.harness.results.test_gate import CLASSES, TRILLIUM, _committed, evaluate


def test_a_cpu_variants_accuracy_is_gated_within_its_machine_class():
    """The committed CPU baseline holds each sharded step's accuracy against the unsharded one
    (float32: ~1e-8 relative; the unrolled loop is bit-identical to the scan) on the class that
    measured it; a doubled deviation fails there, and is shown, not gated, against another class."""
    base = [r for r in _committed("nightly.jsonl") if r["variant"]["name"] == TRILLIUM]
    (intel,) = [r for r in base if r["machine"]["cpu"] == CLASSES[1]]
    acc = intel["stages"]["denoise_step"]["measured"]["accuracy"]
    assert acc["reference"] == "sharding=replicated,scan_layers=true" and 1e-9 < acc["rel_l2"] < 1e-6
    unrolled = [
        r for r in _committed("nightly.jsonl") if r["variant"]["name"] == "sharding=replicated,scan_layers=false"
    ]
    assert unrolled[-1]["stages"]["denoise_step"]["measured"]["accuracy"]["rel_l2"] == 0.0
    head = copy.deepcopy([intel])
    head[0]["stages"]["denoise_step"]["measured"]["accuracy"]["rel_l2"] *= 2
    assert [c.metric for c in evaluate(base, head, timings="off").failures] == ["accuracy.rel_l2"]
    head[0]["machine"]["cpu"] = "Some Other CPU"
    other = evaluate(base, head, timings="off")
    assert other.exit_code == gate.CLEAN and other.failures == []
    (shown,) = [c for c in other.comparisons.comparisons if c.verdict == "regressed"]
    assert shown.metric == "accuracy.rel_l2" and not shown.gated and "other machine class" in shown.detail
