"""One LTX-2 denoising step on a GPU: our JAX transformer vs diffusers eager and ``torch.compile``.

Full size by default: the LTX-2.0 19B transformer with random bfloat16 weights (speed does not
depend on weight values), 512x768 px, 121 frames at 24 fps (16x16x24 = 6,144 video tokens, 126
audio tokens), 1,024 text tokens, a classifier-free-guidance batch of 2 (forward on [uncond,
cond], guidance mix, Euler update). Each implementation runs in its own subprocess, so the 38 GB
of weights of one never shares the GPU with the other's and JAX's allocator cannot starve torch.
Reported per implementation: compile/warm-up time, median step time, achieved TFLOP/s from the
analytic matmul FLOPs (``TransformerConfig.forward_flops``) and MFU against the device's dense
bf16 peak (``--peak-tflops``, looked up for known GPUs).

    python benchmarks/gpu_step.py                                  # 19B, jax + diffusers + compile
    python benchmarks/gpu_step.py --impls jax --attention-impl cudnn
    python benchmarks/gpu_step.py --preset small --height 256 --width 256 --frames 65 --text-tokens 128

Not run by the session that wrote it: no GPU was lent to that task, so there are no GPU numbers
from it. On CPU it runs at the ``tiny``/``small`` presets (tests/test_benchmark_scripts.py
runs it at ``tiny``); full size needs a GPU with >= 48 GB (weights 38 GB + activations).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

# Dense bf16 tensor-core peaks (TFLOP/s, no sparsity) from the vendors' datasheets.
PEAK_BF16_TFLOPS = {"H100 80GB HBM3": 989.0, "H100 PCIe": 756.0, "H200": 989.0, "A100": 312.0, "L40S": 362.0}
IMPLS = ("jax", "diffusers", "compile")
AUDIO_LATENTS_PER_SECOND = 16000 / 160 / 4  # sampling rate / hop / audio VAE time downsampling


@dataclasses.dataclass(frozen=True)
class Workload:
    """The step's sizes, from pixels: latent grid (F, H, W), audio latent frames A, text tokens S."""

    frames: int
    height: int
    width: int
    fps: float
    text_tokens: int

    @property
    def grid(self) -> tuple[int, int, int]:
        if (self.frames - 1) % 8 or self.height % 32 or self.width % 32:
            raise ValueError(f"need frames = 8k+1 and height/width multiples of 32, got {self}")
        return (self.frames - 1) // 8 + 1, self.height // 32, self.width // 32

    @property
    def video_tokens(self) -> int:
        F, H, W = self.grid
        return F * H * W

    @property
    def audio_frames(self) -> int:
        return round(self.frames / self.fps * AUDIO_LATENTS_PER_SECOND)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="LTX-2 one denoising step (CFG batch): JAX vs diffusers on one device.")
    p.add_argument("--preset", default="ltx2_19b", choices=("tiny", "small", "medium", "ltx2_19b", "ltx2_3_22b"))
    p.add_argument("--height", type=int, default=512)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--frames", type=int, default=121)
    p.add_argument("--fps", type=float, default=24.0)
    p.add_argument("--text-tokens", type=int, default=1024)
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    p.add_argument("--impls", default=",".join(IMPLS), help=f"comma-separated subset of {IMPLS}")
    p.add_argument("--attention-impl", default="auto", help="TransformerConfig.attention_impl for ours")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default: looked up)")
    p.add_argument("--json", default=None, help="write the results here as JSON")
    p.add_argument("--worker", default=None, choices=IMPLS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    bad = sorted(set(args.impls.split(",")) - set(IMPLS))
    if bad:
        p.error(f"--impls: unknown {bad}; choose from {IMPLS}")
    if args.rounds < 1 or args.warmup < 0:
        p.error("--rounds must be >= 1 and --warmup >= 0")
    return args


def workload(args: argparse.Namespace) -> Workload:
    return Workload(args.frames, args.height, args.width, args.fps, args.text_tokens)


def step_flops(args: argparse.Namespace) -> int:
    """Analytic matmul FLOPs of one step: one transformer forward at batch 2 (CFG)."""
    from ltx2.config import TransformerConfig

    w = workload(args)
    cfg = getattr(TransformerConfig, args.preset)()
    return cfg.forward_flops(w.video_tokens, w.audio_frames, w.text_tokens, batch_size=2)


def mfu(flops: int, seconds: float, peak_tflops: float | None) -> tuple[float, float | None]:
    """(achieved TFLOP/s, model FLOPs utilisation in [0, 1] or None without a peak)."""
    achieved = flops / seconds / 1e12
    return achieved, (achieved / peak_tflops if peak_tflops else None)


def _inputs(args: argparse.Namespace, channels: tuple[int, int, int]) -> dict[str, Any]:
    import numpy as np

    w, rng = workload(args), np.random.default_rng(0)
    c_video, c_audio, c_text = channels
    mask = np.ones((2, w.text_tokens), np.float32)
    mask[0, : w.text_tokens // 2] = 0  # the negative prompt is shorter (left padding)
    return {
        "latents": rng.normal(size=(1, w.video_tokens, c_video)).astype(np.float32),
        "audio_latents": rng.normal(size=(1, w.audio_frames, c_audio)).astype(np.float32),
        "text": rng.normal(size=(2, w.text_tokens, c_text)).astype(np.float32),
        "mask": mask,
    }


T, SIGMA, SIGMA_NEXT, GUIDANCE = 500.0, 0.5, 0.45, 4.0


def _timed_rounds(fn: Any, sync: Any, args: argparse.Namespace) -> tuple[float, list[float]]:
    start = time.perf_counter()
    for _ in range(max(args.warmup, 1)):
        sync(fn())
    warm = time.perf_counter() - start
    samples = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        sync(fn())
        samples.append(time.perf_counter() - start)
    return warm, samples


def run_jax(args: argparse.Namespace) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from ltx2.config import TransformerConfig
    from ltx2.transformer import LTX2Transformer

    cfg = getattr(TransformerConfig, args.preset)(
        attention_impl=args.attention_impl, dtype=args.dtype, param_dtype=args.dtype
    )
    w = workload(args)
    F, H, W = w.grid
    # Random weights created on the device in their dtype: no host copy of 38 GB.
    model = nnx.jit(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)))()
    graphdef, state = nnx.split(model)
    text_dim = cfg.caption_channels if cfg.use_prompt_embeddings else cfg.cross_attention_dim
    x = {k: jnp.asarray(v) for k, v in _inputs(args, (cfg.in_channels, cfg.audio_in_channels, text_dim)).items()}
    if not cfg.use_prompt_embeddings:
        x["audio_text"] = x["text"][..., : cfg.audio_cross_attention_dim]
    sigma = jnp.full((2,), T) if cfg.prompt_modulation else None

    def mix(lat: jax.Array, pred: jax.Array) -> jax.Array:
        pred = pred.astype(jnp.float32)
        return lat + (SIGMA_NEXT - SIGMA) * (pred[:1] + GUIDANCE * (pred[1:] - pred[:1]))

    @jax.jit
    def step(state: Any, x: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        lat, alat = x["latents"], x["audio_latents"]
        v, va = nnx.merge(graphdef, state)(
            jnp.concatenate([lat, lat]),
            jnp.concatenate([alat, alat]),
            x["text"],
            x.get("audio_text", x["text"]),
            jnp.full((2,), T),
            sigma=sigma,
            encoder_attention_mask=x["mask"],
            audio_encoder_attention_mask=x["mask"],
            num_frames=F,
            height=H,
            width=W,
            fps=args.fps,
            audio_num_frames=w.audio_frames,
        )
        return mix(lat, v), mix(alat, va)

    t0 = time.perf_counter()
    compiled = step.lower(state, x).compile()
    compile_s = time.perf_counter() - t0
    warm, samples = _timed_rounds(lambda: compiled(state, x), jax.block_until_ready, args)
    device = jax.devices()[0]
    return dict(compile_s=compile_s, warmup_s=warm, samples_s=samples, device=str(device.device_kind))


def run_torch(args: argparse.Namespace, compiled: bool) -> dict[str, Any]:
    import torch
    from diffusers import LTX2VideoTransformer3DModel

    from ltx2.config import KNOBS, TransformerConfig

    cfg = getattr(TransformerConfig, args.preset)()
    kwargs = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in set(KNOBS)}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, args.dtype)
    torch.set_default_dtype(dtype)  # parameters are created in bf16 on the device: no fp32 copy
    with torch.device(device):
        model = LTX2VideoTransformer3DModel(**kwargs).eval()
    torch.set_default_dtype(torch.float32)
    w = workload(args)
    F, H, W = w.grid
    text_dim = cfg.caption_channels if cfg.use_prompt_embeddings else cfg.cross_attention_dim
    x = {
        k: torch.from_numpy(v).to(device)
        for k, v in _inputs(args, (cfg.in_channels, cfg.audio_in_channels, text_dim)).items()
    }
    audio_text = x["text"] if cfg.use_prompt_embeddings else x["text"][..., : cfg.audio_cross_attention_dim]
    sigma = torch.full((2,), T, device=device) if cfg.prompt_modulation else None
    forward = torch.compile(model) if compiled else model

    def mix(lat: Any, pred: Any) -> Any:
        pred = pred.float()
        return lat + (SIGMA_NEXT - SIGMA) * (pred[:1] + GUIDANCE * (pred[1:] - pred[:1]))

    def step() -> Any:
        with torch.inference_mode():
            lat, alat = x["latents"], x["audio_latents"]
            v, va = forward(
                hidden_states=torch.cat([lat, lat]).to(dtype),
                audio_hidden_states=torch.cat([alat, alat]).to(dtype),
                encoder_hidden_states=x["text"].to(dtype),
                audio_encoder_hidden_states=audio_text.to(dtype),
                timestep=torch.full((2,), T, device=device, dtype=dtype),
                sigma=sigma,
                encoder_attention_mask=x["mask"],
                audio_encoder_attention_mask=x["mask"],
                num_frames=F,
                height=H,
                width=W,
                fps=args.fps,
                audio_num_frames=w.audio_frames,
                return_dict=False,
            )
            return mix(lat, v), mix(alat, va)

    sync = (lambda _: torch.cuda.synchronize()) if device == "cuda" else (lambda _: None)
    warm, samples = _timed_rounds(step, sync, args)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return dict(compile_s=warm if compiled else 0.0, warmup_s=warm, samples_s=samples, device=name)


def _worker(args: argparse.Namespace) -> None:
    result = run_jax(args) if args.worker == "jax" else run_torch(args, compiled=args.worker == "compile")
    print("RESULT " + json.dumps(result), flush=True)


def _spawn(impl: str, argv: list[str]) -> dict[str, Any]:
    """One implementation in a fresh interpreter; its last ``RESULT`` line is the answer."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv, "--worker", impl],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {"error": f"exit {proc.returncode}: {proc.stderr.strip()[-2000:]}"}
    return json.loads(lines[-1][len("RESULT ") :])


def _peak(args: argparse.Namespace, device: str) -> float | None:
    if args.peak_tflops:
        return args.peak_tflops
    return next((v for k, v in PEAK_BF16_TFLOPS.items() if k in device), None) if args.dtype == "bfloat16" else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    w, flops = workload(args), step_flops(args)
    print(
        f"{args.preset} {args.dtype}: {args.frames}x{args.height}x{args.width} px -> grid {w.grid}, "
        f"{w.video_tokens} video + {w.audio_frames} audio + {w.text_tokens} text tokens, batch 2 (CFG); "
        f"{flops / 1e12:.3g} analytic TFLOP per step"
    )
    results: dict[str, Any] = {}
    for impl in args.impls.split(","):
        r = results[impl] = _spawn(impl, argv)
        if "error" in r:
            print(f"  {impl:10s} FAILED {r['error']}")
            continue
        r["median_s"] = statistics.median(r["samples_s"])
        r["tflops"], r["mfu"] = mfu(flops, r["median_s"], _peak(args, r["device"]))
        util = "n/a (pass --peak-tflops)" if r["mfu"] is None else f"{100 * r['mfu']:.1f}%"
        print(
            f"  {impl:10s} median {r['median_s'] * 1e3:9.2f} ms  compile/warm-up {r['compile_s']:7.1f} s  "
            f"{r['tflops']:8.3g} TFLOP/s  MFU {util}  [{r['device']}]"
        )
    if "jax" in results and "median_s" in results["jax"]:
        for other in ("diffusers", "compile"):
            if "median_s" in results.get(other, {}):
                print(f"  speed-up of jax over {other}: {results[other]['median_s'] / results['jax']['median_s']:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "analytic_flops": flops, "results": results}, fh, indent=1)
    return 1 if any("error" in r for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
