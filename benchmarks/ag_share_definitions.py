"""Each record's predicted XProf all-gather wasted share three ways, read back from the XSpace it wrote
(benchmarks/results/ag-share-definition-2026-11-29.md):

* ``share``: XProf's nodes (:func:`harness.metrics.xprof.metrics.op_profile`: the all-gather categories, and
  each async op named ``all-gather.*`` a node of its own, as xprof's op profile shows them);
* ``one node``: the same ops as one node, a gather's start (its HBM bytes) with its done (the rule before);
* ``category``: xprof's literal ``all-gather`` category alone (0 where libtpu offloads every all-gather).

    PYTHONPATH=$PWD python benchmarks/ag_share_definitions.py <sweep>/results.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.metrics.measured.trace import _tpu_metadata, read_trace
from harness.metrics.xprof.metrics import is_all_gather, node_metrics, op_profile


def shares(xplane: str) -> dict[str, float]:
    """The share three ways, and the gathers' time fraction, of one predicted XSpace."""
    table = read_trace(xplane)
    meta = _tpu_metadata(table, xplane)
    assert meta is not None, f"{xplane}: no per-op costs"
    costs, (peak_flops, peak_hbm) = meta
    profile = op_profile(costs, peak_flops_per_s=peak_flops, hbm_bytes_per_s=peak_hbm)
    cats = profile.categories or {}
    gathers = [c for c in costs if is_all_gather(c.op, c.category)]
    root = sum(c.time_ns for c in costs)
    t, b = sum(c.time_ns for c in gathers), sum(c.bytes for c in gathers)
    one = node_metrics(t, 0.0, b, root, 1.0, peak_hbm)
    literal = cats.get("all-gather")
    return {
        "share": profile.all_gather_wasted_fraction or 0.0,
        "one_node": one.wasted_fraction or 0.0,
        "category": (literal.wasted_fraction or 0.0) if literal is not None else 0.0,
        "time_fraction": t / root if root else 0.0,
    }


def main(results: str) -> None:
    for line in Path(results).read_text().splitlines():
        record = json.loads(line)
        for stage, entry in record["stages"].items():
            predicted = entry.get("predicted") or {}
            if predicted.get("xplane"):
                out = {k: round(v, 4) for k, v in shares(predicted["xplane"]).items()}
                print(json.dumps({"variant": record["variant"]["name"], "stage": stage, **out}))


if __name__ == "__main__":
    main(sys.argv[1])
