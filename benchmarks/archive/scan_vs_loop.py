"""The scanned denoising loop against the Python loop over one compiled step, on simulated CPU devices,
paired and interleaved in one process: experiments/cpu.toml's `pipeline` / `python-loop` workload
(the `small` preset replicated, 128x128 px x 17 frames, 4 steps, CFG batch 2).

    PYTHONPATH=. JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=8 \\
        python benchmarks/scan_vs_loop.py --devices 1 8 --rounds 5

For each mesh size it prints both loops' median wall time per video and their paired ratio, and
what the compiled programs hold: instructions in the scanned loop's while body against the step
program's, and the copies XLA:CPU put in the while body (a carried buffer copied every iteration).
The ratio at 1 device against 8 separates the program (it shows at 1 device) from the runtime
running 8 simulated devices on the host's cores (it shows only at 8).
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import jax

from harness.metrics.measured.accounting import covered_ns, merge_intervals
from harness.metrics.measured.events import COMPUTE
from harness.metrics.measured.trace import capture_trace
from harness.metrics.measured.xspace import read_trace
from harness.model import build_config
from ltx2 import Workload, build_mesh, build_stage

WORKLOAD = Workload(height=128, width=128, num_frames=17, frame_rate=24.0, batch=2, steps=4, text_tokens=128)


def program(loop: str, devices: int, preset: str = "small") -> Any:
    cfg = build_config(preset, {"transformer.sharding": "replicated", "pipeline.diffusion_loop": loop})
    shape = {"fsdp": 2, "context": 2, "tensor": 2} if devices == 8 else {"fsdp": 1, "context": 1, "tensor": 1}
    mesh = build_mesh(shape, devices=jax.devices()[:devices])
    return build_stage("denoise_loop", cfg, WORKLOAD, mesh)


def hlo_counts(stage: Any) -> dict[str, int]:
    """Instructions of the compiled program (the while body's alone for a scan), and copies among them."""
    text = stage.fn.lower(*stage.abstract_args).compile().as_text()
    bodies = re.findall(r"\n(%?[\w.\-]*body[\w.\-]*) [^\n]*\{\n(.*?)\n\}", text, flags=re.S)
    lines = max((b for _, b in bodies), key=len).splitlines() if bodies else text.splitlines()
    return {
        "instructions": sum(" = " in line for line in lines),
        "copies": sum(re.search(r" = \S+ copy\(", line) is not None for line in lines),
        "fusions": sum(" fusion(" in line for line in lines),
        "while_loops": text.count(" while("),
    }


def traced_compute(stage: Any, log_dir: Path) -> dict[str, float]:
    """ms per traced call, mean over devices: the window, compute as the trace accounting counts it
    (the union of every compute event, an enclosing ``while`` included) and of the leaf ops only."""
    args = stage.make_args(0)
    jax.block_until_ready(stage.run(*args))
    xplane = capture_trace(lambda: stage.run(*args), log_dir, steps=2)
    table = read_trace(xplane)
    windows = table.steps
    out = {"window": sum(b - a for a, b in windows) / len(windows) / 1e6}
    for name, keep in (("compute, all events", lambda e: True), ("compute, leaf ops", lambda e: e.self_ns is None)):
        per_device: dict[int, list[tuple[float, float]]] = {}
        for e in table.events:
            if e.category == COMPUTE and keep(e):
                per_device.setdefault(e.device, []).append((e.start_ns, e.end_ns))
        total = statistics.mean(covered_ns(merge_intervals(v)) for v in per_device.values())
        out[name] = total / len(windows) / 1e6
    out["while events"] = sum(e.self_ns is not None for e in table.events)
    return out


def interleaved(stages: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    args = {k: s.make_args(0) for k, s in stages.items()}
    for k, s in stages.items():
        jax.block_until_ready(s.run(*args[k]))  # compile and warm up
    times: dict[str, list[float]] = {k: [] for k in stages}
    for _ in range(rounds):
        for k, s in stages.items():
            start = time.perf_counter()
            jax.block_until_ready(s.run(*args[k]))
            times[k].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 8], choices=(1, 8))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--trace", action="store_true", help="also trace each loop and account its compute")
    args = parser.parse_args()
    for n in args.devices:
        stages = {loop: program(loop, n, args.preset) for loop in ("scan", "python")}
        if args.trace:
            for loop, s in stages.items():
                with tempfile.TemporaryDirectory() as tmp:
                    print(f"{n} device(s) {loop} traced, ms per call: {traced_compute(s, Path(tmp))}")
        counts = {loop: hlo_counts(s) for loop, s in stages.items()}
        times = interleaved(stages, args.rounds)
        ratio = statistics.median(s / p for s, p in zip(times["scan"], times["python"], strict=True))
        load = open("/proc/loadavg").read().split()[:3]
        print(f"\n{n} device(s), {WORKLOAD.steps} steps, load average {' '.join(load)}")
        for loop in stages:
            med = statistics.median(times[loop])
            print(f"  {loop:7s} median {med * 1e3:8.1f} ms per video  ({med / WORKLOAD.steps * 1e3:.1f} ms per step)")
            print(f"          compiled: {counts[loop]}  (scan: the while body; python: the one-step program)")
        print(f"  scan / python paired time ratio {ratio:.2f}")


if __name__ == "__main__":
    main()
