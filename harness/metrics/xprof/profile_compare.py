"""A real TPU profile's programs predicted and set beside what the profile measured, per module and
per op by name: the result ``harness profile`` writes (``profile.json``) and the report renders.

Rules (each number below is one of the result's fields):

* **measured, per module**: every execution of the module on every device plane (its ``XLA
  Modules`` events), median in ms; a module's time includes what the device waited for there
  (host copies, barriers with other hosts);
* **measured, per op**: the op's self time (the device's own duration, as xprof sums it) per
  execution, median over executions and devices; ``share``: its total over the profile's op time;
* **predicted**: the program's own scheduled HLO (:mod:`harness.metrics.xprof.profile_programs`) on the
  target's spec for the slice the programs' device assignments name (``slice_topology``: 8 v6e
  chips are a 2x4), one call of the module; an op's time is its events' (a collective's done: the
  stream's wait for its transfer, as measured), an offloaded copy's done its copy's part of the
  stream's waits on the critical path (:meth:`~harness.metrics.timeline.simulate.Simulator.
  _attribute`: under ``fifo`` service the stream's wait there, as measured; under ``fair`` a wait
  that moved three copies' bytes is split among them, not all the first done's, with the others
  at zero); ``interval``: :func:`harness.metrics.timeline.uncertainty` (constants at their bounds,
  the other link-sharing policies; ``assumed``: its points that move an assumption rather than a
  published or measured constant); ``other_policy``: the same with the links and the host link
  each shared by the policy the spec does not use, per module and per op;
* **score**: over the ops that hold 90% of the measured op time (largest first), the median of
  ``|ln(predicted / measured)|``; an op predicted at zero (the stream not waiting there at all,
  or an op priced as free) counts as infinitely far and is listed.

Labelled a prediction wherever shown (:func:`rates_label`). JSON-able; needs jaxlib (to print the
programs), not a device.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.metrics.hlo import HloModule, parse
from harness.metrics.measured.xplane_read import XPlane, device_ordinal, global_chips, hlo_protos, read_xspace
from harness.metrics.measured.xspace import read_trace
from harness.metrics.timeline import LINK_SHARING, Prediction, TimelineSpec, predict, spec_for, uncertainty
from harness.metrics.timeline.program import OFFLOAD, build_program
from harness.metrics.xprof.metrics import TRANSFER_SUFFIX
from harness.metrics.xprof.predicted import XPLANE_NAME, program_costs, xops
from harness.metrics.xprof.xplane_write import write_xspace

RESULT_VERSION = 1
RUNS = Path("plugins") / "profile"  # where ``xprof --logdir <out>`` finds its runs, one folder each
SHARE_COVERED = 0.9
MS = 1e6
# Slice shapes of TPU generations by chip count (cloud.google.com/tpu/docs/v6e, "Supported configurations").
SLICES = {"v6e": {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}}


def slice_topology(target: str, devices: int) -> str:
    """The topology of ``devices`` chips of ``target`` (``v6e``, 8 -> ``v6e:2x4``); ValueError for
    a count the generation has no slice of."""
    shapes = SLICES.get(target)
    if shapes is None or devices not in shapes:
        known = ", ".join(f"{n}" for n in (shapes or {}))
        raise ValueError(f"no {target} slice of {devices} devices known (known counts: {known or 'none'})")
    return f"{target}:{shapes[devices]}"


def rates_label(spec: TimelineSpec) -> str:
    """How a prediction is labelled (``TimelineSpec.label``): ``predicted, tpu7x curves`` where the
    spec's rates come from the published tables' curves (v6e: tpu7x's, carried), ``predicted,
    datasheet rates`` at the datasheet peaks (``TimelineSpec.datasheet()``)."""
    return spec.label


def _median_ms(values: Sequence[float]) -> float:
    return statistics.median(values) / MS if values else 0.0


def measured_modules(planes: Sequence[XPlane]) -> dict[str, list[float]]:
    """Module -> every execution's duration in ns over the device planes' ``XLA Modules`` lines."""
    out: dict[str, list[float]] = defaultdict(list)
    for plane in planes:
        line = plane.line("XLA Modules") if device_ordinal(plane) is not None else None
        for e in line.events if line is not None else ():
            meta = plane.event_metadata.get(e.metadata_id)
            if meta is not None:
                out[meta.name.rsplit("(", 1)[0]].append(e.duration_ps / 1e3)
    return dict(out)


def _predicted_ops(prediction: Prediction, module: HloModule) -> dict[str, float]:
    """Op name -> predicted ns (see the module docstring: an offloaded copy's done is its copy's
    part of the stream's waits, the critical path's entry of its start)."""
    ops: dict[str, float] = defaultdict(float)
    for e in prediction.events:
        if not e.name.endswith(TRANSFER_SUFFIX):
            ops[e.name] += e.end_ns - e.start_ns
    waits = {c["op"]: c["ns"] for c in prediction.critical_path if c["category"] == OFFLOAD}
    for instrs in module.computations.values():
        for i in instrs:
            if i.opcode == "copy-done" and i.operands and i.operands[0] in waits:
                ops[i.name] = waits[i.operands[0]]
    return dict(ops)


def other_policies(spec: TimelineSpec) -> TimelineSpec:
    """``spec`` with the links and the host link each shared by the policy it does not use."""
    links = next(p for p in LINK_SHARING if p != spec.link_sharing)
    host = next(p for p in LINK_SHARING if p != spec.host_link_sharing)
    return dataclasses.replace(spec, link_sharing=links, host_link_sharing=host)


def _ratio(pred: float, meas: float) -> float | None:
    return pred / meas if meas > 0 else None


def _module_row(name: str, program: Any, spec: TimelineSpec, measured: list[float], out: Path | None) -> dict[str, Any]:
    module = parse(program.text)
    base = predict(module, spec)
    alt = predict(module, other_policies(spec))
    interval = uncertainty(module, spec)
    meas = _median_ms(measured)
    lo, hi = (v * 1e3 for v in interval["interval_s"])
    row = {
        "module": name,
        "num_partitions": program.num_partitions,
        "devices": list(program.devices),
        "repairs": list(program.repairs),
        "measured_ms": meas,
        "measured_runs": len(measured),
        "predicted_ms": base.step_ns / MS,
        "other_policy_ms": alt.step_ns / MS,
        "interval_ms": [lo, hi],
        "assumed": list(interval["assumed"]),
        "ratio": _ratio(base.step_ns / MS, meas),
        "inside": bool(measured) and lo <= meas <= hi,
        "notes": list(base.notes),
        "ops": _predicted_ops(base, module),
        "other_policy_ops": _predicted_ops(alt, module),
    }
    if out is not None:
        costs, opcodes = program_costs(build_program(module).ops)
        where = write_xspace(
            out / RUNS / f"predicted-{name}" / XPLANE_NAME,
            xops(base.events, costs, opcodes),
            peak_flops_per_s=spec.value("peak_flops_per_s"),
            hbm_bytes_per_s=spec.value("hbm_bytes_per_s"),
        )
        row["predicted_xspace"] = str(where)
    return row


def _op_rows(table: Any, modules: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    per: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in table.events:
        per[(e.module, e.op)].append(e.exclusive_ns)
    total = sum(sum(v) for v in per.values()) or 1.0
    rows = []
    for (module, op), times in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        row = modules.get(module, {})
        pred = row.get("ops", {}).get(op)
        alt = row.get("other_policy_ops", {}).get(op)
        meas = _median_ms(times)
        rows.append(
            {
                "module": module,
                "op": op,
                "measured_ms": meas,
                "executions": len(times),
                "share": sum(times) / total,
                "host_offload": (module, op) in table.host_offload,
                "predicted_ms": None if pred is None else pred / MS,
                "other_policy_ms": None if alt is None else alt / MS,
                "ratio": None if pred is None else _ratio(pred / MS, meas),
            }
        )
    return rows


def score(ops: Sequence[Mapping[str, Any]], key: str = "predicted_ms") -> dict[str, Any]:
    """Median ``|ln(pred/meas)|`` over the ops holding :data:`SHARE_COVERED` of the measured time
    (largest first); ops predicted at zero (or not at all) are infinitely far and are listed."""
    covered, held = [], 0.0
    for row in sorted(ops, key=lambda r: -r["share"]):
        if held >= SHARE_COVERED:
            break
        covered.append(row)
        held += row["share"]
    logs, zero = [], []
    for row in covered:
        pred, meas = row.get(key), row["measured_ms"]
        if not pred or pred <= 0 or meas <= 0:
            zero.append(f"{row['module']}/{row['op']}")
            logs.append(math.inf)
        else:
            logs.append(abs(math.log(pred / meas)))
    median = statistics.median(logs) if logs else None
    return {
        "ops": [f"{r['module']}/{r['op']}" for r in covered],
        "share": held,
        "median_abs_log_ratio": None if median is None or math.isinf(median) else median,
        "predicted_zero": zero,
    }


def compare(xspace: str | Path, target: str, topology: str | None = None, out: Path | None = None) -> dict[str, Any]:
    """The ``profile.json`` result of ``xspace`` predicted on ``target`` (see the module docstring);
    ``out``: an XProf log folder the predicted XSpaces go into, one run per module
    (``<out>/plugins/profile/predicted-<module>/predicted.xplane.pb``)."""
    from harness.metrics.xprof.profile_programs import profile_programs  # jaxlib prints the programs

    planes = read_xspace(xspace)
    if not hlo_protos(planes):
        raise ValueError(f"{xspace}: the profile's /host:metadata holds no HLO protos: nothing to predict")
    programs = profile_programs(planes)
    devices = max(max(len(p.devices), p.num_partitions * p.replica_count) for p in programs.values())
    topology = topology or slice_topology(target, devices)
    spec = spec_for(topology, "tpu")
    measured = measured_modules(planes)
    modules = {n: _module_row(n, p, spec, measured.get(n, []), out) for n, p in programs.items()}
    ops = _op_rows(read_trace(xspace), modules)
    return {
        "kind": "profile-prediction",
        "version": RESULT_VERSION,
        "profile": str(xspace),
        "target": target,
        "topology": topology,
        "label": rates_label(spec),
        "link_sharing": spec.link_sharing,
        "host_link_sharing": spec.host_link_sharing,
        "spec": spec.to_dict(),
        "chips": {str(k): v for k, v in global_chips(planes).items()},
        "modules": [{k: v for k, v in m.items() if k not in ("ops", "other_policy_ops")} for m in modules.values()],
        "ops": ops,
        "score": score(ops),
        "score_other_policy": score(ops, "other_policy_ms"),
    }
