"""What a stage's static metrics mean on its target: per step and per video, fit, roofline.

Works on the JSON dict that :meth:`harness.run.jax_stage.JaxStage.static` returns (so cached
results are analysed the same way as fresh ones), plus a :class:`harness.targets.TargetSpec`.

An out-of-memory compile is a result, not a crash: XLA refuses to compile a program
whose buffers exceed the device's HBM and says how much it needed; :func:`oom_static`
turns that error into a static dict with ``oom`` set, and the analysis reports
``fits = False`` with the bytes needed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness import targets

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


def oom_static(exc: BaseException, platform: str) -> dict[str, Any] | None:
    """A static-metrics dict for a compile that ran out of device memory; None for other errors."""
    message = str(exc)
    found = parse_oom(message)
    if found is None:
        return None
    first = next((line for line in message.splitlines() if "memory" in line.lower()), message)[:1000]
    return {
        "platform": platform,
        "collectives": None,
        "memory": None,
        "cost": None,
        "timing": None,
        "oom": {**found, "message": first},
    }


def _per_kind(static: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    by_kind = ((static.get("collectives") or {}).get("by_kind")) or {}
    out = {}
    for kind, c in by_kind.items():
        if c.get("count"):
            operand, result = float(c.get("operand_bytes") or 0), float(c.get("result_bytes") or 0)
            out[kind] = {
                "count": float(c["count"]),
                "bytes": operand,
                "result_bytes": result,
                "wire_bytes": wire_bytes(kind, operand, result),
            }
    return out


def _needed_bytes(static: Mapping[str, Any]) -> float | None:
    oom = static.get("oom")
    if oom:
        return oom.get("required_bytes")
    memory = static.get("memory") or {}
    return memory.get("peak_bytes") or memory.get("bound_bytes")


def _flops(static: Mapping[str, Any], devices: int) -> float | None:
    """Per-device FLOPs: the HLO's matmul FLOPs with loop trip counts, else the best of XLA's cost
    model (loop bodies counted once) and the analytic FLOPs spread over the devices."""
    if static.get("matmul_flops"):
        return float(static["matmul_flops"])
    analytic = static.get("analytic_flops")
    candidates = [
        float(x)
        for x in ((static.get("cost") or {}).get("flops"), None if analytic is None else analytic / devices)
        if x is not None
    ]
    return max(candidates) if candidates else None


def _hbm_bytes(static: Mapping[str, Any]) -> float | None:
    """HBM traffic per call: the HLO's fusion-level traffic with loop trip counts, or XLA's bytes
    accessed (loop bodies counted once) if larger, and at least every argument read and every
    output written once."""
    memory, cost = static.get("memory") or {}, static.get("cost") or {}
    io = (memory.get("argument_bytes") or 0) + (memory.get("output_bytes") or 0)
    values = [
        float(x) for x in (cost.get("bytes_accessed"), static.get("memory_traffic_bytes"), io or None) if x is not None
    ]
    return max(values) if values else None


def analyze(
    static: Mapping[str, Any], spec: targets.TargetSpec | None, calls_per_video: int, devices: int
) -> dict[str, Any]:
    """Per call (a denoising step for ``denoise_step``) and per video: collectives by kind, memory
    and fit in HBM, FLOPs, roofline time. Everything is per device."""
    per_call = _per_kind(static)
    memory = static.get("memory") or {}
    needed = _needed_bytes(static)
    oom = bool(static.get("oom"))
    flops = _flops(static, devices)
    out: dict[str, Any] = {
        "calls_per_video": calls_per_video,
        "collectives_per_call": per_call,
        "collectives_per_video": {k: {f: v * calls_per_video for f, v in c.items()} for k, c in per_call.items()},
        "memory": {
            "argument_bytes": memory.get("argument_bytes"),
            "temp_bytes": memory.get("temp_bytes"),
            "peak_bytes": memory.get("peak_bytes"),
            "needed_bytes": needed,
            "hbm_bytes": None if spec is None else spec.hbm_bytes,
        },
        "fits": False if oom else (None if spec is None else targets.fits(spec, needed)),
        "flops_per_device": flops,
        "hbm_traffic_bytes": _hbm_bytes(static),
        "spec": None if spec is None else spec.to_dict(),
        "roofline": None,
        "roofline_per_video_s": None,
    }
    if spec is not None and not oom:
        wire = sum(c["wire_bytes"] for c in per_call.values()) if static.get("collectives") else None
        step = targets.roofline(spec, flops, out["hbm_traffic_bytes"], wire)
        out["roofline"] = step
        out["roofline_per_video_s"] = None if step["step_s"] is None else step["step_s"] * calls_per_video
    return out
