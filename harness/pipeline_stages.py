"""Harness stages over :class:`ltx2.pipeline.LTX2Pipeline`'s compiled stage bodies.

``text_encode`` (Gemma-3 + connectors), ``denoise_loop`` (every step with guidance, scan or
Python loop), ``video_decode``, ``audio_decode`` (audio VAE + vocoder) and ``upsample``. Each
compiles from abstract, sharded ``ShapeDtypeStruct``s (no weights allocated) for its static
metrics, and runs on random weights for timings.

Batch convention (shared with ``denoise_step``): ``workload.batch`` counts transformer rows of
the conditional + unconditional pass, so with classifier-free guidance ``batch = 2`` is one
video; without it, ``batch`` videos. Each component is laid out by its own config's
``sharding``; the VAEs, vocoder and upsampler follow ``pipeline.vae_replication`` under the
transformer's strategy (:func:`ltx2.components.vae_configs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from harness.workload import BuildContext, JaxStage, Stage, StageUnavailable, abstract_state, build_config, random_state

STAGES = ("text_encode", "denoise_loop", "video_decode", "audio_decode", "upsample")


@dataclass(frozen=True)
class _Setup:
    cfg: Any  # ltx2.pipeline_config.PipelineConfig (VAE layouts resolved)
    plan: Any  # ltx2.latents.Plan
    videos: int
    rows: int  # transformer rows per guided step (all guidance passes)


def pipeline_config(preset: str, overrides: Mapping[str, Any], wl: Mapping[str, Any]) -> Any:
    """The preset's :class:`PipelineConfig` with overrides applied and the workload's size and steps."""
    from ltx2.components import vae_configs
    from ltx2.pipeline_config import PipelineConfig

    cfg = PipelineConfig(**build_config(preset, overrides))
    opts = cfg.pipeline.replace(height=wl["height"], width=wl["width"], num_frames=wl["num_frames"],
                                frame_rate=float(wl["frame_rate"]), num_inference_steps=wl["steps"])  # fmt: skip
    return vae_configs(cfg.replace(pipeline=opts))


def _setup(ctx: BuildContext) -> _Setup:
    from ltx2.latents import Plan

    cfg = pipeline_config(ctx.preset, ctx.overrides, ctx.workload)
    passes = cfg.guidance.passes()
    batch = ctx.workload["batch"]
    if passes.cfg and batch % 2:
        raise ValueError(f"workload.batch={batch} counts rows of the CFG pass (2 per video); it must be even")
    videos = batch // 2 if passes.cfg else batch
    rows = videos * (2 * passes.cfg + (not passes.cfg) + passes.stg + passes.modality)
    return _Setup(cfg, Plan.build(cfg, batch=videos), videos, rows)


def _sds(shape: tuple[int, ...], dtype: Any, names: tuple[str | None, ...], strategy: str, mesh: Any) -> Any:
    import jax

    from ltx2.sharding import input_sharding

    return jax.ShapeDtypeStruct(shape, dtype, sharding=input_sharding(names, strategy, mesh, shape))


def _concrete(abstract: Any, seed: int, fill: Callable[[Any, Any], Any] | None = None) -> Any:
    """Random (or ``fill``-ed) host arrays placed like the ``ShapeDtypeStruct`` tree ``abstract``."""
    import jax
    import numpy as np

    rng = np.random.default_rng(seed)

    def leaf(a: Any) -> Any:
        host = fill(a, rng) if fill is not None else rng.standard_normal(a.shape, np.float32).astype(a.dtype)
        return jax.device_put(np.asarray(host, a.dtype), a.sharding)

    return jax.tree.map(leaf, abstract)


def _replicated(mesh: Any) -> Any:
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    return NamedSharding(mesh, P())


def _replicated_like(tree: Any, mesh: Any) -> Any:
    """Abstract, replicated twins of concrete host values (schedules, guidance scales)."""
    import jax
    import numpy as np

    rep = _replicated(mesh)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=rep), tree)


def _put(tree: Any, abstract: Any) -> Any:
    import jax

    return jax.tree.map(lambda x, a: jax.device_put(x, a.sharding), tree, abstract)


# --------------------------------------------------------------------------- text


def _build_text_encode(ctx: BuildContext) -> Stage:
    """Gemma-3 over the positive and negative prompts (``text_encoder.batching``), then the connectors."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ltx2.components import random_gemma
    from ltx2.denoise import TextEmbeddings
    from ltx2.text.connectors import LTX2TextConnectors
    from ltx2.text.gemma import encode_pair_with

    s = _setup(ctx)
    cfg, mesh = s.cfg, ctx.mesh
    if cfg.gemma.hidden_size * cfg.gemma.num_hidden_layers > 4096 * 64:
        raise StageUnavailable("text_encode at full size: the Gemma-3 encoder runs through torchax, which needs "
                               "its PyTorch weights materialised on the host (48 GB fp32 for 12B); compile-only "
                               "analysis covers the DiT and the decoders")  # fmt: skip
    videos, seq = s.videos, ctx.workload["text_tokens"]
    strategy = cfg.connectors.sharding
    cgraph, cstate = abstract_state(lambda: LTX2TextConnectors(cfg.connectors, rngs=_rngs(ctx.seed)), strategy, mesh)
    encoder = random_gemma(cfg.replace(text_encoder=dataclasses.replace(cfg.text_encoder, max_sequence_length=seq)),
                           ctx.seed)  # fmt: skip
    cfg_on = s.plan.passes.cfg
    tokens = (videos, seq)
    ids_names = ("activation_batch", None)

    def connect(state: Any, hidden: Any, mask: Any) -> Any:
        from flax import nnx

        return TextEmbeddings(*nnx.merge(cgraph, state)(hidden, mask))

    def ids_and_masks(rng: Any) -> tuple[Any, ...]:
        out = []
        for _ in range(2 if cfg_on else 1):
            ids = rng.integers(1, cfg.gemma.vocab_size, tokens, dtype=np.int32)
            mask = np.ones(tokens, np.int32)
            mask[:, : seq // 4] = 0  # left padding, as the tokenizer writes it
            out += [ids, mask]
        return tuple(out)

    notes = [f"text_encode = Gemma-3 ({cfg.text_encoder.placement}, batching {cfg.text_encoder.batching}) "
             "+ text connectors; random token ids, left padded by a quarter"]  # fmt: skip
    if cfg.text_encoder.placement == "host":
        # PyTorch on the host: only the connectors are an XLA program.
        abstract_in = (cstate, _sds((videos * (1 + cfg_on), seq, encoder.hidden_size, encoder.num_hidden_states),
                                    jnp.float32, ("activation_batch", None, None, None), strategy, mesh),
                       _sds((videos * (1 + cfg_on), seq), jnp.int32, ids_names, strategy, mesh))  # fmt: skip
        connect_jit = jax.jit(connect)

        def run_host(state: Any, *ids_masks: Any) -> Any:
            hidden: Any
            if cfg_on:
                pos, neg = encoder.encode_pair(*ids_masks)
                hidden, mask = np.concatenate([neg, pos]), np.concatenate([ids_masks[3], ids_masks[1]])
            else:
                hidden, mask = encoder.encode(*ids_masks), ids_masks[1]
            return connect_jit(state, jax.device_put(hidden, abstract_in[1].sharding),
                               jax.device_put(mask, abstract_in[2].sharding))  # fmt: skip

        def make_host() -> tuple[Any, ...]:
            return (random_state(cstate, ctx.seed), *ids_and_masks(np.random.default_rng(ctx.seed + 1)))

        return HostStage("text_encode", connect_jit, abstract_in, make_host, host_run=run_host,
                         notes=notes + ["static metrics cover the connectors only: Gemma-3 runs in PyTorch on the "
                                        "host (text_encoder.placement = 'host')"])  # fmt: skip

    assert encoder.apply is not None and encoder.weights is not None
    apply = encoder.apply
    gemma_abstract = {k: _sds(tuple(v.shape), v.dtype, (None,) * v.ndim, strategy, mesh)
                      for k, v in encoder.weights.items()}  # fmt: skip

    def encode(gemma: Any, state: Any, *ids_masks: Any) -> Any:
        if not cfg_on:
            return connect(state, apply(gemma, ids_masks[0], ids_masks[1]), ids_masks[1])
        _, pos_mask, _, neg_mask = ids_masks  # as GemmaTextEncoder.encode_pair, with the weights traced
        pos, neg = encode_pair_with(partial(apply, gemma), cfg.text_encoder.batching, *ids_masks)
        return connect(state, jnp.concatenate([neg, pos]), jnp.concatenate([neg_mask, pos_mask]))

    id_sds = _sds(tokens, jnp.int32, ids_names, strategy, mesh)
    abstract_args = (gemma_abstract, cstate, *([id_sds] * (4 if cfg_on else 2)))

    def make_args() -> tuple[Any, ...]:
        gemma = _put(encoder.weights, gemma_abstract)
        ids = [jax.device_put(x, id_sds.sharding) for x in ids_and_masks(np.random.default_rng(ctx.seed + 1))]
        return (gemma, random_state(cstate, ctx.seed), *ids)

    return JaxStage("text_encode", jax.jit(encode), abstract_args, make_args, notes=notes,
                    extra={"text_tokens": seq, "videos": videos})  # fmt: skip


def _rngs(seed: int) -> Any:
    from flax import nnx

    return nnx.Rngs(seed)


@dataclass
class HostStage(JaxStage):
    """A stage whose run mixes host work (PyTorch, a Python loop) with a compiled program: ``fn``
    is the program analysed statically, ``host_run(*args)`` is what one call of the stage does."""

    host_run: Callable[..., Any] | None = None

    def run(self) -> Any:
        import jax

        if self.args is None or self.host_run is None:
            raise RuntimeError(f"stage {self.name}: run() before prepare()")
        return jax.block_until_ready(self.host_run(*self.args))


# --------------------------------------------------------------------------- denoising loop


def _loop_inputs(s: _Setup, ctx: BuildContext, strategy: str) -> tuple[Any, Any, Any, Any]:
    """Abstract latents and text embeddings; concrete schedule and guidance scales."""
    import jax.numpy as jnp
    import numpy as np

    from ltx2.denoise import Latents, Schedule, TextEmbeddings
    from ltx2.scheduler import sigma_schedule, timesteps

    cfg, plan, mesh, t = s.cfg, s.plan, ctx.mesh, s.cfg.transformer
    seq = ("activation_batch", "activation_length", None)
    text = ("activation_batch", "activation_text_length", None)
    dt = jnp.dtype(t.dtype)
    latents = Latents(_sds((s.videos, plan.video_tokens, t.in_channels), dt, seq, strategy, mesh),
                      _sds((s.videos, plan.audio_frames, t.audio_in_channels), dt, seq, strategy, mesh))  # fmt: skip
    rows, S = s.videos * (2 if plan.passes.cfg else 1), ctx.workload["text_tokens"]
    dv, da = (t.caption_channels, t.caption_channels) if t.use_prompt_embeddings else (t.inner_dim, t.audio_inner_dim)
    embeds = TextEmbeddings(_sds((rows, S, dv), dt, text, strategy, mesh),
                            _sds((rows, S, da), dt, text, strategy, mesh),
                            _sds((rows, S), jnp.int32, ("activation_batch", None), strategy, mesh))  # fmt: skip
    sched = cfg.scheduler
    sigmas = sigma_schedule(sched, cfg.pipeline.num_inference_steps, mu=sched.mu(plan.video_tokens))
    # Host arrays in the Schedule container: placed on the mesh by the stage (replicated).
    host_sigmas: Any = np.asarray(sigmas, np.float32)
    host_timesteps: Any = np.asarray(timesteps(sched, sigmas), np.float32)
    schedule = Schedule(host_sigmas, host_timesteps)
    scales = jax_to_host(cfg.guidance.scales())
    return latents, embeds, schedule, scales


def jax_to_host(tree: Any) -> Any:
    import jax
    import numpy as np

    return jax.tree.map(np.asarray, tree)


def _mask_fill(a: Any, rng: Any) -> Any:
    import numpy as np

    if np.issubdtype(a.dtype, np.integer):
        return np.ones(a.shape, a.dtype)
    return rng.standard_normal(a.shape, np.float32)


def _build_denoise_loop(ctx: BuildContext) -> Stage:
    """Every denoising step with all guidance passes: one ``lax.scan`` or a Python loop over one
    compiled step (``pipeline.diffusion_loop``)."""
    import jax

    from ltx2.denoise import denoise_scan, denoise_step, step_inputs
    from ltx2.transformer import LTX2Transformer

    s = _setup(ctx)
    cfg, plan, mesh = s.cfg, s.plan, ctx.mesh
    strategy = cfg.transformer.sharding
    graphdef, state = abstract_state(lambda: LTX2Transformer(cfg.transformer, rngs=_rngs(ctx.seed)), strategy, mesh)
    latents, embeds, schedule, scales = _loop_inputs(s, ctx, strategy)
    sched_abs, scales_abs = _replicated_like(schedule, mesh), _replicated_like(scales, mesh)
    steps = cfg.pipeline.num_inference_steps
    S = ctx.workload["text_tokens"]
    flops = float(cfg.transformer.forward_flops(plan.video_tokens, plan.audio_frames, S, s.rows))
    extra = {"steps": steps, "videos": s.videos, "rows_per_step": s.rows,
             "guidance_passes": plan.passes._asdict()}  # fmt: skip
    notes = [f"denoise_loop = {steps} guided steps ({', '.join(k for k, v in plan.passes._asdict().items() if v)}), "
             f"{cfg.pipeline.diffusion_loop} loop"]  # fmt: skip

    def make_state_and_data() -> tuple[Any, ...]:
        return (random_state(state, ctx.seed), _concrete(latents, ctx.seed + 1),
                _concrete(embeds, ctx.seed + 2, _mask_fill), _put(schedule, sched_abs), _put(scales, scales_abs))

    if cfg.pipeline.diffusion_loop == "scan":
        def loop(st: Any, x: Any, text: Any, sch: Any, sc: Any) -> Any:
            return denoise_scan(graphdef, st, x, text, sch, sc, plan=plan)

        return JaxStage("denoise_loop", jax.jit(loop), (state, latents, embeds, sched_abs, scales_abs),
                        make_state_and_data, analytic_flops=flops * steps, extra=extra, notes=notes)  # fmt: skip

    scalar = jax.ShapeDtypeStruct((), schedule.sigmas.dtype, sharding=sched_abs.sigmas.sharding)

    def one_step(st: Any, x: Any, text: Any, sigma: Any, sigma_next: Any, t: Any, sc: Any) -> Any:
        return denoise_step(graphdef, st, x, text, sigma, sigma_next, t, sc, plan=plan)

    def make_args() -> tuple[Any, ...]:
        st, x, text, sch, sc = make_state_and_data()
        return (st, x, text, step_inputs(sch), sc)

    def run_loop(st: Any, x: Any, text: Any, per_step: Any, sc: Any) -> Any:
        for sigma, sigma_next, t in per_step:
            x = denoise_step(graphdef, st, x, text, sigma, sigma_next, t, sc, plan=plan)
        return x

    return HostStage("denoise_loop", jax.jit(one_step), (state, latents, embeds, scalar, scalar, scalar, scales_abs),
                     make_args, analytic_flops=flops, calls_per_video=steps, extra=extra, host_run=run_loop,
                     notes=notes + ["static metrics are of one step (the program the loop calls); per video "
                                    "they repeat once per step"])  # fmt: skip


# --------------------------------------------------------------------------- decoders


def _build_video_decode(ctx: BuildContext) -> Stage:
    """Packed latents -> frames in [0, 1], with the timestep-conditioned decoder's noise mix."""
    import jax
    import jax.numpy as jnp

    from ltx2.pipeline import _decode_video, decode_video_inputs
    from ltx2.vae.video import VideoVAE

    s = _setup(ctx)
    cfg, plan, mesh = s.cfg, s.plan, ctx.mesh
    v, strategy = cfg.video_vae, cfg.video_vae.sharding
    graphdef, state = abstract_state(lambda: VideoVAE(v, rngs=_rngs(ctx.seed)), strategy, mesh)
    batch = ("activation_batch", None, None)
    packed = _sds((s.videos, plan.video_tokens, cfg.transformer.in_channels), jnp.float32, batch, strategy, mesh)

    def decode(st: Any, x: Any, key: Any) -> Any:  # = LTX2Pipeline.decode_video on abstract weights
        return _decode_video(graphdef, st, x, *decode_video_inputs(key, plan, v, cfg.pipeline, x.dtype), plan=plan)

    key_abs = jax.eval_shape(lambda: jax.random.key(0))
    key_abs = jax.ShapeDtypeStruct(key_abs.shape, key_abs.dtype, sharding=_replicated(mesh))

    def make_args() -> tuple[Any, ...]:
        key = jax.device_put(jax.random.key(ctx.seed), key_abs.sharding)
        return (random_state(state, ctx.seed), _concrete(packed, ctx.seed + 1), key)

    return JaxStage("video_decode", jax.jit(decode), (state, packed, key_abs), make_args,
                    extra={"videos": s.videos, "latent_grid": [plan.frames, plan.height, plan.width]},
                    notes=[f"video_decode = video VAE decode of {s.videos} video(s) (layout {strategy})"])  # fmt: skip


def _build_audio_decode(ctx: BuildContext) -> Stage:
    """Packed audio latents -> mel spectrogram (audio VAE) -> waveform (vocoder)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from ltx2.pipeline import waveform
    from ltx2.vae.audio import AutoencoderKLLTX2Audio
    from ltx2.vae.vocoder import LTX2Vocoder, LTX2VocoderWithBWE, VocoderWithBWEConfig

    s = _setup(ctx)
    cfg, plan, mesh = s.cfg, s.plan, ctx.mesh
    voc_cls: Any = LTX2VocoderWithBWE if isinstance(cfg.vocoder, VocoderWithBWEConfig) else LTX2Vocoder
    # Each module laid out by its own config's strategy.
    vae_graph, vae_state = abstract_state(lambda: AutoencoderKLLTX2Audio(cfg.audio_vae, rngs=_rngs(ctx.seed)),
                                          cfg.audio_vae.sharding, mesh)  # fmt: skip
    voc_graph, voc_state = abstract_state(lambda: voc_cls(cfg.vocoder, rngs=_rngs(ctx.seed)), cfg.vocoder.sharding,
                                          mesh)  # fmt: skip
    packed = _sds((s.videos, plan.audio_frames, cfg.transformer.audio_in_channels), jnp.float32,
                  ("activation_batch", None, None), cfg.audio_vae.sharding, mesh)  # fmt: skip

    def decode(sv: Any, so: Any, x: Any) -> Any:  # = LTX2Pipeline.decode_audio, one graph per module
        return waveform(nnx.merge(vae_graph, sv), nnx.merge(voc_graph, so), x, plan)

    def make_args() -> tuple[Any, ...]:
        return (random_state(vae_state, ctx.seed), random_state(voc_state, ctx.seed + 1),
                _concrete(packed, ctx.seed + 2))

    return JaxStage("audio_decode", jax.jit(decode), (vae_state, voc_state, packed), make_args,
                    extra={"videos": s.videos, "audio_latent_frames": plan.audio_frames},
                    notes=["audio_decode = audio VAE decode + vocoder"])  # fmt: skip


def _build_upsample(ctx: BuildContext) -> Stage:
    """Denormalised video latents -> 2x spatially upsampled latents (+ AdaIN and tone mapping)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ltx2.pipeline import _upsample
    from ltx2.vae.upsampler import LTX2LatentUpsamplerModel

    s = _setup(ctx)
    cfg, plan, mesh = s.cfg, s.plan, ctx.mesh
    if cfg.upsampler is None:
        raise StageUnavailable(f"preset {ctx.preset!r} has no latent upsampler (upsampler = None)")
    strategy = getattr(cfg.upsampler, "sharding", "replicated")
    graphdef, state = abstract_state(lambda: LTX2LatentUpsamplerModel(cfg.upsampler, rngs=_rngs(ctx.seed)),
                                     strategy, mesh)  # fmt: skip
    latents = _sds((s.videos, cfg.video_vae.latent_channels, plan.frames, plan.height, plan.width), jnp.float32,
                   ("activation_batch", None, None, None, None), strategy, mesh)  # fmt: skip
    factors = _replicated_like((np.float32(1.0), np.float32(0.0)), mesh)

    def up(st: Any, x: Any, adain: Any, tone: Any) -> Any:
        return _upsample(graphdef, st, x, adain, tone)

    def make_args() -> tuple[Any, ...]:
        return (random_state(state, ctx.seed), _concrete(latents, ctx.seed + 1),
                *_put((np.float32(1.0), np.float32(0.0)), factors))  # fmt: skip

    return JaxStage("upsample", jax.jit(up), (state, latents, *factors), make_args, extra={"videos": s.videos},
                    notes=["upsample = latent upsampler + AdaIN (factor 1) as LTX2LatentUpsamplePipeline"])


BUILDERS: dict[str, Callable[[BuildContext], Stage]] = {
    "text_encode": _build_text_encode,
    "denoise_loop": _build_denoise_loop,
    "video_decode": _build_video_decode,
    "audio_decode": _build_audio_decode,
    "upsample": _build_upsample,
}
