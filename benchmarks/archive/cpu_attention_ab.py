"""Attention kernels A/B on CPU, paired and interleaved in one process: the `small` preset's one
denoising forward (CFG batch 2, experiments/cpu.toml's 9x8x8 latent grid, 68 audio and 128 text
tokens) with ``attention_impl`` "xla" vs "blocked", diffusers eager alongside; and a
plain attention (batch 2, 1,536 tokens, width 512, 8 heads) as XLA, blocked and torch SDPA.

    PYTHONPATH=. JAX_PLATFORMS=cpu python benchmarks/cpu_attention_ab.py --rounds 7

Prints per-variant medians and each variant's median time ratio to the first one of its group
over rounds (variants alternate within a round, so they share the machine's moment).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _interleaved(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, list[float]]:
    for fn in fns.values():
        fn()  # warm-up (compiles, allocator, oneDNN caches)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(0.02)  # let the other library's worker threads stop spinning
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


def _report(title: str, times: dict[str, list[float]]) -> None:
    first = next(iter(times.values()))
    print(f"\n{title}  (load average {open('/proc/loadavg').read().split()[:3]})")
    for name, ts in times.items():
        ratio = statistics.median(t / f for t, f in zip(ts, first, strict=True))
        print(f"  {name:24s} median {statistics.median(ts) * 1e3:8.1f} ms   paired time ratio {ratio:5.2f}")


def small_step(rounds: int) -> None:
    import torch
    from diffusers import LTX2VideoTransformer3DModel
    from flax import nnx

    from ltx2.config import TransformerConfig
    from ltx2.convert.transformer import from_diffusers

    cfg = TransformerConfig.small()
    knobs = {"scan_layers", "sharding", "attention_impl", "dtype", "param_dtype"}
    torch.manual_seed(0)
    ref = LTX2VideoTransformer3DModel(
        **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in knobs}
    ).eval()
    (F, H, W), A, S, rng = (9, 8, 8), 68, 128, np.random.default_rng(0)
    arrays = {
        "hidden_states": rng.normal(size=(2, F * H * W, cfg.in_channels)),
        "audio_hidden_states": rng.normal(size=(2, A, cfg.audio_in_channels)),
        "encoder_hidden_states": rng.normal(size=(2, S, cfg.caption_channels)),
        "audio_encoder_hidden_states": rng.normal(size=(2, S, cfg.caption_channels)),
        "timestep": np.full((2,), 500.0),
        "encoder_attention_mask": np.ones((2, S)),
        "audio_encoder_attention_mask": np.ones((2, S)),
    }
    arrays = {k: v.astype(np.float32) for k, v in arrays.items()}
    static = dict(num_frames=F, height=H, width=W, audio_num_frames=A)
    fns: dict[str, Callable[[], Any]] = {}
    for impl in ("xla", "blocked"):
        graphdef, state = nnx.split(from_diffusers(ref, attention_impl=impl))
        fwd = jax.jit(lambda s, a, g=graphdef: nnx.merge(g, s)(**a, **static))
        j = {k: jnp.asarray(v) for k, v in arrays.items()}
        fns[f"jax attention={impl}"] = lambda f=fwd, s=state, j=j: jax.block_until_ready(f(s, j))
    t = {k: torch.from_numpy(v) for k, v in arrays.items()}

    def torch_fwd() -> Any:
        with torch.inference_mode():
            return ref(**t, **static, return_dict=False)

    fns["diffusers eager"] = torch_fwd
    _report("small preset, one transformer forward on the CFG batch (fp32)", _interleaved(fns, rounds))


def plain_attention(rounds: int) -> None:
    import torch

    from ltx2.attention import dot_product_attention

    B, L, N, K = 2, 1536, 8, 64
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(B, L, N, K)).astype(np.float32)) for _ in range(3))
    fns: dict[str, Callable[[], Any]] = {}
    for impl in ("xla", "blocked"):
        f = jax.jit(lambda q, k, v, impl=impl: dot_product_attention(q, k, v, impl=impl))
        fns[f"jax {impl}"] = lambda f=f: jax.block_until_ready(f(q, k, v))
    tq, tk, tv = (torch.tensor(np.asarray(x)).transpose(1, 2).contiguous() for x in (q, k, v))

    def sdpa() -> Any:
        with torch.inference_mode():
            return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv)

    fns["torch sdpa"] = sdpa
    _report(f"attention B={B} L={L} N={N} K={K} (fp32)", _interleaved(fns, rounds))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--only", choices=("step", "attention"), default=None)
    args = parser.parse_args(argv)
    if args.only in (None, "attention"):
        plain_attention(args.rounds)
    if args.only in (None, "step"):
        small_step(args.rounds)


if __name__ == "__main__":
    main()
