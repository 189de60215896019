"""The cases ``test_vs_diffusers.py`` times: each builds our jitted function and diffusers' module with the
same converted weights and inputs (see that module's docstring for what each case runs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.config import KNOBS, TransformerConfig
from ltx2.convert.pipeline import diffusers_call_kwargs
from ltx2.text.connectors import ConnectorsConfig
from ltx2.vae.audio import AudioVAEConfig
from ltx2.vae.video import VideoVAEConfig
from ltx2.vae.vocoder import VocoderConfig

PRESETS = ("tiny", "small")
Knobs = tuple[str, bool, bool]  # pipeline.guidance_batching, stg_fork, text_kv_cache
DEFAULT_KNOBS: Knobs = ("batched", True, True)
# The guided step's knobs: the defaults, each one switched back alone, and all three (diffusers' way).
KNOB_VARIANTS: dict[str, Knobs] = {
    "sequential": ("sequential", True, True),
    "no-fork": ("batched", False, True),
    "no-text-kv": ("batched", True, False),
    "old": ("sequential", False, False),
}
DTYPES = ("float32", "bfloat16")
_OURS_ONLY = set(KNOBS)


@dataclasses.dataclass(frozen=True)
class Shapes:
    """Latent grid (F, H, W), audio latent frames A, text tokens S; batch is 2 (CFG) or 1 (decode)."""

    grid: tuple[int, int, int]
    audio_frames: int
    text_tokens: int


# small = experiments/cpu.toml's workload (256x256 px, 65 frames -> 9x8x8 latents, 68 audio
# frames, 128 text tokens), also medium's; the VAE decodes a 3x4x4 latent (17 frames of 128x128).
SHAPES = {"tiny": Shapes((2, 4, 4), 8, 16), "small": Shapes((9, 8, 8), 68, 128)}
SHAPES["medium"] = SHAPES["small"]
MATMUL_N = 2048
VAE_GRID = {"tiny": (2, 4, 4), "small": (3, 4, 4)}


def _transformer_config(preset: str) -> TransformerConfig:
    return getattr(TransformerConfig, preset)()


def _connectors_config(preset: str) -> ConnectorsConfig:
    if preset == "tiny":
        return ConnectorsConfig.tiny()
    streams = {
        f"{m}_connector_{k}": v
        for m in ("video", "audio")
        for k, v in (
            ("num_attention_heads", 4),
            ("attention_head_dim", 32),
            ("num_layers", 2),
            ("num_learnable_registers", 128),
        )
    }
    # small: the `small` transformer's 128 caption channels, Gemma-3's 49 hidden states per token.
    return ConnectorsConfig.tiny(caption_channels=128, text_proj_in_factor=49, **streams)


def _audio_configs(preset: str) -> tuple[AudioVAEConfig, VocoderConfig]:
    if preset == "tiny":
        return AudioVAEConfig.tiny(), VocoderConfig.tiny()
    # small: the released layout (64 mel bins, 8 latent channels, 240x upsampling) at narrow widths.
    return (
        AudioVAEConfig(base_channels=32, ch_mult=(1, 2, 4), num_res_blocks=2, latent_channels=8, mel_bins=64),
        VocoderConfig(in_channels=128, hidden_channels=128),
    )


@dataclasses.dataclass
class Built:
    """A case: ``jax_fn(*jax_args)`` (jitted by the harness) against eager ``torch_fn()``."""

    jax_fn: Callable[..., Any]
    jax_args: tuple[Any, ...]
    torch_fn: Callable[[], Any]
    info: dict[str, Any]
    jit: bool = True  # False: jax_fn compiles its own programs on first call


def _torch_dtype(dtype: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]


def _kwargs(cfg: Any) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _OURS_ONLY}


def _rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.normal(size=shape).astype(np.float32)


def _jax_call(module: nnx.Module, fn: Callable[..., Any]) -> tuple[Callable[..., Any], nnx.State]:
    graphdef, state = nnx.split(module)
    return (lambda state, *a: fn(nnx.merge(graphdef, state), *a)), state


# ---------------------------------------------------------------------------- transformer step


def step_case(preset: str, dtype: str) -> Built:
    import torch
    from diffusers import LTX2VideoTransformer3DModel

    from ltx2.convert.transformer import from_diffusers

    cfg, shapes = _transformer_config(preset), SHAPES[preset]
    torch.manual_seed(0)
    ref = LTX2VideoTransformer3DModel(**_kwargs(cfg)).eval().to(_torch_dtype(dtype))
    ours = from_diffusers(ref, attention_impl="auto", dtype=dtype, param_dtype=dtype)
    F, H, W = shapes.grid
    A, S, rng = shapes.audio_frames, shapes.text_tokens, np.random.default_rng(0)
    latents, audio = _rand(rng, 1, F * H * W, cfg.in_channels), _rand(rng, 1, A, cfg.audio_in_channels)
    text, audio_text = _rand(rng, 2, S, cfg.caption_channels), _rand(rng, 2, S, cfg.caption_channels)
    mask = np.ones((2, S), np.float32)
    mask[0, : S // 2] = 0  # the negative prompt is shorter (left padding)
    t, sigma, sigma_next, guidance = 500.0, 0.5, 0.45, 4.0
    static = dict(num_frames=F, height=H, width=W, audio_num_frames=A)

    def mix(x: Any, pred: Any) -> Any:  # CFG on [uncond, cond] rows, then the Euler step, in fp32
        pred = pred.float() if isinstance(pred, torch.Tensor) else pred.astype(jnp.float32)
        return x + (sigma_next - sigma) * (pred[:1] + guidance * (pred[1:] - pred[:1]))

    def jax_step(model: Any, x: Any, a: Any, txt: Any, atxt: Any, m: Any) -> Any:
        v, va = model(
            jnp.concatenate([x, x]),
            jnp.concatenate([a, a]),
            txt,
            atxt,
            jnp.full((2,), t),
            encoder_attention_mask=m,
            audio_encoder_attention_mask=m,
            **static,
        )
        return mix(x, v), mix(a, va)

    fn, state = _jax_call(ours, jax_step)
    j = [jnp.asarray(v) for v in (latents, audio, text, audio_text, mask)]
    tt = [torch.from_numpy(v) for v in (latents, audio, text, audio_text, mask)]
    td = _torch_dtype(dtype)

    def torch_step() -> Any:
        x, a, txt, atxt, m = tt
        v, va = ref(
            hidden_states=torch.cat([x, x]).to(td),
            audio_hidden_states=torch.cat([a, a]).to(td),
            encoder_hidden_states=txt.to(td),
            audio_encoder_hidden_states=atxt.to(td),
            timestep=torch.full((2,), t, dtype=td),
            encoder_attention_mask=m,
            audio_encoder_attention_mask=m,
            return_dict=False,
            **static,
        )
        return mix(x, v), mix(a, va)

    tokens = dict(video_tokens=F * H * W, audio_tokens=A, text_tokens=S, batch=2)
    flops = cfg.forward_flops(F * H * W, A, S, batch_size=2)
    return Built(fn, (state, *j), torch_step, dict(tokens, analytic_gflop=flops / 1e9))


# ---------------------------------------------------------------------------- other components


def connectors_case(preset: str, dtype: str) -> Built:
    import torch
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    from ltx2.convert.connectors import from_diffusers

    cfg = _connectors_config(preset)
    torch.manual_seed(0)
    ref = LTX2TextConnectors(**_kwargs(cfg)).eval().to(_torch_dtype(dtype))
    ours = from_diffusers(ref, dtype=dtype, param_dtype=dtype)
    S, rng = SHAPES[preset].text_tokens, np.random.default_rng(0)
    x = _rand(rng, 2, S, cfg.text_encoder_dim)
    mask = np.ones((2, S), np.int64)
    mask[0, : S // 2] = 0
    fn, state = _jax_call(ours, lambda m, x, mask: m(x, mask))
    tx, tm = torch.from_numpy(x).to(_torch_dtype(dtype)), torch.from_numpy(mask)
    return Built(fn, (state, jnp.asarray(x), jnp.asarray(mask, jnp.int32)), lambda: ref(tx, tm), {})


def video_vae_case(preset: str, dtype: str) -> Built:
    import torch
    from diffusers import AutoencoderKLLTX2Video

    from ltx2.convert.video_vae import from_diffusers

    cfg = getattr(VideoVAEConfig, preset)()
    torch.manual_seed(0)
    ref = AutoencoderKLLTX2Video(**_kwargs(cfg)).eval().to(_torch_dtype(dtype))
    ours = from_diffusers(ref, dtype=dtype)
    z = _rand(np.random.default_rng(0), 1, cfg.latent_channels, *VAE_GRID[preset])
    fn, state = _jax_call(ours, lambda m, z: m.decode(z))
    tz = torch.from_numpy(z).to(_torch_dtype(dtype))
    return Built(fn, (state, jnp.asarray(z)), lambda: ref.decode(tz).sample, {"latent_grid": VAE_GRID[preset]})


def audio_case(preset: str, dtype: str) -> Built:
    import torch
    from diffusers import AutoencoderKLLTX2Audio
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    from ltx2.convert import from_diffusers

    vae_cfg, voc_cfg = _audio_configs(preset)
    torch.manual_seed(0)
    td = _torch_dtype(dtype)
    ref_vae = AutoencoderKLLTX2Audio(**_kwargs(vae_cfg)).eval().to(td)
    ref_voc = LTX2Vocoder(**_kwargs(voc_cfg)).eval().to(td)
    vae, voc = from_diffusers(ref_vae, dtype=dtype), from_diffusers(ref_voc, dtype=dtype)
    assert vae_cfg.latent_mel_bins is not None
    latent_shape = (vae_cfg.latent_channels, SHAPES[preset].audio_frames, vae_cfg.latent_mel_bins)
    z = _rand(np.random.default_rng(0), 1, *latent_shape)
    graph_vae, state_vae = nnx.split(vae)
    graph_voc, state_voc = nnx.split(voc)

    def fn(s_vae: Any, s_voc: Any, z: Any) -> Any:
        return nnx.merge(graph_voc, s_voc)(nnx.merge(graph_vae, s_vae).decode(z))

    tz = torch.from_numpy(z).to(td)
    return Built(fn, (state_vae, state_voc, jnp.asarray(z)), lambda: ref_voc(ref_vae.decode(tz).sample), {})


def loop_case(preset: str, dtype: str, knobs: Knobs = DEFAULT_KNOBS) -> Built:
    import torch

    from ltx2.convert import from_diffusers
    from ltx2.pipeline import LTX2Pipeline
    from ltx2.pipeline_config import PipelineConfig

    if dtype != "float32":
        pytest.skip("the whole-loop case runs the pipeline presets' float32 components only")
    cfg = getattr(PipelineConfig, preset)()
    batching, fork, text_kv = knobs
    cfg = cfg.replace(pipeline=cfg.pipeline.replace(guidance_batching=batching, stg_fork=fork, text_kv_cache=text_kv))
    ref = _diffusers_pipeline(cfg)
    ours = LTX2Pipeline(
        cfg,
        transformer=from_diffusers(ref.transformer, attention_impl="auto"),
        connectors=from_diffusers(ref.connectors),
        video_vae=from_diffusers(ref.vae),
        audio_vae=from_diffusers(ref.audio_vae),
        vocoder=from_diffusers(ref.vocoder),
    )
    plan, rng = ours.plan(), np.random.default_rng(0)
    s, d = cfg.text_encoder.max_sequence_length, cfg.connectors.text_encoder_dim
    pos, neg = (_rand(rng, 1, s, d) for _ in range(2))
    pos_mask, neg_mask = np.ones((1, s), np.int64), np.ones((1, s), np.int64)
    pos_mask[0, : s // 4], neg_mask[0, : s // 2] = 0, 0
    video = _rand(rng, 1, cfg.video_vae.latent_channels, plan.frames, plan.height, plan.width)
    audio = _rand(rng, 1, cfg.audio_vae.latent_channels, plan.audio_frames, plan.latent_mel_bins)
    schedule, scales = ours.schedule(plan), ours.scales()

    def jax_loop() -> Any:
        text = ours.embed_text(pos, pos_mask, neg, neg_mask)
        return ours.denoise(ours.prepare_latents(plan, video=video, audio=audio), text, schedule, scales, plan)

    t = torch.from_numpy
    kwargs = dict(
        prompt_embeds=t(pos),
        prompt_attention_mask=t(pos_mask),
        negative_prompt_embeds=t(neg),
        negative_prompt_attention_mask=t(neg_mask),
        **diffusers_call_kwargs(cfg),
        latents=t(video),
        audio_latents=t(audio),
        output_type="latent",
        return_dict=False,
    )
    info = dict(
        steps=cfg.pipeline.num_inference_steps, video_tokens=plan.frames * plan.height * plan.width, **_knob_info(knobs)
    )
    return Built(jax_loop, (), lambda: ref(**kwargs), info, jit=False)


def guided_step_case(preset: str, dtype: str, knobs: Knobs = DEFAULT_KNOBS) -> Built:
    """One denoising step with every guidance pass (CFG + STG at block 1 + modality isolation, rescale
    on: the ``LTX2Pipeline`` defaults) on one video. diffusers: the pipeline's three forwards and its
    x0-space guidance, then the Euler step, as ``LTX2Pipeline.__call__`` runs one loop iteration.
    Ours: :func:`ltx2.denoise.guided_step` under the knobs; text keys/values the knobs cache per
    video are computed before the timed calls (once per video, not per step)."""
    import torch
    from diffusers import LTX2VideoTransformer3DModel

    from ltx2.convert.transformer import from_diffusers
    from ltx2.denoise import Latents, TextEmbeddings, guided_step, text_kv_once
    from ltx2.guidance import GuidanceConfig, GuidancePasses
    from ltx2.latents import Plan

    cfg, shapes = _transformer_config(preset).replace(perturbed_attn=True), SHAPES[preset]
    torch.manual_seed(0)
    td = _torch_dtype(dtype)
    ref = LTX2VideoTransformer3DModel(**_kwargs(cfg)).eval().to(td)
    ours = from_diffusers(ref, attention_impl="auto", dtype=dtype, param_dtype=dtype)
    (F, H, W), A, S, rng = shapes.grid, shapes.audio_frames, shapes.text_tokens, np.random.default_rng(0)
    guidance, stg_blocks = GuidanceConfig(), (1,)
    plan = Plan(
        batch=1,
        frames=F,
        height=H,
        width=W,
        audio_frames=A,
        latent_mel_bins=16,
        fps=24.0,
        passes=GuidancePasses(True, True, True),
        stg_blocks=stg_blocks,
        use_cross_timestep=True,
        patch_size=1,
        patch_size_t=1,
        guidance_batching=knobs[0],
        stg_fork=knobs[1],
        text_kv_cache=knobs[2],
    )
    x, a = _rand(rng, 1, F * H * W, cfg.in_channels), _rand(rng, 1, A, cfg.audio_in_channels)
    text, audio_text = _rand(rng, 2, S, cfg.caption_channels), _rand(rng, 2, S, cfg.caption_channels)
    mask = np.ones((2, S), np.int64)
    mask[0, : S // 2] = 0  # the negative prompt is shorter (left padding)
    t, sigma, sigma_next = 500.0, 0.5, 0.45
    graphdef, state = nnx.split(ours)
    embeds = TextEmbeddings(jnp.asarray(text), jnp.asarray(audio_text), jnp.asarray(mask, jnp.int32))
    kv = text_kv_once(graphdef, state, embeds, plan=plan)

    def jax_step(state: Any, latents: Any, embeds: Any, kv: Any, scales: Any) -> Any:
        model = nnx.merge(graphdef, state)
        return guided_step(
            model, plan, latents, embeds, jnp.float32(sigma), jnp.float32(sigma_next), jnp.float32(t), scales, kv
        )

    latents = Latents(jnp.asarray(x), jnp.asarray(a))
    tx, ta = torch.from_numpy(x), torch.from_numpy(a)
    ttext, tatext = (torch.from_numpy(v).to(td) for v in (text, audio_text))
    tmask = torch.from_numpy(mask)
    static = dict(num_frames=F, height=H, width=W, audio_num_frames=A, use_cross_timestep=True, return_dict=False)

    def forward(rows: slice, copies: int, **kw: Any) -> tuple[Any, Any]:
        ts = torch.full((copies,), t, dtype=td)
        v, va = ref(
            hidden_states=torch.cat([tx] * copies).to(td),
            audio_hidden_states=torch.cat([ta] * copies).to(td),
            encoder_hidden_states=ttext[rows],
            audio_encoder_hidden_states=tatext[rows],
            timestep=ts,
            sigma=ts,
            encoder_attention_mask=tmask[rows],
            audio_encoder_attention_mask=tmask[rows],
            **static,
            **kw,
        )
        return v.float(), va.float()

    def torch_step() -> Any:
        (v2, va2), pos = forward(slice(0, 2), 2), slice(1, 2)
        stg = forward(pos, 1, spatio_temporal_guidance_blocks=list(stg_blocks))
        iso = forward(pos, 1, isolate_modalities=True)
        g = guidance
        video = _torch_guide(
            tx,
            v2,
            stg[0],
            iso[0],
            sigma,
            sigma_next,
            g.guidance_scale,
            g.stg_scale,
            g.modality_scale,
            g.guidance_rescale,
        )
        audio = _torch_guide(
            ta,
            va2,
            stg[1],
            iso[1],
            sigma,
            sigma_next,
            g.audio_guidance_scale,
            g.audio_stg_scale,
            g.audio_modality_scale,
            g.audio_guidance_rescale,
        )
        return video, audio

    L = F * H * W
    flops = cfg.forward_flops(L, A, S, batch_size=4)  # diffusers' rows: CFG pair, STG, isolated
    info = dict(
        video_tokens=L,
        audio_tokens=A,
        text_tokens=S,
        rows=4,
        analytic_gflop=flops / 1e9,
        stg_blocks=list(stg_blocks),
        num_layers=cfg.num_layers,
        **_knob_info(knobs),
    )
    return Built(jax_step, (state, latents, embeds, kv, guidance.scales()), torch_step, info)


def _torch_guide(
    x: Any,
    v_pair: Any,
    v_stg: Any,
    v_iso: Any,
    sigma: float,
    sigma_next: float,
    cfg: float,
    stg: float,
    modality: float,
    rescale: float,
) -> Any:
    """``LTX2Pipeline.__call__``'s guidance (x0 space, deltas, ``rescale_noise_cfg``) and Euler step."""
    from diffusers.pipelines.ltx2.pipeline_ltx2 import rescale_noise_cfg

    x0 = lambda v: x - v * sigma  # noqa: E731
    uncond, cond = x0(v_pair[:1]), x0(v_pair[1:])
    guided = cond + (cfg - 1) * (cond - uncond) + stg * (cond - x0(v_stg)) + (modality - 1) * (cond - x0(v_iso))
    if rescale > 0:
        guided = rescale_noise_cfg(guided, cond, guidance_rescale=rescale)
    return x + (sigma_next - sigma) * (x - guided) / sigma


def matmul_case(preset: str, dtype: str) -> Built:
    """``a @ b``, ``MATMUL_N`` squared, float32: the machine's matmul ceiling, for FLOP/s fractions."""
    import torch

    rng = np.random.default_rng(0)
    a, b = _rand(rng, MATMUL_N, MATMUL_N), _rand(rng, MATMUL_N, MATMUL_N)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    info = dict(analytic_gflop=2 * MATMUL_N**3 / 1e9, matmul_reference=f"{MATMUL_N}x{MATMUL_N} float32 matmul")
    return Built(lambda a, b: a @ b, (jnp.asarray(a), jnp.asarray(b)), lambda: ta @ tb, info)


def _diffusers_pipeline(cfg: Any) -> Any:
    """diffusers ``LTX2Pipeline`` of ``cfg``'s sizes (random weights, no text encoder)."""
    import torch
    from diffusers import (
        AutoencoderKLLTX2Audio,
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        LTX2VideoTransformer3DModel,
    )
    from diffusers import LTX2Pipeline as Reference
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    torch.manual_seed(0)
    return Reference(
        scheduler=FlowMatchEulerDiscreteScheduler(**dataclasses.asdict(cfg.scheduler)),
        vae=AutoencoderKLLTX2Video(**_kwargs(cfg.video_vae)).eval(),
        audio_vae=AutoencoderKLLTX2Audio(**_kwargs(cfg.audio_vae)).eval(),
        text_encoder=None,
        tokenizer=None,
        connectors=LTX2TextConnectors(**_kwargs(cfg.connectors)).eval(),
        transformer=LTX2VideoTransformer3DModel(**_kwargs(cfg.transformer)).eval(),
        vocoder=LTX2Vocoder(**_kwargs(cfg.vocoder)).eval(),
    )


def _knob_info(knobs: Knobs) -> dict[str, Any]:
    return dict(guidance_batching=knobs[0], stg_fork=knobs[1], text_kv_cache=knobs[2])
