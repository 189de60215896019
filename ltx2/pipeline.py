"""``LTX2Pipeline``: text -> video + audio, as diffusers ``LTX2Pipeline.__call__`` runs it.

Stages, each separately callable and compiled once per shape (module-level ``jax.jit``
functions with the module graph static; never a ``jax.jit`` made inside a call):

* :meth:`LTX2Pipeline.encode_prompt`: token ids (or text with a local tokenizer) -> Gemma-3
  hidden states (``text_encoder.batching`` joint or separate) -> connectors -> TextEmbeddings;
  :meth:`LTX2Pipeline.embed_text` starts from hidden states (diffusers' ``prompt_embeds``).
* :meth:`LTX2Pipeline.prepare_latents`: noise (or given latents, normalised and packed).
* :meth:`LTX2Pipeline.denoise`: the whole loop (``pipeline.diffusion_loop`` scan or python).
* :meth:`LTX2Pipeline.decode_video` / :meth:`LTX2Pipeline.decode_audio` (audio VAE + vocoder).
* :meth:`LTX2Pipeline.upsample`: ``LTX2LatentUpsamplePipeline``'s latent step (optional).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2.denoise import Latents, Schedule, TextEmbeddings, denoise_python, denoise_scan, step_inputs
from ltx2.guidance import AVGuidanceScales, GuidanceConfig
from ltx2.latents import Plan, pack_video, unpack_video
from ltx2.pipeline_config import PipelineConfig, PipelineOptions
from ltx2.scheduler import sigma_schedule, timesteps
from ltx2.text.connectors import LTX2TextConnectors
from ltx2.text.gemma import GemmaTextEncoder
from ltx2.transformer import LTX2Transformer
from ltx2.vae.audio import AutoencoderKLLTX2Audio, pack_latents, unpack_latents
from ltx2.vae.upsampler import LTX2LatentUpsamplerModel
from ltx2.vae.video import VideoVAE, VideoVAEConfig, mix_decode_noise
from ltx2.vae.vocoder import LTX2Vocoder, LTX2VocoderWithBWE

Array = jax.Array | np.ndarray


# ---- compiled stage bodies (module level: compiled once per graph and shape) -------------------


@partial(jax.jit, static_argnames=("graphdef",))
def _connect(graphdef: nnx.GraphDef, state: nnx.State, hidden: jax.Array, mask: jax.Array) -> TextEmbeddings:
    return TextEmbeddings(*nnx.merge(graphdef, state)(hidden, mask))


@partial(jax.jit, static_argnames=("graphdef", "plan"))
def _prepare(graphdef: nnx.GraphDef, state: nnx.State, video: jax.Array, audio: jax.Array, *, plan: Plan) -> Latents:
    """Given latents ``[B, C, F, H, W]`` / ``[B, Cz, A, M']`` -> packed and normalised."""
    video_vae, audio_vae = nnx.merge(graphdef, state)
    packed = pack_video(video_vae.normalize_latents(video), plan.patch_size, plan.patch_size_t)
    return Latents(packed, audio_vae.normalize_packed(pack_latents(audio)))


@partial(jax.jit, static_argnames=("graphdef", "plan"))
def decode_packed_video(
    graphdef: nnx.GraphDef,
    state: nnx.State,
    packed: jax.Array,
    noise: jax.Array | None,
    decode_t: jax.Array,
    noise_scale: jax.Array,
    key: jax.Array | None,
    *,
    plan: Plan,
) -> jax.Array:
    """Packed latents ``[B, L, C]`` -> frames ``[B, F, H, W, 3]`` in [0, 1] (noise from :func:`decode_video_inputs`)."""
    vae = nnx.merge(graphdef, state)
    p, pt = plan.patch_size, plan.patch_size_t
    z = unpack_video(packed, plan.frames // pt, plan.height // p, plan.width // p, p, pt)
    temb = None
    if noise is not None:  # timestep-conditioned decoder: mix in decode noise first
        z, temb = mix_decode_noise(z, noise, noise_scale), decode_t
    video = vae.decode(vae.denormalize_latents(z), temb, key=key)
    # diffusers VideoProcessor.postprocess_video(output_type="np"): [-1, 1] -> [0, 1], frames-major.
    return jnp.transpose(jnp.clip(video / 2 + 0.5, 0.0, 1.0), (0, 2, 3, 4, 1))


def decode_video_inputs(
    key: jax.Array, plan: Plan, vae: VideoVAEConfig, options: PipelineOptions, dtype: Any
) -> tuple[jax.Array | None, jax.Array, jax.Array, jax.Array | None]:
    """``(noise, decode_t, noise_scale, inject_key)`` for :func:`decode_packed_video`: decode noise from
    ``key`` for a timestep-conditioned VAE at ``decode_noise_scale`` (default ``decode_timestep``),
    and the decoder's own noise-injection key when it injects any."""
    k_mix, inject_key = jax.random.split(key)
    noise = None
    if vae.timestep_conditioning:
        noise = jax.random.normal(k_mix, (plan.batch, vae.latent_channels, plan.frames, plan.height, plan.width), dtype)
    scale = options.decode_timestep if options.decode_noise_scale is None else options.decode_noise_scale
    return (
        noise,
        jnp.full((plan.batch,), options.decode_timestep, jnp.float32),
        jnp.full((plan.batch,), scale, jnp.float32),
        inject_key if any(vae.decoder_inject_noise) else None,
    )


def waveform(
    audio_vae: AutoencoderKLLTX2Audio, vocoder: LTX2Vocoder | LTX2VocoderWithBWE, packed: jax.Array, plan: Plan
) -> jax.Array:
    """Packed, normalised audio latents ``[B, A, Ca]`` -> mel spectrogram -> waveform ``[B, ch, samples]``."""
    z = unpack_latents(audio_vae.denormalize_packed(packed), plan.latent_mel_bins)
    return vocoder(audio_vae.decode(z))


@partial(jax.jit, static_argnames=("graphdef", "plan"))
def _decode_audio(graphdef: nnx.GraphDef, state: nnx.State, packed: jax.Array, *, plan: Plan) -> jax.Array:
    audio_vae, vocoder = nnx.merge(graphdef, state)
    return waveform(audio_vae, vocoder, packed, plan)


@partial(jax.jit, static_argnames=("graphdef",))
def upsample_latents(
    graphdef: nnx.GraphDef, state: nnx.State, latents: jax.Array, adain: jax.Array, tone_map: jax.Array
) -> jax.Array:
    """Latents ``[B, C, F, H, W]`` -> upsampled, then AdaIN (``adain`` > 0) and tone mapping (``tone_map`` > 0)."""
    up = nnx.merge(graphdef, state)(latents)
    up = jax.lax.cond(adain > 0, lambda: jnp.asarray(adain_filter(up, latents, adain), up.dtype), lambda: up)
    return jax.lax.cond(tone_map > 0, lambda: tone_map_latents(up, tone_map).astype(up.dtype), lambda: up)


def adain_filter(latents: jax.Array, reference: jax.Array, factor: jax.Array) -> jax.Array:
    """Per (sample, channel) mean/std of ``latents`` moved to ``reference``'s (unbiased std), then
    ``lerp(latents, result, factor)`` (``LTX2LatentUpsamplePipeline.adain_filter_latent``)."""
    axes = tuple(range(2, latents.ndim))

    def stats(x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return jnp.mean(x, axes, keepdims=True), jnp.std(x, axes, keepdims=True, ddof=1)

    (r_mean, r_sd), (i_mean, i_sd) = stats(reference), stats(latents)
    result = (latents - i_mean) / i_sd * r_sd + r_mean
    return latents + factor * (result - latents)


def tone_map_latents(latents: jax.Array, compression: jax.Array) -> jax.Array:
    """Sigmoid compression of large latent values (``LTX2LatentUpsamplePipeline.tone_map_latents``)."""
    scale = compression * 0.75
    sigmoid = jax.nn.sigmoid(4.0 * scale * (jnp.abs(latents) - 1.0))
    return latents * (1.0 - 0.8 * scale * sigmoid)


# ---- the pipeline -----------------------------------------------------------------------------


class LTX2Pipeline:
    """The LTX-2 text-to-video+audio pipeline over our JAX components (diffusers ``LTX2Pipeline``).

    ``text_encoder`` may be ``None`` when prompts arrive as Gemma hidden states
    (:meth:`embed_text`); ``upsampler`` is optional."""

    def __init__(
        self,
        cfg: PipelineConfig,
        *,
        transformer: LTX2Transformer,
        connectors: LTX2TextConnectors,
        video_vae: VideoVAE,
        audio_vae: AutoencoderKLLTX2Audio,
        vocoder: LTX2Vocoder | LTX2VocoderWithBWE,
        text_encoder: GemmaTextEncoder | None = None,
        upsampler: LTX2LatentUpsamplerModel | None = None,
    ):
        self.cfg = cfg
        self.text_encoder = text_encoder
        self.transformer, self.connectors = transformer, connectors
        self.video_vae, self.audio_vae, self.vocoder, self.upsampler = video_vae, audio_vae, vocoder, upsampler
        self.transformer_graph, self.transformer_state = nnx.split(transformer)
        self.connectors_graph, self.connectors_state = nnx.split(connectors)
        self.video_vae_graph, self.video_vae_state = nnx.split(video_vae)
        self.latent_norm_graph, self.latent_norm_state = nnx.split((video_vae, audio_vae))
        self.audio_graph, self.audio_state = nnx.split((audio_vae, vocoder))
        self.upsampler_graph: nnx.GraphDef | None = None
        self.upsampler_state: nnx.State | None = None
        if upsampler is not None:
            self.upsampler_graph, self.upsampler_state = nnx.split(upsampler)

    @classmethod
    def from_config(cls, cfg: PipelineConfig, *, seed: int | None = None, text_encoder: bool = True) -> LTX2Pipeline:
        """Random weights for every component (``seed`` defaults to ``cfg.pipeline.seed``); the
        Gemma-3 encoder is a randomly initialised transformers model when ``text_encoder``."""
        from ltx2.components import build_components

        return cls(
            cfg, **build_components(cfg, seed=cfg.pipeline.seed if seed is None else seed, text_encoder=text_encoder)
        )

    # ---- plan / schedule ------------------------------------------------------------------
    def plan(
        self,
        *,
        batch: int = 1,
        height: int | None = None,
        width: int | None = None,
        num_frames: int | None = None,
        frame_rate: float | None = None,
        guidance: GuidanceConfig | None = None,
    ) -> Plan:
        """Static facts of one generation (latent grid, audio length, guidance passes)."""
        cfg = self.cfg if guidance is None else self.cfg.replace(guidance=guidance)
        return Plan.build(cfg, batch=batch, height=height, width=width, num_frames=num_frames, frame_rate=frame_rate)

    def schedule(self, plan: Plan, num_inference_steps: int | None = None) -> Schedule:
        """Sigmas and timesteps on device; ``mu`` from the video token count (diffusers)."""
        n = num_inference_steps or self.cfg.pipeline.num_inference_steps
        s = self.cfg.scheduler
        sigmas = sigma_schedule(s, n, mu=s.mu(plan.video_tokens))
        return Schedule(jnp.asarray(sigmas), jnp.asarray(timesteps(s, sigmas)))

    def scales(self, guidance: GuidanceConfig | None = None) -> AVGuidanceScales:
        """Guidance scales as device float32 scalars (traced by the compiled loop)."""
        return (guidance or self.cfg.guidance).scales()

    # ---- text -----------------------------------------------------------------------------
    def encode_prompt(
        self,
        prompt_ids: Array | None = None,
        prompt_mask: Array | None = None,
        negative_ids: Array | None = None,
        negative_mask: Array | None = None,
        *,
        prompt: str | Sequence[str] | None = None,
        negative_prompt: str | Sequence[str] | None = None,
        plan: Plan | None = None,
    ) -> TextEmbeddings:
        """Token ids and masks ``[B, S]`` (1 = token, left padded), or text with the encoder's
        tokenizer -> Gemma-3 hidden states -> connectors. With CFG (per ``plan``, default the
        config's guidance) the negative prompt (default ``""``) comes first in the batch."""
        enc = self._require_text_encoder()
        if prompt is not None:
            prompts = [prompt] if isinstance(prompt, str) else list(prompt)
            negatives = negative_prompt if negative_prompt is not None else ""
            negatives = [negatives] * len(prompts) if isinstance(negatives, str) else list(negatives)
            prompt_ids, prompt_mask = enc.tokenize(prompts)
            negative_ids, negative_mask = enc.tokenize(negatives)
        if prompt_ids is None or prompt_mask is None:
            raise ValueError("pass prompt_ids and prompt_mask, or prompt text (with a tokenizer)")
        cfg_on = (plan.passes if plan is not None else self.cfg.guidance.passes()).cfg
        if not cfg_on:
            return self.embed_text(enc.encode(prompt_ids, prompt_mask), prompt_mask)
        if negative_ids is None or negative_mask is None:
            raise ValueError("classifier-free guidance needs negative_ids and negative_mask (or text prompts)")
        pos, neg = enc.encode_pair(prompt_ids, prompt_mask, negative_ids, negative_mask)
        return self.embed_text(pos, prompt_mask, neg, negative_mask)

    def embed_text(
        self, hidden: Array, mask: Array, negative_hidden: Array | None = None, negative_mask: Array | None = None
    ) -> TextEmbeddings:
        """Gemma hidden states ``[B, S, C, L']`` or ``[B, S, C*L']`` (diffusers ``prompt_embeds``)
        -> connectors; with negatives, rows are ``[negative; positive]`` (one connector pass)."""
        if negative_hidden is not None:
            if negative_mask is None:
                raise ValueError("negative_hidden needs negative_mask")
            hidden = jnp.concatenate([jnp.asarray(negative_hidden), jnp.asarray(hidden)])
            mask = jnp.concatenate([jnp.asarray(negative_mask), jnp.asarray(mask)])
        mask = jnp.asarray(mask, jnp.int32)
        return _connect(self.connectors_graph, self.connectors_state, jnp.asarray(hidden, jnp.float32), mask)

    def _require_text_encoder(self) -> GemmaTextEncoder:
        if self.text_encoder is None:
            raise ValueError("this pipeline has no text encoder: pass Gemma hidden states to embed_text()")
        return self.text_encoder

    # ---- latents --------------------------------------------------------------------------
    def prepare_latents(
        self, plan: Plan, *, key: jax.Array | None = None, video: Array | None = None, audio: Array | None = None
    ) -> Latents:
        """Initial packed latents: standard normal noise from ``key`` (diffusers draws it already
        in the normalised space), or the given ``video [B, C, F, H, W]`` and ``audio [B, Cz, A, M']``
        latents, normalised with the VAEs' statistics and packed (``noise_scale=0``)."""
        c = self.cfg
        if (video is None) != (audio is None):
            raise ValueError("pass both video and audio latents, or neither")
        if video is None or audio is None:
            key = jax.random.key(c.pipeline.seed) if key is None else key
            kv, ka = jax.random.split(key)
            shape_v = (plan.batch, c.video_vae.latent_channels, plan.frames, plan.height, plan.width)
            shape_a = (plan.batch, c.audio_vae.latent_channels, plan.audio_frames, plan.latent_mel_bins)
            return Latents(
                pack_video(jax.random.normal(kv, shape_v), plan.patch_size, plan.patch_size_t),
                pack_latents(jax.random.normal(ka, shape_a)),
            )
        expect_v = (plan.batch, c.video_vae.latent_channels, plan.frames, plan.height, plan.width)
        expect_a = (plan.batch, c.audio_vae.latent_channels, plan.audio_frames, plan.latent_mel_bins)
        if tuple(np.shape(video)) != expect_v or tuple(np.shape(audio)) != expect_a:
            raise ValueError(
                f"latents of shape {np.shape(video)} / {np.shape(audio)} do not fit the plan: "
                f"expected {expect_v} / {expect_a}"
            )
        v, a = jnp.asarray(video, jnp.float32), jnp.asarray(audio, jnp.float32)
        return _prepare(self.latent_norm_graph, self.latent_norm_state, v, a, plan=plan)

    # ---- denoising ------------------------------------------------------------------------
    def denoise(
        self,
        latents: Latents,
        text: TextEmbeddings,
        schedule: Schedule,
        scales: AVGuidanceScales,
        plan: Plan,
        *,
        loop: str | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> Latents:
        """The whole denoising loop: ``lax.scan`` or a Python loop over one compiled step
        (``loop`` defaults to ``pipeline.diffusion_loop``). Every input is already on device;
        nothing moves between host and device inside. ``progress(i, n)``: after each step in
        the Python loop, once at the end for scan (one program: no per-step report)."""
        loop = loop or self.cfg.pipeline.diffusion_loop
        g, s = self.transformer_graph, self.transformer_state
        if loop == "scan":
            out = denoise_scan(g, s, latents, text, schedule, scales, plan=plan)
            if progress is not None:
                jax.block_until_ready(out)
                progress(schedule.timesteps.shape[0], schedule.timesteps.shape[0])
            return out
        if loop == "python":
            return denoise_python(g, s, latents, text, step_inputs(schedule), scales, plan=plan, progress=progress)
        raise ValueError(f"loop={loop!r}: must be 'scan' or 'python'")

    # ---- decoding -------------------------------------------------------------------------
    def decode_video(self, video: jax.Array, plan: Plan, *, key: jax.Array | None = None) -> jax.Array:
        """Packed video latents ``[B, L, C]`` -> frames ``[B, F, H, W, 3]`` in [0, 1] (diffusers
        ``output_type="np"``). A timestep-conditioned VAE first mixes in decode noise from
        ``key`` at ``pipeline.decode_noise_scale`` (default: ``decode_timestep``)."""
        key = jax.random.key(self.cfg.pipeline.seed + 1) if key is None else key
        inputs = decode_video_inputs(key, plan, self.cfg.video_vae, self.cfg.pipeline, video.dtype)
        return decode_packed_video(self.video_vae_graph, self.video_vae_state, video, *inputs, plan=plan)

    def decode_audio(self, audio: jax.Array, plan: Plan) -> jax.Array:
        """Packed audio latents ``[B, A, Ca]`` -> waveform ``[B, channels, samples]`` (audio VAE
        decode to a mel spectrogram, then the vocoder)."""
        return _decode_audio(self.audio_graph, self.audio_state, audio, plan=plan)

    def video_latents(self, video: jax.Array, plan: Plan) -> jax.Array:
        """Packed, normalised video latents -> denormalised ``[B, C, F, H, W]`` (the upsampler's input,
        diffusers ``output_type="latent"``)."""
        p, pt = plan.patch_size, plan.patch_size_t
        z = unpack_video(video, plan.frames // pt, plan.height // p, plan.width // p, p, pt)
        return self.video_vae.denormalize_latents(z)

    def upsample(
        self, latents: jax.Array, *, adain_factor: float = 0.0, tone_map_compression_ratio: float = 0.0
    ) -> jax.Array:
        """Denormalised video latents ``[B, C, F, H, W]`` -> upsampled ``[B, C, F', 2H, 2W]``, then
        optional AdaIN towards the input and tone mapping (``LTX2LatentUpsamplePipeline``)."""
        if self.upsampler_graph is None:
            raise ValueError("this pipeline has no latent upsampler (PipelineConfig.upsampler is None)")
        return upsample_latents(
            self.upsampler_graph,
            self.upsampler_state,
            jnp.asarray(latents),
            jnp.float32(adain_factor),
            jnp.float32(tone_map_compression_ratio),
        )

    # ---- everything -----------------------------------------------------------------------
    def __call__(
        self,
        prompt_ids: Array | None = None,
        prompt_mask: Array | None = None,
        negative_ids: Array | None = None,
        negative_mask: Array | None = None,
        *,
        prompt: str | Sequence[str] | None = None,
        negative_prompt: str | Sequence[str] | None = None,
        text: TextEmbeddings | None = None,
        latents: Latents | None = None,
        key: jax.Array | None = None,
        guidance: GuidanceConfig | None = None,
        height: int | None = None,
        width: int | None = None,
        num_frames: int | None = None,
        frame_rate: float | None = None,
        num_inference_steps: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """Prompt -> (video ``[B, F, H, W, 3]`` in [0, 1], waveform ``[B, 2, samples]``)."""
        if text is None:
            if prompt is None and prompt_ids is None:
                raise ValueError("pass prompt_ids (with masks), prompt text, or text embeddings")
            if prompt is not None:
                batch = 1 if isinstance(prompt, str) else len(prompt)
            else:
                batch = int(np.shape(np.asarray(prompt_ids))[0])
        else:
            batch = text.video.shape[0] // (2 if (guidance or self.cfg.guidance).passes().cfg else 1)
        plan = self.plan(
            batch=batch, height=height, width=width, num_frames=num_frames, frame_rate=frame_rate, guidance=guidance
        )
        if text is None:
            text = self.encode_prompt(
                prompt_ids,
                prompt_mask,
                negative_ids,
                negative_mask,
                prompt=prompt,
                negative_prompt=negative_prompt,
                plan=plan,
            )
        key = jax.random.key(self.cfg.pipeline.seed) if key is None else key
        k_latents, k_decode = jax.random.split(key)
        x = latents if latents is not None else self.prepare_latents(plan, key=k_latents)
        x = self.denoise(
            x, text, self.schedule(plan, num_inference_steps), self.scales(guidance), plan, progress=progress
        )
        return self.decode_video(x.video, plan, key=k_decode), self.decode_audio(x.audio, plan)
