"""Static cost of one guided denoising step per setting of its knobs, from the compiled HLO.

One step = every guidance pass of ``LTX2Pipeline``'s defaults (CFG + STG + modality isolation,
rescale) for one video, the guidance math and the Euler update: ``ltx2.denoise.denoise_step``, the
program the Python loop calls. For each variant of ``pipeline.guidance_batching`` /
``stg_fork`` / ``text_kv_cache`` it reports, per device: matmul FLOPs (the HLO's dots, loop trip
counts included), HBM traffic (fusion-level bytes, ``harness.metrics.hlo``), XLA temp and argument
bytes, collective wire bytes, and on a TPU/GPU topology the roofline step time
(``harness.targets.roofline``: the max of compute, HBM and interconnect time at the spec's peaks,
a lower bound). Where the text keys/values are cached per video, the one-time program that makes
them (``ltx2.denoise.text_kv_once``) is compiled too and its FLOPs reported apart.

    python benchmarks/guided_step_static.py --preset small                  # CPU, one device
    python benchmarks/guided_step_static.py --preset ltx2_3_22b --topology v6e:2x4 \\
        --sharding trillium --mesh fsdp=2,tensor=4 --variants old,batched,fork,text-kv,default

Compile-only for TPU needs the ``[tpu-aot]`` extra; JAX runs on the host CPU (set below before
JAX is imported). A 19B/22B compile for v6e takes minutes of 2 cores per variant.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

# Knob settings: (guidance_batching, stg_fork, text_kv_cache).
VARIANTS: dict[str, tuple[str, bool, bool]] = {
    "old": ("sequential", False, False),  # diffusers' passes: every knob switched back
    "batched": ("batched", False, False),  # each knob on alone ...
    "fork": ("sequential", True, False),
    "text-kv": ("sequential", False, True),
    "sequential": ("sequential", True, True),  # ... and all on but one
    "no-fork": ("batched", False, True),
    "no-text-kv": ("batched", True, False),
    "default": ("batched", True, True),  # PipelineOptions' defaults
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small", help="PipelineConfig preset (tiny, small, ltx2_19b, ltx2_3_22b)")
    p.add_argument("--topology", default=None, help="compile-only target, e.g. v6e:2x4 or tpu7x:2x2x1 (default: CPU)")
    p.add_argument("--sharding", default="replicated")
    p.add_argument("--mesh", default="", help="axis=size,... (default: one device)")
    p.add_argument("--dtype", default=None, help="transformer dtype and param_dtype (default: bfloat16 on TPU)")
    p.add_argument("--variants", default="old,batched,fork,text-kv,default")
    p.add_argument("--steps", type=int, default=None, help="steps per video (default: the preset's)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument("--list", action="store_true", help="print each variant's knobs and exit")
    args = p.parse_args(argv)
    if args.list:
        print("variant: (guidance_batching, stg_fork, text_kv_cache)")
        print("\n".join(f"{name}: {knobs}" for name, knobs in VARIANTS.items()))
        p.exit()
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        p.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    return args


def _mesh_shape(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in (item.split("=") for item in text.split(",") if item)}


def _config(args: argparse.Namespace, knobs: tuple[str, bool, bool]) -> Any:
    from ltx2.pipeline_config import PipelineConfig

    cfg = PipelineConfig.preset(args.preset)
    dtype = args.dtype or ("bfloat16" if args.topology else "float32")
    transformer = cfg.transformer.replace(sharding=args.sharding, dtype=dtype, param_dtype=dtype)
    batching, fork, kv = knobs
    opts = cfg.pipeline.replace(guidance_batching=batching, stg_fork=fork, text_kv_cache=kv)
    if args.steps:
        opts = opts.replace(num_inference_steps=args.steps)
    return cfg.replace(transformer=transformer, pipeline=opts)


def _abstract_inputs(cfg: Any, plan: Any, mesh: Any) -> tuple[Any, ...]:
    import jax
    import jax.numpy as jnp

    from ltx2.denoise import Latents, TextEmbeddings
    from ltx2.sharding import input_sharding

    t, strategy = cfg.transformer, cfg.transformer.sharding
    dt, S = jnp.dtype(t.dtype), cfg.text_encoder.max_sequence_length

    def sds(shape: tuple[int, ...], dtype: Any, names: tuple[str | None, ...]) -> Any:
        sharding = None if mesh is None else input_sharding(names, strategy, mesh, shape)
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    seq, text = ("activation_batch", "activation_length", None), ("activation_batch", "activation_text_length", None)
    rows = 2 * plan.batch if plan.passes.cfg else plan.batch
    dv, da = (t.caption_channels,) * 2 if t.use_prompt_embeddings else (t.inner_dim, t.audio_inner_dim)
    latents = Latents(
        sds((plan.batch, plan.video_tokens, t.in_channels), jnp.float32, seq),
        sds((plan.batch, plan.audio_frames, t.audio_in_channels), jnp.float32, seq),
    )
    embeds = TextEmbeddings(
        sds((rows, S, dv), dt, text),
        sds((rows, S, da), dt, text),
        sds((rows, S), jnp.int32, ("activation_batch", None)),
    )
    scalar = sds((), jnp.float32, ())
    scales = jax.tree.map(lambda _: scalar, cfg.guidance.scales())
    return latents, embeds, scalar, scales


def _static(compiled: Any, hlo: str) -> Any:
    from harness.metrics.compiled.static import analyze_compiled
    from harness.metrics.hlo import matmul_flops, memory_traffic_bytes, parse

    module = parse(hlo)
    return analyze_compiled(
        compiled, module, matmul_flops=matmul_flops(module), memory_traffic_bytes=memory_traffic_bytes(module)
    )


def measure(args: argparse.Namespace, name: str, mesh: Any, spec: Any) -> dict[str, Any]:
    """Compile one variant's step (and its per-video text keys/values program) and read the HLO."""
    import contextlib

    import jax
    from flax import nnx

    from harness.metrics.compiled.aot import analyze
    from ltx2.components import abstract_state
    from ltx2.denoise import denoise_step, text_kv_once
    from ltx2.latents import Plan
    from ltx2.sharding import input_sharding
    from ltx2.transformer import LTX2Transformer

    cfg = _config(args, VARIANTS[name])
    plan = Plan.build(cfg, batch=1)
    strategy = cfg.transformer.sharding
    make = lambda: LTX2Transformer(cfg.transformer, rngs=nnx.Rngs(0))  # noqa: E731
    if mesh is None:
        graphdef, state = nnx.split(nnx.eval_shape(make))
    else:
        graphdef, state = abstract_state(make, strategy, mesh)
    latents, embeds, scalar, scales = _abstract_inputs(cfg, plan, mesh)
    with jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext():
        kv_shape = jax.eval_shape(lambda st, e: text_kv_once(graphdef, st, e, plan=plan), state, embeds)
        kv_static = None
        if kv_shape is not None:
            names = (None, "activation_batch", "activation_text_length", "activation_heads")

            def place(a):
                sharding = None if mesh is None else input_sharding(names, strategy, mesh, a.shape)
                return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

            kv_shape = jax.tree.map(place, kv_shape)
            kv_compiled = text_kv_once.lower(graphdef, state, embeds, plan=plan).compile()
            kv_static = _static(kv_compiled, kv_compiled.as_text() or "")
        start = time.perf_counter()
        lowered = denoise_step.lower(
            graphdef, state, latents, embeds, scalar, scalar, scalar, scales, kv_shape, plan=plan
        )
        compiled = lowered.compile()
        compile_s = time.perf_counter() - start
    static = _static(compiled, compiled.as_text() or "")
    devices = 1 if mesh is None else math.prod(mesh.shape.values())
    target = analyze(static, spec, plan_steps(cfg), devices)
    row = {
        "variant": name,
        "knobs": dict(zip(("guidance_batching", "stg_fork", "text_kv_cache"), VARIANTS[name], strict=True)),
        "preset": args.preset,
        "topology": args.topology or "cpu",
        "sharding": strategy,
        "mesh": args.mesh,
        "dtype": cfg.transformer.dtype,
        "video_tokens": plan.video_tokens,
        "audio_tokens": plan.audio_frames,
        "text_tokens": cfg.text_encoder.max_sequence_length,
        "steps": plan_steps(cfg),
        "compile_s": compile_s,
        "matmul_flops": static.matmul_flops,
        "memory_traffic_bytes": static.memory_traffic_bytes,
        "temp_bytes": static.memory.temp_bytes if static.memory else None,
        "argument_bytes": static.memory.argument_bytes if static.memory else None,
        "collective_wire_bytes": sum(c.wire_bytes or 0.0 for c in (target.collectives_per_call or {}).values()),
        "roofline_step_s": target.roofline.step_s if target.roofline else None,
        "roofline_bound_by": target.roofline.bound_by if target.roofline else None,
        "text_kv_per_video_matmul_flops": None if kv_static is None else kv_static.matmul_flops,
    }
    return row


def plan_steps(cfg: Any) -> int:
    return int(cfg.pipeline.num_inference_steps)


def markdown(rows: list[dict[str, Any]]) -> str:
    """One table, each variant against the first (``old`` by default)."""
    base = rows[0]
    head = (
        "| variant | batching | fork | text K/V | matmul GFLOP/device | vs first | HBM GB | temp GiB | "
        "args GiB | collective GB | roofline step s | text K/V per video GFLOP |\n"
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    out = []
    for r in rows:
        k = r["knobs"]
        rel = r["matmul_flops"] / base["matmul_flops"] - 1 if base["matmul_flops"] else 0.0
        roof = "-" if r["roofline_step_s"] is None else f"{r['roofline_step_s']:.3f} ({r['roofline_bound_by']})"
        kv = "-" if r["text_kv_per_video_matmul_flops"] is None else f"{r['text_kv_per_video_matmul_flops'] / 1e9:.4g}"
        gib = lambda v: "-" if v is None else f"{v / 2**30:.4g}"  # noqa: E731
        out.append(
            f"| {r['variant']} | {k['guidance_batching']} | {k['stg_fork']} | {k['text_kv_cache']} "
            f"| {r['matmul_flops'] / 1e9:.4g} | {rel:+.1%} | {r['memory_traffic_bytes'] / 1e9:.4g} "
            f"| {gib(r['temp_bytes'])} | {gib(r['argument_bytes'])} | {r['collective_wire_bytes'] / 1e9:.4g} "
            f"| {roof} | {kv} |"
        )
    r = rows[0]
    note = (
        f"\n{r['preset']} on {r['topology']} ({r['sharding']}, mesh {r['mesh'] or 'one device'}, {r['dtype']}): "
        f"{r['video_tokens']} video / {r['audio_tokens']} audio / {r['text_tokens']} text tokens, one video, "
        f"per device per step.\n"
    )
    return head + "\n".join(out) + "\n" + note


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    platform = "cpu"
    if args.topology:
        from harness import targets

        platform = targets.SPECS[targets.parse_topology(args.topology)[0]].platform
        os.environ.update(targets.compile_env(platform))
    import jax

    from harness import targets as tg
    from ltx2.sharding import build_mesh

    mesh, spec = None, None
    if args.topology:
        spec = tg.spec_for(args.topology)
        devices = tg.compile_devices(platform, args.topology)
        shape = _mesh_shape(args.mesh) or {"data": len(devices)}
        mesh = build_mesh(shape, devices=devices[: math.prod(shape.values())])
    elif args.mesh:
        mesh = build_mesh(_mesh_shape(args.mesh), devices=jax.devices())
    rows = []
    for name in args.variants.split(","):
        rows.append(measure(args, name, mesh, spec))
        print(
            f"{name}: {rows[-1]['matmul_flops'] / 1e9:.1f} GFLOP, compiled in {rows[-1]['compile_s']:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
    print(markdown(rows))


if __name__ == "__main__":
    main()
