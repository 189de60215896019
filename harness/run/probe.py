"""The accuracy probe of a compile-only variant: its numerics knobs run on CPU at a small config.

A TPU or GPU variant compiled here never runs, so its output cannot be compared; what its knobs do
to the arithmetic can. The probe builds the variant's stage with the variant's own overrides (dtype,
``linear_partials``, RoPE form, attention path -- splash in interpret mode, on every attention --,
sharding rules and mesh) on :data:`PROBE_PRESET`, a small LTX-2.0 transformer, on 8 simulated CPU
devices (more where the mesh needs them), and measures per seed the step's update (:func:`update`:
each output minus the latents it updates) of:

* the **float32 reference**: every numerics knob at its default, the guidance passes run one by
  one as diffusers does;
* **plain bfloat16**: that reference in bfloat16, the rounding the knobs are judged against
  (``tests/ltx2/test_bf16_accuracy.py``: no further from diffusers' float32 than diffusers' bf16);
* **the variant**;

all on the reference's seeded weights and inputs (:func:`harness.run.accuracy.like`). The record's
``static.accuracy_probe``: medians over seeds of the variant's and plain bfloat16's relative L2
from the reference, the median ratio of the two, how many seeds were worse, and where it was
measured (CPU, a small config). ``python -m harness.run.probe <in.json> <out.json>`` runs it in a
process of its own for a worker that compiles for another platform; variants that share a reference
share its runs (:class:`Baseline`).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from ltx2 import KNOBS

SEEDS = 8
DEVICES = 8
# The CPU benchmark's LTX-2.0 transformer (2 layers, width 128 in 4 heads, audio 64 in 4): its heads
# and layers split over the meshes of v6e.toml and v7x.toml (tensor up to 4, two pipeline stages).
PROBE_PRESET = "small"
PROBE_WORKLOAD: dict[str, Any] = dict(
    height=128, width=128, num_frames=17, frame_rate=24.0, batch=2, steps=2, text_tokens=16
)
WHERE = "CPU ({d} simulated devices), small config (LTX-2.0 blocks, 2 layers, width 128), {n} seeds: not the target"
# Knobs reset for the reference (removed: the preset's default), and the diffusers-like guidance.
GUIDED_KNOBS = ("pipeline.stg_fork", "pipeline.guidance_batching", "pipeline.text_kv_cache")
REFERENCE = {"pipeline.guidance_batching": "sequential", "pipeline.stg_fork": False, "pipeline.text_kv_cache": False}
BF16 = {"transformer.dtype": "bfloat16", "transformer.param_dtype": "bfloat16"}


def is_knob(key: str) -> bool:
    """A numerics or layout knob the reference resets (the model's own sizes are kept)."""
    if key.startswith("transformer."):
        return key.removeprefix("transformer.") in KNOBS
    return key.startswith("sharding.rules.") or key in GUIDED_KNOBS


def configs(overrides: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The three configs' overrides (of :data:`PROBE_PRESET`): reference, plain bf16, the variant."""
    kept = {k: v for k, v in overrides.items() if not is_knob(k) and k != "model.preset"}
    reference = {**kept, **REFERENCE}
    variant = {k: v for k, v in overrides.items() if k not in ("model.preset", "transformer.attention_impl_min_tokens")}
    return {"reference": reference, "bf16": {**reference, **BF16}, "variant": variant}


@dataclass(frozen=True)
class Baseline:
    """What every variant of one reference is compared with, per seed: the reference's arguments, its
    update, and plain bfloat16's deviation from it. It depends only on the reference's config, the
    mesh, the stage and the seeds (:func:`baseline_key`), so variants that share those share it."""

    args: tuple[tuple[Any, ...], ...]
    reference: tuple[dict[str, np.ndarray], ...]
    bf16: tuple[dict[str, Any], ...]


def baseline_key(overrides: Mapping[str, Any], mesh_shape: Mapping[str, int], stage: str, seeds: int) -> str:
    return json.dumps([configs(overrides)["reference"], dict(mesh_shape), stage, seeds], sort_keys=True)


def probe(
    overrides: Mapping[str, Any],
    mesh_shape: Mapping[str, int],
    stage: str,
    seeds: int = SEEDS,
    baselines: dict[str, Baseline] | None = None,
) -> dict:
    """Run the three configs of ``stage`` on ``seeds`` seeds (this process must have as many CPU
    devices as the mesh). ``baselines``: reference and plain-bfloat16 runs kept by
    :func:`baseline_key`, reused where present and added where not (the numbers are the same
    either way: every run is deterministic per seed)."""
    from harness.metrics.measured.accuracy import compare
    from harness.model import build_config
    from harness.run.accuracy import like, output_arrays
    from ltx2 import Workload, build_mesh, build_stage

    devices = jax.devices("cpu")
    if len(devices) < (n := math.prod(mesh_shape.values())):
        raise RuntimeError(f"the probe's mesh {dict(mesh_shape)} needs {n} CPU devices, found {len(devices)}")
    mesh = build_mesh(dict(mesh_shape), devices=devices[:n])
    workload = Workload(**PROBE_WORKLOAD)
    cfgs = configs(overrides)
    key = baseline_key(overrides, mesh_shape, stage, seeds)
    base = (baselines or {}).get(key)
    todo = ("variant",) if base is not None else ("reference", "bf16", "variant")
    programs = {k: build_stage(stage, build_config(PROBE_PRESET, cfgs[k]), workload, mesh) for k in todo}

    def run(name: str, args: tuple[Any, ...]) -> dict[str, np.ndarray]:
        mine = args if name == "reference" else like(args, programs[name].abstract_args)
        return update(output_arrays(jax.block_until_ready(programs[name].run(*mine))), mine)

    variant = []
    with jax.set_mesh(mesh):
        if base is None:
            args = tuple(programs["reference"].make_args(seed) for seed in range(seeds))
            refs = tuple(run("reference", a) for a in args)
            base = Baseline(args, refs, tuple(compare(run("bf16", a), r) for a, r in zip(args, refs, strict=True)))
            if baselines is not None:
                baselines[key] = base
        for a, ref in zip(base.args, base.reference, strict=True):
            variant.append(compare(run("variant", a), ref))
    return summary(variant, list(base.bf16), max(DEVICES, n))


def update(out: dict[str, np.ndarray], args: tuple[Any, ...]) -> dict[str, np.ndarray]:
    """Each output leaf minus the stage's top-level input of its shape (the latents it updates), in
    float64: the step's update, whose error is the transformer's. Compared whole, a step's output is
    its input plus a small update, and the input's own rounding to bfloat16 (the same for every
    bfloat16 config) would hide what the knobs do to the update."""
    inputs = [np.asarray(jax.device_get(a), np.float64) for a in args[1:] if hasattr(a, "shape")]
    res = {}
    for name, x in out.items():
        same = next((i for i in inputs if i.shape == x.shape), None)
        res[name] = np.asarray(x, np.float64) - (0.0 if same is None else same)
    return res


def summary(variant: list[dict[str, Any]], bf16: list[dict[str, Any]], devices: int = DEVICES) -> dict[str, Any]:
    """Medians over seeds, the per-seed ratio variant / plain bf16 (relative L2) and its count above 1;
    ``devices``: the simulated CPU devices of the probe's mesh."""
    ratios = [v["rel_l2"] / max(b["rel_l2"], 1e-300) for v, b in zip(variant, bf16, strict=True)]
    return {
        "rel_l2": statistics.median(v["rel_l2"] for v in variant),
        "max_abs": statistics.median(v["max_abs"] for v in variant),
        "bf16_rel_l2": statistics.median(b["rel_l2"] for b in bf16),
        "ratio": statistics.median(ratios),
        "worse": sum(r > 1.0 for r in ratios),
        "seeds": len(ratios),
        "where": WHERE.format(d=devices, n=len(ratios)),
    }


def run_in_subprocess(
    overrides: Mapping[str, Any], mesh_shape: Mapping[str, int], stage: str, scratch: Path, timeout_s: float = 600.0
) -> dict[str, Any]:
    """:func:`probe` in a process of its own on 8 CPU devices (more where the mesh needs them);
    RuntimeError with its log's tail on failure."""
    scratch.mkdir(parents=True, exist_ok=True)
    src, out = scratch / "probe-in.json", scratch / "probe-out.json"
    src.write_text(json.dumps({"overrides": dict(overrides), "mesh": dict(mesh_shape), "stage": stage}))
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={max(DEVICES, math.prod(mesh_shape.values()))}",
        "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    }
    for name in ("TPU_ACCELERATOR_TYPE", "TPU_WORKER_HOSTNAMES"):
        env.pop(name, None)
    cmd = [sys.executable, "-m", "harness.run.probe", str(src), str(out)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"accuracy probe failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    return json.loads(out.read_text())


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[0]).read_text())
    result = probe(spec["overrides"], spec["mesh"], spec["stage"])
    Path(argv[1]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
