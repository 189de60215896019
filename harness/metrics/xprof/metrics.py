"""XProf's op-profile numbers (time %, FLOPs and HBM utilisation, wasted %) computed from op
executions, the way XProf computes them, so a prediction and a measurement quote the number a TPU
engineer reads in XProf (e.g. "% of wasted time in all-gathers").

Definitions, from xprof's source (openxla/xprof):

* **time fraction** of a node (an op, a category, the whole profile) = its op time / the root's op
  time. Op time is *self* time summed over executions (``XEventsOpMetricsDbBuilder::Finalize`` in
  ``xprof/utils/op_metrics_db_utils.cc`` sums ``self_time_ps``); the root is every op's time with
  idle excluded (the op profile page's default, ``excludeIdle = true`` in
  ``frontend/app/components/op_profile/op_profile_base.ts``; ``timeFraction`` in
  ``frontend/app/common/utils/utils.ts``).
* **FLOPs utilisation** = (FLOPs / time) / peak FLOP/s, uncapped (``flopsUtilization`` in
  ``utils.ts``, from ``uncapped_flops`` that ``PopulateOpMetricsNode`` in
  ``xprof/convert/op_profile_builder.cc`` writes as ``GigaFlopsPerSecondPerCore / peak``).
* **HBM bandwidth utilisation** = (HBM bytes / time) / peak HBM B/s, capped at 1
  (``PopulateOpMetricsNode``: ``CapUtilization(hbm_gibibytes_per_second / peak)``).
* **wasted** = time fraction x (1 - max(FLOPs utilisation, HBM bandwidth utilisation))
  (``timeWasted`` in ``utils.ts``; the op table's "Wasted %" column, whose tooltip in
  ``frontend/app/components/op_profile/op_table/op_table.ng.html`` reads "RuntimeFraction * (1 -
  max(FlopsUtilization, MemoryBandwidthUtilization))"). A category's is computed from its ops'
  summed time, FLOPs and bytes (``OpProfileBuilder`` aggregates child metrics, then populates).
* **the all-gather share** ("% of wasted time in all-gathers") sums the Wasted % of the nodes XProf
  attributes to all-gathers: its all-gather categories (``IsCollective`` in
  ``xprof/convert/smart_suggestion/signal_provider.h``), and each ``async-start`` / ``async-done`` op
  named ``all-gather.*`` (``GetAsyncDoneOpPercent`` there: libtpu files a SparseCore-offloaded
  ``call-start`` / ``call-done`` so), a node of its own. So a gather's start (its HBM bytes) and its
  done (the wait) are not one node, as in XProf (benchmarks/results/ag-share-definition-2026-11-29.md).
* **root FLOPs / HBM utilisation**: the same two ratios for the root node (all ops), what the op
  profile's summary at the top quotes.

Each op is priced with the costs libtpu wrote in the profile (``flops``, the HBM bytes of
``memory_access_breakdown``, ``hlo_category``) over its device's own duration (``device_duration_ps``),
not the host-aligned span; so priced, these numbers equal xprof's own converters' (``op_profile``,
``hlo_stats``) on a real v6e profile (``tests/harness/metrics/test_real_profile.py``). Steps and idle
are ours alone (benchmarks/results/docstring-findings-2026-11-29.md, "XProf's numbers").

On a TPU the ops of a step run back to back on the TensorCore's ``XLA Ops`` line: an async
collective shows as its ``*-start`` op and its ``*-done`` op (the wait for the transfer), the
transfer itself is not an op there. Our predicted timeline is read the same way: its transfer
spans (``<op> (transfer)``) are left out. Pure Python (no JAX).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.families import XprofNode, XprofProfile

_NUMBERED = re.compile(r"(\.\d+)+$")
TRANSFER_SUFFIX = " (transfer)"
ALL_GATHER = "all-gather"

DEFINITIONS: dict[str, str] = {
    "time_fraction": "op self time / all op time, idle excluded (xprof op_profile Time %)",
    "flops_utilization": "(FLOPs / op time) / peak FLOP/s (xprof utils.ts flopsUtilization)",
    "hbm_bw_utilization": "(HBM bytes / op time) / peak HBM B/s, capped at 1 (op_profile_builder.cc)",
    "wasted_fraction": "time fraction x (1 - max(FLOPs util, HBM util)) (xprof op_profile Wasted %)",
    "all_gather_wasted_fraction": "summed Wasted % of xprof's all-gather nodes: its all-gather categories "
    "and each async-start/-done op named all-gather.* (SparseCore-offloaded)",
}
# XProf's categories of TensorCore all-gathers (signal_provider.h IsCollective), and the categories
# libtpu gives an op offloaded to another core (a SparseCore call-start / call-done).
ALL_GATHER_CATEGORIES = frozenset({ALL_GATHER, "all-gather-start", "all-gather-done", "all-gather fusion"})
ASYNC_CATEGORIES = frozenset({"async-start", "async-done"})


def is_all_gather(op: str, category: str) -> bool:
    """Whether XProf attributes the op ``op`` of category ``category`` to all-gathers (module docstring)."""
    name = op.rsplit("/", 1)[-1]  # a trace's op shared by two modules is named "<module>/<op>"
    return category in ALL_GATHER_CATEGORIES or (category in ASYNC_CATEGORIES and name.split(".")[0] == ALL_GATHER)


@dataclass(frozen=True)
class OpCost:
    """One op's totals over its executions: self time (ns), FLOPs and HBM bytes."""

    op: str
    category: str
    time_ns: float
    flops: float = 0.0
    bytes: float = 0.0
    occurrences: int = 1


def node_metrics(
    time_ns: float,
    flops: float,
    hbm_bytes: float,
    root_ns: float,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
    op: str | None = None,
    category: str | None = None,
) -> XprofNode:
    """One op-profile node's time fraction, FLOPs and HBM utilisation and wasted fraction (an op's
    node: with its ``op`` and ``category``)."""
    fraction = time_ns / root_ns if root_ns > 0 else 0.0
    seconds = time_ns / 1e9
    flops_util = flops / seconds / peak_flops_per_s if seconds > 0 and peak_flops_per_s > 0 else 0.0
    hbm_util = min(1.0, hbm_bytes / seconds / hbm_bytes_per_s) if seconds > 0 and hbm_bytes_per_s > 0 else 0.0
    return _node(time_ns, fraction, flops_util, hbm_util, op, category)


def _node(
    time_ns: float, fraction: float, flops_util: float, hbm_util: float, op: str | None, category: str | None
) -> XprofNode:
    return XprofNode(
        op=op,
        category=category,
        time_ns=time_ns,
        time_fraction=fraction,
        flops_utilization=flops_util,
        hbm_bw_utilization=hbm_util,
        wasted_fraction=fraction * (1.0 - max(flops_util, hbm_util)),
    )


def _wasted_first(node: XprofNode) -> float:
    return -(node.wasted_fraction or 0.0)


def op_profile(
    ops: Iterable[OpCost], *, peak_flops_per_s: float, hbm_bytes_per_s: float, top: int = 10
) -> XprofProfile:
    """XProf's op-profile numbers for ``ops`` (see the module docstring): ``root`` (all ops),
    ``categories`` (category -> node metrics, most wasted first), ``top_wasted_ops`` (the ``top`` ops
    with the most wasted time), ``all_gather_wasted_fraction``, the peaks, and ``definitions``."""
    ops = list(ops)
    root_ns = sum(o.time_ns for o in ops)

    def node(time_ns: float, flops: float, hbm: float, op: str | None = None, category: str | None = None) -> XprofNode:
        return node_metrics(time_ns, flops, hbm, root_ns, peak_flops_per_s, hbm_bytes_per_s, op, category)

    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for o in ops:
        acc = sums[o.category]
        acc[0] += o.time_ns
        acc[1] += o.flops
        acc[2] += o.bytes
    categories = {c: node(t, f, b) for c, (t, f, b) in sums.items()}
    rows = [node(o.time_ns, o.flops, o.bytes, o.op, o.category) for o in ops]
    offloaded = [r for r in rows if r.category in ASYNC_CATEGORIES and is_all_gather(r.op or "", r.category)]
    gathers = [n for c, n in categories.items() if c in ALL_GATHER_CATEGORIES] + offloaded
    return XprofProfile(
        root=node(root_ns, sum(o.flops for o in ops), sum(o.bytes for o in ops)),
        categories=dict(sorted(categories.items(), key=lambda kv: (_wasted_first(kv[1]), kv[0]))),
        top_wasted_ops=tuple(sorted(rows, key=lambda n: (_wasted_first(n), n.op or ""))[:top]),
        all_gather_wasted_fraction=sum(n.wasted_fraction or 0.0 for n in gathers),
        peak_flops_per_s=peak_flops_per_s,
        hbm_bytes_per_s=hbm_bytes_per_s,
        definitions=DEFINITIONS,
    )


def op_costs(
    rows: Iterable[tuple[str, str, float]],
    costs: Mapping[str, tuple[float, float]] | None = None,
    category_of: Mapping[str, str] | None = None,
) -> list[OpCost]:
    """Op executions ``(op, category, self ns)`` summed per op; ``costs``: op -> (FLOPs, HBM bytes)
    of one execution; ``category_of``: op -> xprof category (else the row's). Transfer spans
    (``<op> (transfer)``) are not ops of the stream and are skipped."""
    acc: dict[str, list[Any]] = {}
    for op, category, ns in rows:
        if op.endswith(TRANSFER_SUFFIX):
            continue
        entry = acc.setdefault(op, [category, 0.0, 0])
        entry[1] += ns
        entry[2] += 1
    costs = costs or {}
    category_of = category_of or {}
    out = []
    for op, (category, ns, count) in acc.items():
        flops, hbm = costs.get(op, (0.0, 0.0))
        out.append(OpCost(op, category_of.get(op, category), ns, flops * count, hbm * count, count))
    return out


# ---------------------------------------------------------------- xprof's own converter output


def from_xprof_op_profile(profile: Mapping[str, Any], top: int = 10) -> XprofProfile:
    """The same numbers read from xprof's ``op_profile`` tool output (its JSON, parsed), through
    the UI's formulas (``utils.ts``: ``timeFraction``, ``flopsUtilization`` = ``uncappedFlops`` /
    time fraction, ``memoryBandwidthUtilization`` = ``bandwidthUtils[0]``, ``timeWasted``) on the
    ``byCategoryExcludeIdle`` tree (``byProgramExcludeIdle``'s categories merged when absent)."""
    root = profile.get("byCategoryExcludeIdle") or profile.get("byProgramExcludeIdle") or {}
    root_ps = float(root.get("metrics", {}).get("rawTime", 0.0))

    def read(n: Mapping[str, Any], op: str | None = None, category: str | None = None) -> XprofNode:
        m = n.get("metrics", {})
        raw = float(m.get("rawTime", 0.0))
        fraction = raw / root_ps if root_ps > 0 else 0.0
        flops_util = float(m.get("uncappedFlops", 0.0)) / fraction if fraction > 0 else 0.0
        return _node(raw / 1e3, fraction, flops_util, float((m.get("bandwidthUtils") or [0.0])[0]), op, category)

    nodes = list(root.get("children", []))
    if "byCategoryExcludeIdle" not in profile:  # by program: one more level
        nodes = [c for program in nodes for c in program.get("children", [])]
    categories: dict[str, XprofNode] = {}
    ops: list[XprofNode] = []
    for cat in nodes:
        categories[cat["name"]] = read(cat)
        ops += [read(o, o["name"], cat["name"]) for o in cat.get("children", [])]
    gathers = [n for c, n in categories.items() if c in ALL_GATHER_CATEGORIES]
    gathers += [o for o in ops if o.category in ASYNC_CATEGORIES and is_all_gather(o.op or "", o.category or "")]
    return XprofProfile(
        root=read(root),
        categories=dict(sorted(categories.items(), key=lambda kv: (_wasted_first(kv[1]), kv[0]))),
        top_wasted_ops=tuple(sorted(ops, key=lambda n: (_wasted_first(n), n.op or ""))[:top]),
        all_gather_wasted_fraction=sum(n.wasted_fraction or 0.0 for n in gathers),
        definitions=DEFINITIONS,
    )


def xprof_converter_profile(xplane: str | Path) -> XprofProfile | None:
    """xprof's own ``op_profile`` tool (``xprof.convert.raw_to_tool_data.xspace_to_tool_data``,
    grouped by category) on an XSpace file, read by :func:`from_xprof_op_profile`; None when it
    found no device ops (a CPU trace: xprof's op profile reads device planes only)."""
    from xprof.convert import raw_to_tool_data

    out = raw_to_tool_data.xspace_to_tool_data([str(xplane)], "op_profile", {"group_by": "category"})
    data = out[0] if isinstance(out, tuple) else out
    read = from_xprof_op_profile(json.loads(data))
    return read if read.categories else None


def op_family(op: str) -> str:
    """An op's xprof-like category from its name alone: ``fusion.12`` -> ``fusion`` (libtpu writes
    finer ones, ``loop fusion``, from the HLO, which a trace's op name does not carry)."""
    return _NUMBERED.sub("", op) or op
