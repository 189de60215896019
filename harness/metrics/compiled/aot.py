"""What a stage's static metrics mean on its target: per step and per video, fit, roofline.

Works on the :class:`~harness.families.Static` family that :meth:`harness.run.jax_stage.JaxStage.static`
returns (or the compile cache read back, analysed the same way), plus a :class:`harness.targets.TargetSpec`.

An out-of-memory compile is a result, not a crash: XLA refuses to compile a program
whose buffers exceed the device's HBM and says how much it needed; :func:`oom_static`
turns that error into static metrics with ``oom`` set, and the analysis reports
``fits = False`` with the bytes needed.
"""

from __future__ import annotations

import re
from typing import Any

from harness import targets
from harness.families import CollectiveTotals, Memory, OnTarget, Oom, Static, TargetMemory

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_SIZE = r"([0-9.]+)\s*([KMGT]?)(?:i?B)?"
# TPU: "... the total memory required for HLO temporaries (136.97G) exceeds available HBM (31.25G)" or
# "Ran out of memory in memory space hbm. Used 40.10G of 31.25G hbm. Exceeded hbm capacity by 8.85G."
_OOM_PATTERNS = (
    re.compile(rf"required[^(]*\({_SIZE}\)\s*exceeds available \w+ \({_SIZE}\)"),
    re.compile(rf"Used {_SIZE} of {_SIZE} hbm", re.IGNORECASE),
)


def wire_bytes(kind: str, operand: float, result: float) -> float:
    """Bytes one device sends over the interconnect for a collective (ring algorithms):
    an all-gather receives everything but its shard, a reduce-scatter sends everything but
    its shard, an all-reduce is both; permutes and all-to-alls send their operand."""
    if kind == "all-gather":
        return max(result - operand, 0.0)
    if kind == "reduce-scatter":
        return max(operand - result, 0.0)
    if kind == "all-reduce":
        return 2.0 * operand
    return operand


def ring_wire_bytes(kind: str, operand: float, group_size: int) -> float:
    """Bytes one device sends for a collective over a group of ``group_size`` devices (ring
    algorithms), from its operand bytes alone: an all-gather sends its shard to each of the n-1
    others (operand x (n-1)); a reduce-scatter and an all-to-all keep 1/n of the operand
    (operand x (n-1)/n); an all-reduce is both phases (2 x operand x (n-1)/n); a permute or
    broadcast sends its operand once. :func:`wire_bytes` is the large-n limit of this from the
    operand and result bytes."""
    n = max(int(group_size), 1)
    if n == 1:
        return 0.0
    factor = {"all-gather": n - 1.0, "all-reduce": 2.0 * (n - 1) / n}.get(kind)
    if factor is None:
        factor = (n - 1) / n if kind in ("reduce-scatter", "all-to-all", "ragged-all-to-all") else 1.0
    return operand * factor


def _bytes(number: str, unit: str) -> int:
    return int(float(number) * _UNITS[unit])


def parse_oom(message: str) -> dict[str, Any] | None:
    """``{required_bytes, available_bytes}`` from an XLA out-of-memory compile error, else None."""
    if "RESOURCE_EXHAUSTED" not in message and "out of memory" not in message.lower():
        return None
    for pattern in _OOM_PATTERNS:
        if m := pattern.search(message):
            return {"required_bytes": _bytes(m.group(1), m.group(2)), "available_bytes": _bytes(m.group(3), m.group(4))}
    return {"required_bytes": None, "available_bytes": None}


def oom_static(exc: BaseException, platform: str) -> Static | None:
    """The static metrics of a compile that ran out of device memory; None for other errors."""
    message = str(exc)
    found = parse_oom(message)
    if found is None:
        return None
    first = next((line for line in message.splitlines() if "memory" in line.lower()), message)[:1000]
    return Static(platform=platform, oom=Oom(**found, message=first))


def _per_kind(static: Static) -> dict[str, CollectiveTotals]:
    by_kind = static.collectives.by_kind if static.collectives else None
    out = {}
    for kind, c in (by_kind or {}).items():
        if c.count:
            operand, result = float(c.operand_bytes or 0), float(c.result_bytes or 0)
            wire = wire_bytes(kind, operand, result)
            out[kind] = CollectiveTotals(count=float(c.count), bytes=operand, result_bytes=result, wire_bytes=wire)
    return out


def _needed_bytes(static: Static) -> float | None:
    if static.oom:
        return static.oom.required_bytes
    return (static.memory.peak_bytes or static.memory.bound_bytes) if static.memory else None


def _flops(static: Static, devices: int) -> float | None:
    """Per-device FLOPs: the HLO's matmul FLOPs with loop trip counts, else the best of XLA's cost
    model (loop bodies counted once) and the analytic FLOPs spread over the devices."""
    if static.matmul_flops:
        return float(static.matmul_flops)
    analytic = static.analytic_flops
    candidates = [
        float(x) for x in (static.cost_flops, None if analytic is None else analytic / devices) if x is not None
    ]
    return max(candidates) if candidates else None


def _hbm_bytes(static: Static) -> float | None:
    """HBM traffic per call: the HLO's fusion-level traffic with loop trip counts, or XLA's bytes
    accessed (loop bodies counted once) if larger, and at least every argument read and every
    output written once."""
    memory = static.memory or Memory()
    io = (memory.argument_bytes or 0) + (memory.output_bytes or 0)
    values = [float(x) for x in (static.cost_bytes, static.memory_traffic_bytes, io or None) if x is not None]
    return max(values) if values else None


def analyze(static: Static, spec: targets.TargetSpec | None, calls_per_video: int, devices: int) -> OnTarget:
    """Per call (a denoising step for ``denoise_step``) and per video: collectives by kind, memory
    and fit in HBM, FLOPs, roofline time. Everything is per device."""
    per_call = _per_kind(static)
    memory = static.memory or Memory()
    needed = _needed_bytes(static)
    oom = bool(static.oom)
    flops = _flops(static, devices)
    hbm_traffic = _hbm_bytes(static)
    roofline = None
    if spec is not None and not oom:
        wire = sum(c.wire_bytes or 0.0 for c in per_call.values()) if static.collectives else None
        roofline = targets.roofline(spec, flops, hbm_traffic, wire)
    per_video = {
        k: CollectiveTotals(**{f: v * calls_per_video for f, v in c.to_dict().items()}) for k, c in per_call.items()
    }
    return OnTarget(
        calls_per_video=calls_per_video,
        collectives_per_call=per_call,
        collectives_per_video=per_video,
        memory=TargetMemory(
            argument_bytes=memory.argument_bytes,
            temp_bytes=memory.temp_bytes,
            peak_bytes=memory.peak_bytes,
            needed_bytes=needed,
            hbm_bytes=None if spec is None else spec.hbm_bytes,
        ),
        fits=False if oom else (None if spec is None else targets.fits(spec, needed)),
        flops_per_device=flops,
        hbm_traffic_bytes=hbm_traffic,
        spec=None if spec is None else spec.to_dict(),
        roofline=roofline,
        roofline_per_video_s=None if roofline is None or roofline.step_s is None else roofline.step_s * calls_per_video,
    )
