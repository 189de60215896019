"""The LTX-2 audio+video diffusion transformer (DiT) in Flax NNX.

Follows diffusers ``LTX2VideoTransformer3DModel`` and ``LTX2VideoTransformerBlock``
(``diffusers/models/transformers/transformer_ltx2.py``); parameter names mirror the diffusers
state dict so ``ltx2.convert.transformer`` is a flat key table.

Shapes: B batch, L video tokens, A audio tokens, S text tokens, D video width, Da audio width,
N heads, K head dim, T timestep rows (1, or L/A for per-token timesteps), C input channels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2 import input_exchange, pipeline_parallel, scopes
from ltx2.block import Block, BlockInputs, StreamInputs, TextKV, constrain_streams, modulate
from ltx2.config import TIMESTEP_EMBED_DIM, TransformerConfig
from ltx2.layers import Linear, gelu_tanh, layer_norm, silu, stack_layers
from ltx2.rope import AVRope, av_rope, prepare_audio_coords, prepare_video_coords
from ltx2.sharding import param

__all__ = ["ACTIVATION", "Block", "BlockInputs", "Conditioning", "LTX2Transformer", "StreamInputs", "TextKV"]

ACTIVATION = ("activation_batch", "activation_length", "activation_embed")


class Conditioning(NamedTuple):
    """Per-forward inputs derived from the timesteps and the latent grid (``T``: 1 or per token):
    AdaLN modulations ``[B, T, M*D]``, embedded timesteps ``[B, T, D]`` for the output norm, a2v/v2a
    scale-shift ``[B, T, 4*D]`` and gates ``[B, T, D]``, prompt K/V modulation ``[B, 1, 2*D]``
    (LTX-2.3 prompt AdaLN, else None), RoPE tables. ``B`` may be 1 and broadcast over the rows."""

    temb: jax.Array
    emb: jax.Array
    audio_temb: jax.Array
    audio_emb: jax.Array
    ca: jax.Array
    audio_ca: jax.Array
    ca_gate: jax.Array
    audio_ca_gate: jax.Array
    prompt: jax.Array | None
    audio_prompt: jax.Array | None
    rope: AVRope


def timestep_sinusoid(t: jax.Array, dim: int = TIMESTEP_EMBED_DIM, max_period: float = 10000.0) -> jax.Array:
    """``[cos, sin]`` features ``[..., dim]`` of timesteps ``t`` (diffusers ``get_timestep_embedding``
    with ``flip_sin_to_cos=True, downscale_freq_shift=0``), in float32."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    angles = t.astype(jnp.float32)[..., None] * freqs
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


class AdaLayerNormSingle(nnx.Module):
    """Timestep -> (``num_mod`` x D modulation, D embedding) (diffusers ``LTX2AdaLayerNormSingle``)."""

    def __init__(self, dim: int, num_mod: int, *, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        kw: dict[str, Any] = dict(dtype=param_dtype, rngs=rngs)
        self.linear_1 = Linear(TIMESTEP_EMBED_DIM, dim, axes=(None, "embed"), **kw)
        self.linear_2 = Linear(dim, dim, axes=(None, "embed"), **kw)
        self.linear = Linear(dim, num_mod * dim, axes=("embed", "modulation"), **kw)

    @scopes.module_scope
    def __call__(self, t_bt: jax.Array, dtype: jnp.dtype) -> tuple[jax.Array, jax.Array]:
        """``t_bt [B]`` or ``[B, T]`` -> (``[B, T, num_mod*D]``, ``[B, T, D]``)."""
        t_bt = t_bt.reshape(t_bt.shape[0], -1)
        emb = self.linear_2(silu(self.linear_1(timestep_sinusoid(t_bt).astype(dtype))))
        return self.linear(silu(emb)), emb


class TextProjection(nnx.Module):
    """Caption features -> model width: linear, GELU(tanh), linear (``PixArtAlphaTextProjection``)."""

    def __init__(self, in_dim: int, dim: int, *, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        self.linear_1 = Linear(in_dim, dim, axes=("caption", "embed"), dtype=param_dtype, rngs=rngs)
        self.linear_2 = Linear(dim, dim, axes=(None, "embed"), dtype=param_dtype, rngs=rngs)

    @scopes.module_scope
    def __call__(self, x_bsc: jax.Array) -> jax.Array:
        return self.linear_2(gelu_tanh(self.linear_1(x_bsc)))


class LTX2Transformer(nnx.Module):
    """The audio+video DiT (diffusers ``LTX2VideoTransformer3DModel``), blocks stacked on a
    leading ``layers`` axis and run by ``lax.scan`` (``cfg.scan_layers``) or a Python loop."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        D, Da, pd = cfg.inner_dim, cfg.audio_inner_dim, jnp.dtype(cfg.param_dtype)
        kw: dict[str, Any] = dict(param_dtype=pd, rngs=rngs)

        def linear(n_in: int, n_out: int, axes: tuple[str, str]) -> Linear:
            return Linear(n_in, n_out, axes=axes, dtype=pd, rngs=rngs)

        def table(dim: int) -> nnx.Param:
            return param(jax.random.normal(rngs.params(), (2, dim), pd) * dim**-0.5, ("table", "embed"))

        self.proj_in = linear(cfg.in_channels, D, ("in_features", "embed"))
        self.audio_proj_in = linear(cfg.audio_in_channels, Da, ("in_features", "embed"))
        text = cfg.use_prompt_embeddings
        self.caption_projection = TextProjection(cfg.caption_channels, D, **kw) if text else None
        self.audio_caption_projection = TextProjection(cfg.caption_channels, Da, **kw) if text else None
        self.time_embed = AdaLayerNormSingle(D, cfg.video_mod_params, **kw)
        self.audio_time_embed = AdaLayerNormSingle(Da, cfg.audio_mod_params, **kw)
        self.av_cross_attn_video_scale_shift = AdaLayerNormSingle(D, 4, **kw)
        self.av_cross_attn_audio_scale_shift = AdaLayerNormSingle(Da, 4, **kw)
        self.av_cross_attn_video_a2v_gate = AdaLayerNormSingle(D, 1, **kw)
        self.av_cross_attn_audio_v2a_gate = AdaLayerNormSingle(Da, 1, **kw)
        prompt = cfg.prompt_modulation and cfg.use_prompt_adaln_single
        self.prompt_adaln = AdaLayerNormSingle(D, 2, **kw) if prompt else None
        self.audio_prompt_adaln = AdaLayerNormSingle(Da, 2, **kw) if prompt else None
        self.scale_shift_table = table(D)
        self.audio_scale_shift_table = table(Da)
        self.transformer_blocks = stack_layers(lambda r: Block(cfg, rngs=r), cfg.num_layers, rngs)
        self.proj_out = linear(D, cfg.out_channels, ("embed", "in_features"))
        self.audio_proj_out = linear(Da, cfg.audio_out_channels, ("embed", "in_features"))
        self.cfg = cfg
        scopes.label(self, scopes.TRANSFORMER_CHILDREN)

    @scopes.scoped(scopes.TRANSFORMER)
    def __call__(
        self,
        hidden_states: jax.Array,
        audio_hidden_states: jax.Array,
        encoder_hidden_states: jax.Array,
        audio_encoder_hidden_states: jax.Array,
        timestep: jax.Array,
        audio_timestep: jax.Array | None = None,
        sigma: jax.Array | None = None,
        audio_sigma: jax.Array | None = None,
        encoder_attention_mask: jax.Array | None = None,
        audio_encoder_attention_mask: jax.Array | None = None,
        num_frames: int | None = None,
        height: int | None = None,
        width: int | None = None,
        fps: float = 24.0,
        audio_num_frames: int | None = None,
        video_coords: jax.Array | np.ndarray | None = None,
        audio_coords: jax.Array | np.ndarray | None = None,
        isolate_modalities: bool = False,
        spatio_temporal_guidance_blocks: Sequence[int] | None = None,
        perturbation_mask: jax.Array | None = None,
        use_cross_timestep: bool = False,
    ) -> tuple[jax.Array, jax.Array]:
        """Velocity prediction for patchified latents, as diffusers' forward (``return_dict=False``).

        Args: video ``hidden_states [B, L, C]``, ``audio_hidden_states [B, A, Ca]``; text
        ``encoder_hidden_states`` / ``audio_encoder_hidden_states [B, S, caption_channels]`` (2.3:
        ``[B, S, D]`` / ``[B, S, Da]``); ``timestep`` ``[B]`` or ``[B, L]`` (already x1000),
        ``audio_timestep`` ``[B]`` or ``[B, A]`` (default ``timestep``); ``sigma``/``audio_sigma``
        ``[B]`` (prompt AdaLN, cross timesteps); text masks ``[B, S]`` (1 = keep); the latent grid
        (``num_frames``, ``height``, ``width``, ``audio_num_frames``) or explicit RoPE coords
        ``[B, 3, L, 2]`` / ``[B, 1, A, 2]``. ``isolate_modalities`` drops a2v/v2a attention.
        STG: in ``spatio_temporal_guidance_blocks``, rows with ``perturbation_mask`` 0 (``[B]`` or
        ``[B, 1, 1]``, default all 0) replace self-attention by its value projection; like diffusers
        this only acts when ``cfg.perturbed_attn`` (LTX-2.3).

        Returns: video ``[B, L, out_channels]``, audio ``[B, A, audio_out_channels]``.
        """
        dt = jnp.dtype(self.cfg.dtype)
        batch = hidden_states.shape[0]
        # Grid coordinates are the same for every row: tables for one row, broadcast over the batch
        # (half the cos/sin work and table memory of the CFG batch; explicit coords keep their B).
        if video_coords is None:
            video_coords = self._video_coords(1, num_frames, height, width, fps)
        if audio_coords is None:
            audio_coords = self._audio_coords(1, audio_num_frames)
        cond = self.conditioning(
            timestep,
            audio_timestep,
            sigma,
            audio_sigma,
            video_coords,
            audio_coords,
            use_cross_timestep=use_cross_timestep,
        )
        text, audio_text = self.project_text(encoder_hidden_states, audio_encoder_hidden_states)
        flags, keep = self._stg(batch, spatio_temporal_guidance_blocks, perturbation_mask, dt)
        inputs = self.block_inputs(cond, text, audio_text, encoder_attention_mask, audio_encoder_attention_mask, keep)
        x, a = self.project_in(hidden_states, audio_hidden_states)
        x, a = self.run_blocks(x, a, inputs, flags, isolate=isolate_modalities)
        return self.project_out(x, a, cond)

    # ---- the forward's pieces (the guided step, ltx2.passes, runs them on its own rows) -------
    def conditioning(
        self,
        timestep: jax.Array,
        audio_timestep: jax.Array | None,
        sigma: jax.Array | None,
        audio_sigma: jax.Array | None,
        video_coords: jax.Array | np.ndarray,
        audio_coords: jax.Array | np.ndarray,
        *,
        use_cross_timestep: bool,
    ) -> Conditioning:
        """Timestep embeddings and RoPE tables of one forward (rows: those of ``timestep``)."""
        dt = jnp.dtype(self.cfg.dtype)
        audio_timestep = timestep if audio_timestep is None else audio_timestep
        audio_sigma = sigma if audio_sigma is None else audio_sigma
        temb, emb = self.time_embed(jnp.asarray(timestep), dt)
        audio_temb, audio_emb = self.audio_time_embed(jnp.asarray(audio_timestep), dt)
        ca, audio_ca, ca_gate, audio_ca_gate = self._cross_embeddings(
            timestep, audio_timestep, sigma, audio_sigma, use_cross_timestep, dt
        )
        prompt, audio_prompt = self._prompt_embeddings(sigma, audio_sigma, dt)
        return Conditioning(
            temb,
            emb,
            audio_temb,
            audio_emb,
            ca,
            audio_ca,
            ca_gate,
            audio_ca_gate,
            prompt,
            audio_prompt,
            self._rope(video_coords, audio_coords, int(np.shape(timestep)[0]) if np.ndim(timestep) else 1),
        )

    def _rope(self, video_coords: jax.Array | np.ndarray, audio_coords: jax.Array | np.ndarray, batch: int) -> AVRope:
        """The four RoPEs; the video self-attention's per token chunk where it exchanges its input
        (:func:`ltx2.input_exchange.chunk_tables`: rolled once here, outside the layer scan)."""
        rope = av_rope(self.cfg, video_coords, audio_coords)
        tokens, cfg = rope.video.cos.shape[2 if self.cfg.rope_form == "fused" else 1], self.cfg
        chunks = input_exchange.chunk_count(
            cfg.attention_impl,
            cfg.sharding,
            batch=batch,
            heads=cfg.num_attention_heads,
            tokens=tokens,
            min_tokens=cfg.attention_impl_min_tokens,
        )
        if not chunks:
            return rope
        video = input_exchange.chunk_tables(
            rope.video,
            chunks=chunks,
            tokens=tokens,
            rope_type=cfg.rope_type,
            rope_form=cfg.rope_form,
            strategy=cfg.sharding,
        )
        return rope._replace(video=video)  # type: ignore[arg-type]

    def block_inputs(
        self,
        cond: Conditioning,
        text: jax.Array | None,
        audio_text: jax.Array | None,
        mask: jax.Array | None,
        audio_mask: jax.Array | None,
        keep: jax.Array | None = None,
        cross: jax.Array | None = None,
    ) -> BlockInputs:
        """What every block reads: ``text``/``audio_text`` ``[B, S, D]`` (None when the blocks get a
        :class:`TextKV`), keep-masks ``[B, S]``, STG ``keep`` and a2v/v2a ``cross`` row masks ``[B, 1, 1]``."""
        dt, rope = jnp.dtype(self.cfg.dtype), cond.rope
        return BlockInputs(
            StreamInputs(
                text, _bias(mask, dt), cond.temb, cond.ca, cond.ca_gate, cond.prompt, rope.video, rope.cross_video
            ),
            StreamInputs(
                audio_text,
                _bias(audio_mask, dt),
                cond.audio_temb,
                cond.audio_ca,
                cond.audio_ca_gate,
                cond.audio_prompt,
                rope.audio,
                rope.cross_audio,
            ),
            keep,
            cross,
        )

    def project_text(self, text: jax.Array, audio_text: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Text features ``[B, S, caption_channels]`` -> ``[B, S, D]``, ``[B, S, Da]`` (LTX-2.0 caption
        projections; LTX-2.3 connectors already emit model widths)."""
        dt = jnp.dtype(self.cfg.dtype)
        text, audio_text = text.astype(dt), audio_text.astype(dt)
        if self.caption_projection is not None and self.audio_caption_projection is not None:
            text, audio_text = self.caption_projection(text), self.audio_caption_projection(audio_text)
        return text, audio_text

    def project_in(self, x: jax.Array, a: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Patchified latents ``[B, L, C]`` / ``[B, A, Ca]`` -> model widths."""
        dt = jnp.dtype(self.cfg.dtype)
        return self.proj_in(x.astype(dt)), self.audio_proj_in(a.astype(dt))

    def project_out(self, x: jax.Array, a: jax.Array, cond: Conditioning) -> tuple[jax.Array, jax.Array]:
        return (
            _output(x, cond.emb, self.scale_shift_table[...], self.proj_out),
            _output(a, cond.audio_emb, self.audio_scale_shift_table[...], self.audio_proj_out),
        )

    def text_kv(self, text: jax.Array, audio_text: jax.Array, cond: Conditioning | None = None) -> TextKV:
        """Every layer's text keys/values ``[layers, R, S, D]`` of the projected ``text``/``audio_text``
        ``[R, S, D]``. They depend on the step only through LTX-2.3's prompt AdaLN (``cond.prompt``,
        see :attr:`text_kv_per_step`); otherwise ``cond`` may be None and one computation serves
        the whole video."""
        if self.text_kv_per_step and cond is None:
            raise ValueError("this model modulates the text by the timestep (prompt AdaLN): text_kv needs cond")
        prompts = (None, None) if cond is None else (cond.prompt, cond.audio_prompt)
        graphdef, state = nnx.split(self.transformer_blocks)

        def one(st: nnx.State) -> TextKV:
            return cast(Block, nnx.merge(graphdef, st)).text_kv(text, audio_text, *prompts)

        if self.cfg.pipeline_stages > 1:  # each stage its own layers, where they are stored
            return cast(TextKV, pipeline_parallel.map_layers(one, state, self.cfg.pipeline_stages, self.cfg.sharding))
        return jax.lax.map(one, state)

    @property
    def text_kv_per_step(self) -> bool:
        """True when the text keys/values change with the timestep (LTX-2.3 prompt AdaLN on)."""
        return self.prompt_adaln is not None

    def run_blocks(
        self,
        x: jax.Array,
        a: jax.Array,
        inputs: BlockInputs,
        flags: jax.Array | None,
        *,
        isolate: bool,
        layers: tuple[int, int] | None = None,
        kv: TextKV | None = None,
        text_rows: tuple[int, ...] | None = None,
        cross_from: int = 0,
    ) -> tuple[jax.Array, jax.Array]:
        """Blocks ``layers = (first, stop)`` (default all) over the stacked state: ``lax.scan`` or a
        Python loop, same block function. ``flags [num_layers]``: STG per layer; ``kv``: the
        model's precomputed :class:`TextKV` (``[layers, R, ...]``), prompt row ``text_rows[b]`` for row b;
        ``cross_from``: rows before it skip a2v/v2a (:class:`Block`)."""
        graphdef, state = nnx.split(self.transformer_blocks)
        strategy, n = self.cfg.sharding, self.cfg.num_layers
        first, stop = (0, n) if layers is None else layers
        if self.cfg.pipeline_stages > 1:
            args = (graphdef, state, x, a, inputs, flags)
            return pipeline_parallel.run_blocks(self.cfg, *args, isolate, (first, stop), kv, text_rows, cross_from)

        Carry = tuple[jax.Array, jax.Array]

        def layer(carry: Carry, xs: tuple[Any, Any, Any]) -> tuple[Carry, None]:
            state_l, stg, kv_l = xs
            block = cast(Block, nnx.merge(graphdef, state_l))
            x, a = block(*carry, inputs, stg, isolate=isolate, kv=kv_l, text_rows=text_rows, cross_from=cross_from)
            return constrain_streams(x, a, strategy), None

        carry = constrain_streams(x, a, strategy)
        if not self.cfg.scan_layers:
            for i in range(first, stop):
                carry, _ = layer(carry, _layer((state, flags, kv), i))
            return carry
        if (first, stop) == (0, n):
            carry, _ = jax.lax.scan(layer, carry, (state, flags, kv))
            return carry

        # A sub-range reads layer i of the full stacks inside the loop: slicing the stacks first
        # would copy those layers' weights.
        def layer_at(carry: Carry, i: jax.Array) -> tuple[Carry, None]:
            return layer(carry, _layer((state, flags, kv), i))

        carry, _ = jax.lax.scan(layer_at, carry, jnp.arange(first, stop))
        return carry

    def _video_coords(
        self, batch: int, num_frames: int | None, height: int | None, width: int | None, fps: float
    ) -> np.ndarray:
        if num_frames is None or height is None or width is None:
            raise ValueError("pass video_coords or all of num_frames, height, width")
        cfg = self.cfg
        return prepare_video_coords(
            batch,
            num_frames,
            height,
            width,
            patch_size=cfg.patch_size,
            patch_size_t=cfg.patch_size_t,
            scale_factors=cfg.vae_scale_factors,
            causal_offset=cfg.causal_offset,
            fps=fps,
        )

    def _audio_coords(self, batch: int, audio_num_frames: int | None) -> np.ndarray:
        if audio_num_frames is None:
            raise ValueError("pass audio_coords or audio_num_frames")
        cfg = self.cfg
        return prepare_audio_coords(
            batch,
            audio_num_frames,
            patch_size_t=cfg.audio_patch_size_t,
            scale_factor=cfg.audio_scale_factor,
            causal_offset=cfg.causal_offset,
            hop_length=cfg.audio_hop_length,
            sampling_rate=cfg.audio_sampling_rate,
        )

    def coords(
        self, num_frames: int, height: int, width: int, fps: float, audio_num_frames: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """RoPE coordinates of one row (``[1, 3, L, 2]``, ``[1, 1, A, 2]``) for a latent grid."""
        return self._video_coords(1, num_frames, height, width, fps), self._audio_coords(1, audio_num_frames)

    def _cross_embeddings(
        self,
        timestep: jax.Array,
        audio_timestep: jax.Array,
        sigma: jax.Array | None,
        audio_sigma: jax.Array | None,
        cross: bool,
        dt: jnp.dtype,
    ) -> tuple[jax.Array, ...]:
        """Global a2v/v2a scale-shift and gate embeddings; with ``cross`` each modality is
        modulated by the other's sigma (LTX-2.3), else by its own timestep."""
        if cross and (sigma is None or audio_sigma is None):
            raise ValueError("use_cross_timestep=True needs sigma (and optionally audio_sigma)")
        video_t = jnp.asarray(audio_sigma if cross else timestep)
        audio_t = jnp.asarray(sigma if cross else audio_timestep)
        gate = self.cfg.cross_attn_timestep_scale_multiplier / self.cfg.timestep_scale_multiplier
        return (
            self.av_cross_attn_video_scale_shift(video_t, dt)[0],
            self.av_cross_attn_audio_scale_shift(audio_t, dt)[0],
            self.av_cross_attn_video_a2v_gate(video_t * gate, dt)[0],
            self.av_cross_attn_audio_v2a_gate(audio_t * gate, dt)[0],
        )

    def _prompt_embeddings(
        self, sigma: jax.Array | None, audio_sigma: jax.Array | None, dt: jnp.dtype
    ) -> tuple[jax.Array | None, jax.Array | None]:
        if self.prompt_adaln is None or self.audio_prompt_adaln is None:
            return None, None
        if sigma is None or audio_sigma is None:
            raise ValueError("this config modulates the prompt by sigma (LTX-2.3): pass sigma")
        return self.prompt_adaln(jnp.asarray(sigma), dt)[0], self.audio_prompt_adaln(jnp.asarray(audio_sigma), dt)[0]

    def stg_flags(self, blocks: Sequence[int] | None) -> jax.Array | None:
        """Per-layer STG flags ``[num_layers]`` (True in ``blocks``); None when STG cannot act (no
        blocks, or ``perturbed_attn`` off as in LTX-2.0: diffusers then leaves self-attention alone)."""
        return self._stg(1, blocks, None, jnp.dtype(self.cfg.dtype))[0]

    def _stg(
        self, batch: int, blocks: Sequence[int] | None, mask: jax.Array | None, dt: jnp.dtype
    ) -> tuple[jax.Array | None, jax.Array | None]:
        """Per-layer STG flags ``[num_layers]`` and the row keep-mask ``[B, 1, 1]`` (None when off)."""
        blocks = list(blocks or [])
        bad = [b for b in blocks if not 0 <= b < self.cfg.num_layers]
        if bad:
            raise ValueError(f"spatio_temporal_guidance_blocks {bad} out of range 0..{self.cfg.num_layers - 1}")
        if not blocks or not self.cfg.perturbed_attn:
            return None, None
        keep = jnp.zeros((batch,), dt) if mask is None else jnp.asarray(mask).astype(dt)
        keep = keep.reshape(batch, 1, 1) if keep.ndim == 1 else keep
        return jnp.asarray(np.isin(np.arange(self.cfg.num_layers), blocks)), keep


def _layer(stacked: Any, i: int | jax.Array) -> Any:
    """Layer ``i`` of stacked trees (``[layers, ...]`` leaves; None stays None), static or traced ``i``."""
    if isinstance(i, int):
        return jax.tree.map(lambda v: v[i], stacked)
    return jax.tree.map(lambda v: jax.lax.dynamic_index_in_dim(v, i, 0, keepdims=False), stacked)


def _bias(mask_bs: jax.Array | None, dt: jnp.dtype) -> jax.Array | None:
    """``[B, S]`` keep-mask (1 = attend) -> additive bias ``[B, 1, 1, S]`` (0 / -10000, as diffusers)."""
    if mask_bs is None:
        return None
    if mask_bs.ndim != 2:
        raise ValueError(f"text attention masks must be [B, S] keep-masks, got shape {mask_bs.shape}")
    return ((1 - mask_bs.astype(dt)) * -10000.0)[:, None, None, :]


@scopes.scoped(scopes.OUTPUT)
def _output(x: jax.Array, emb_btd: jax.Array, table: jax.Array, proj: Linear) -> jax.Array:
    """Final LayerNorm, ``(table + embedded timestep)`` shift/scale, output projection."""
    values = table[None, None].astype(emb_btd.dtype) + emb_btd[:, :, None]
    return proj(modulate(layer_norm(x, 1e-6), values[:, :, 0], values[:, :, 1]))
