"""Paired A/B of the guided step's knobs on CPU: every variant in one process, calls interleaved.

Each round calls every variant once, in a fresh random order, after a short idle gap; a variant's
number is the median over rounds of its time divided by the reference's time in the same round
(robust to load from other processes, unlike absolute times, which are printed too).

    python benchmarks/guided_ab.py                          # small pipeline, whole scan loop (8 steps)
    python benchmarks/guided_ab.py --what step --preset medium --rounds 7   # one guided step

``--what loop``: ``LTX2Pipeline.denoise`` (text connectors excluded) at a ``PipelineConfig`` preset.
``--what step``: one ``ltx2.denoise.guided_step`` at a ``TransformerConfig`` preset (``perturbed_attn``
on, the bench's small workload: 9x8x8 latents, 68 audio frames, 128 text tokens, one video), with
per-video text keys/values computed before the timed calls.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from guided_step_static import VARIANTS  # the knob settings, one table (this folder is on the path of a script)

os.environ.setdefault("JAX_PLATFORMS", "cpu")
DEFAULT = ("default", "sequential", "no-fork", "no-text-kv", "old")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--what", choices=("loop", "step"), default="loop")
    p.add_argument("--preset", default="small")
    p.add_argument("--variants", default=",".join(DEFAULT), help=f"first is the reference; known: {list(VARIANTS)}")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--settle", type=float, default=0.05, help="idle seconds before each timed call")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error("--rounds must be >= 1")
    if unknown := [v for v in args.variants.split(",") if v not in VARIANTS]:
        p.error(f"unknown variants {unknown}")
    return args


def loop_calls(preset: str, names: list[str]) -> dict[str, Callable[[], Any]]:
    import jax
    import numpy as np

    from ltx2.pipeline import LTX2Pipeline
    from ltx2.pipeline_config import PipelineConfig

    cfg = PipelineConfig.preset(preset)
    base = LTX2Pipeline.from_config(cfg, text_encoder=False)
    rng = np.random.default_rng(0)
    s, d = cfg.text_encoder.max_sequence_length, cfg.connectors.text_encoder_dim
    pos, neg = (rng.standard_normal((1, s, d)).astype(np.float32) for _ in range(2))
    mask = np.ones((1, s), np.int64)
    text = base.embed_text(pos, mask, neg, mask)
    calls = {}
    for name in names:
        batching, fork, kv = VARIANTS[name]
        c = cfg.replace(pipeline=cfg.pipeline.replace(guidance_batching=batching, stg_fork=fork, text_kv_cache=kv))
        pipe = LTX2Pipeline(
            c,
            transformer=base.transformer,
            connectors=base.connectors,
            video_vae=base.video_vae,
            audio_vae=base.audio_vae,
            vocoder=base.vocoder,
        )
        plan = pipe.plan()
        x0, schedule, scales = pipe.prepare_latents(plan, key=jax.random.key(0)), pipe.schedule(plan), pipe.scales()
        calls[name] = lambda p=pipe, plan=plan, x0=x0, sch=schedule, sc=scales: p.denoise(x0, text, sch, sc, plan)
    return calls


def step_calls(preset: str, names: list[str]) -> dict[str, Callable[[], Any]]:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from ltx2.config import TransformerConfig
    from ltx2.denoise import Latents, TextEmbeddings, denoise_step, text_kv_once
    from ltx2.guidance import GuidanceConfig, GuidancePasses
    from ltx2.latents import Plan
    from ltx2.transformer import LTX2Transformer

    cfg = getattr(TransformerConfig, preset)(perturbed_attn=True, attention_impl="auto")
    graphdef, state = nnx.split(LTX2Transformer(cfg, rngs=nnx.Rngs(0)))
    (F, H, W), A, S, rng = (9, 8, 8), 68, 128, np.random.default_rng(0)
    f32 = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)  # noqa: E731
    x = Latents(f32(1, F * H * W, cfg.in_channels), f32(1, A, cfg.audio_in_channels))
    dv, da = (cfg.caption_channels,) * 2 if cfg.use_prompt_embeddings else (cfg.inner_dim, cfg.audio_inner_dim)
    text = TextEmbeddings(f32(2, S, dv), f32(2, S, da), jnp.ones((2, S), jnp.int32))
    scalars, scales = [jnp.float32(v) for v in (0.5, 0.45, 500.0)], GuidanceConfig().scales()
    calls = {}
    for name in names:
        batching, fork, kv = VARIANTS[name]
        plan = Plan(
            batch=1,
            frames=F,
            height=H,
            width=W,
            audio_frames=A,
            latent_mel_bins=16,
            fps=24.0,
            passes=GuidancePasses(True, True, True),
            stg_blocks=(1,),
            use_cross_timestep=True,
            patch_size=1,
            patch_size_t=1,
            guidance_batching=batching,
            stg_fork=fork,
            text_kv_cache=kv,
        )
        cache = jax.block_until_ready(text_kv_once(graphdef, state, text, plan=plan))
        calls[name] = lambda plan=plan, cache=cache: denoise_step(
            graphdef, state, x, text, *scalars, scales, cache, plan=plan
        )
    return calls


def main(argv: list[str] | None = None) -> None:
    import jax

    args = parse_args(argv)
    names = args.variants.split(",")
    calls = (loop_calls if args.what == "loop" else step_calls)(args.preset, names)
    for name, call in calls.items():  # compile and warm up
        start = time.perf_counter()
        jax.block_until_ready(call())
        print(f"{name}: first call {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    samples: dict[str, list[float]] = {n: [] for n in names}
    order = list(names)
    for _ in range(args.rounds):
        random.shuffle(order)
        for name in order:
            time.sleep(args.settle)
            start = time.perf_counter()
            jax.block_until_ready(calls[name]())
            samples[name].append(time.perf_counter() - start)
    ref = names[0]
    print(f"| variant | knobs | median ms | time / {ref} (paired median) | min-max ratio |\n|---|---|---:|---:|---:|")
    for name in names:
        ratios = [a / b for a, b in zip(samples[name], samples[ref], strict=True)]
        print(
            f"| {name} | {'/'.join(map(str, VARIANTS[name]))} | {statistics.median(samples[name]) * 1e3:.1f} "
            f"| {statistics.median(ratios):.3f} | {min(ratios):.2f}-{max(ratios):.2f} |"
        )
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else "?"
    print(
        f"\n{args.what} at {args.preset}, {args.rounds} rounds, load average {' '.join(load)}, "
        f"{jax.device_count()} JAX device(s)"
    )


if __name__ == "__main__":
    main()
