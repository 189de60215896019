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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2 import scopes
from ltx2.attention import Attention
from ltx2.config import FF_MULT, TIMESTEP_EMBED_DIM, TransformerConfig
from ltx2.layers import Linear, gelu_tanh, layer_norm, layer_slice, rms_norm, stack_layers
from ltx2.rope import RopeTables, av_rope, prepare_audio_coords, prepare_video_coords
from ltx2.sharding import constrain, param

ACTIVATION = ("activation_batch", "activation_length", "activation_embed")


def timestep_sinusoid(t: jax.Array, dim: int = TIMESTEP_EMBED_DIM, max_period: float = 10000.0) -> jax.Array:
    """``[cos, sin]`` features ``[..., dim]`` of timesteps ``t`` (diffusers ``get_timestep_embedding``
    with ``flip_sin_to_cos=True, downscale_freq_shift=0``), in float32."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
    angles = t.astype(jnp.float32)[..., None] * freqs
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


@scopes.scoped(scopes.NORM_MOD)
def modulate(x: jax.Array, shift: jax.Array, scale: jax.Array) -> jax.Array:
    return x * (1 + scale) + shift


@scopes.scoped(scopes.NORM_MOD)
def table_params(rows: jax.Array, temb_btm: jax.Array | None) -> list[jax.Array]:
    """Rows of a table ``[M, D]`` plus the matching slices of ``temb [B, T, M*D]`` -> M x ``[B, T, D]``
    (diffusers ``get_mod_params``); a missing ``temb`` gives the table alone (``[1, 1, D]`` each)."""
    if temb_btm is None:
        values = rows[None, None].astype(jnp.float32)
    else:
        values = rows[None, None].astype(temb_btm.dtype) + temb_btm.reshape(*temb_btm.shape[:2], *rows.shape)
    return [values[:, :, i] for i in range(rows.shape[0])]


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
        emb = self.linear_2(jax.nn.silu(self.linear_1(timestep_sinusoid(t_bt).astype(dtype))))
        return self.linear(jax.nn.silu(emb)), emb


class TextProjection(nnx.Module):
    """Caption features -> model width: linear, GELU(tanh), linear (``PixArtAlphaTextProjection``)."""

    def __init__(self, in_dim: int, dim: int, *, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        self.linear_1 = Linear(in_dim, dim, axes=("caption", "embed"), dtype=param_dtype, rngs=rngs)
        self.linear_2 = Linear(dim, dim, axes=(None, "embed"), dtype=param_dtype, rngs=rngs)

    @scopes.module_scope
    def __call__(self, x_bsc: jax.Array) -> jax.Array:
        return self.linear_2(gelu_tanh(self.linear_1(x_bsc)))


class FeedForward(nnx.Module):
    """D -> 4D -> D with GELU(tanh) (diffusers ``FeedForward``, ``gelu-approximate``)."""

    def __init__(self, dim: int, *, bias: bool, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        kw: dict[str, Any] = dict(use_bias=bias, dtype=param_dtype, rngs=rngs)
        self.proj_in = Linear(dim, FF_MULT * dim, axes=("embed", "mlp"), **kw)
        self.proj_out = Linear(FF_MULT * dim, dim, axes=("mlp", "embed"), **kw)
        scopes.label(self, scopes.FEED_FORWARD_CHILDREN)

    @scopes.module_scope
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj_out(gelu_tanh(self.proj_in(x)))


class StreamInputs(NamedTuple):
    """What every layer reads for one modality (video: D wide, T in {1, L}; audio: Da, T in {1, A})."""

    text: jax.Array  # [B, S, D] text keys/values
    text_bias: jax.Array | None  # [B, 1, 1, S] additive mask
    temb: jax.Array  # [B, T, M*D] self-attention / FF (/ text query) modulation
    temb_ca: jax.Array  # [B, T, 4*D] a2v/v2a scale and shift
    temb_ca_gate: jax.Array  # [B, T, D] a2v (video) or v2a (audio) gate
    temb_prompt: jax.Array | None  # [B, 1, 2*D] text K/V modulation (LTX-2.3)
    rope: RopeTables  # self-attention RoPE
    cross_rope: RopeTables  # time-only RoPE of a2v/v2a attention


class BlockInputs(NamedTuple):
    """Everything a block reads besides its parameters and the two streams (same for every layer);
    ``keep``: STG row mask ``[B, 1, 1]`` (1 = attend) or None."""

    video: StreamInputs
    audio: StreamInputs
    keep: jax.Array | None


class _Stream(NamedTuple):
    """One modality's view of a block: the video and audio streams run the same code."""

    attn1: Attention
    attn2: Attention
    ff: FeedForward
    table: nnx.Param
    prompt_table: nnx.Param | None  # present iff cfg.prompt_modulation
    cross_mod: bool


class Block(nnx.Module):
    """One ``LTX2VideoTransformerBlock``: per stream self-attention, text cross-attention,
    audio<->video cross-attention (a2v, v2a), feed-forward; AdaLN-zero modulation from per-layer
    tables plus global timestep embeddings."""

    def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
        D, Da, pd = cfg.inner_dim, cfg.audio_inner_dim, jnp.dtype(cfg.param_dtype)
        N, K, Na, Ka = cfg.num_attention_heads, cfg.head_dim, cfg.audio_num_attention_heads, cfg.audio_head_dim

        def attn(q_dim: int, kv_dim: int, heads: int, head_dim: int, gated: bool) -> Attention:
            return Attention(
                q_dim,
                kv_dim,
                heads,
                head_dim,
                bias=cfg.attention_bias,
                out_bias=cfg.attention_out_bias,
                gated=gated,
                eps=cfg.norm_eps,
                rope_type=cfg.rope_type,
                impl=cfg.attention_impl,
                strategy=cfg.sharding,
                param_dtype=pd,
                rngs=rngs,
            )

        def table(rows: int, dim: int, std: float) -> nnx.Param:
            return param(jax.random.normal(rngs.params(), (rows, dim), pd) * std, ("table", "embed"))

        self.attn1 = attn(D, D, N, K, cfg.gated_attn)
        self.audio_attn1 = attn(Da, Da, Na, Ka, cfg.audio_gated_attn)
        self.attn2 = attn(D, cfg.cross_attention_dim, N, K, cfg.gated_attn)
        self.audio_attn2 = attn(Da, cfg.audio_cross_attention_dim, Na, Ka, cfg.audio_gated_attn)
        self.audio_to_video_attn = attn(D, Da, Na, Ka, cfg.gated_attn)
        self.video_to_audio_attn = attn(Da, D, Na, Ka, cfg.audio_gated_attn)
        self.ff = FeedForward(D, bias=cfg.ff_bias, param_dtype=pd, rngs=rngs)
        self.audio_ff = FeedForward(Da, bias=cfg.audio_ff_bias, param_dtype=pd, rngs=rngs)
        self.scale_shift_table = table(cfg.video_mod_params, D, D**-0.5)
        self.audio_scale_shift_table = table(cfg.audio_mod_params, Da, Da**-0.5)
        self.prompt_scale_shift_table = table(2, D, 1.0) if cfg.prompt_modulation else None
        self.audio_prompt_scale_shift_table = table(2, Da, 1.0) if cfg.prompt_modulation else None
        self.video_a2v_cross_attn_scale_shift_table = table(5, D, 1.0)
        self.audio_a2v_cross_attn_scale_shift_table = table(5, Da, 1.0)
        self.cfg = cfg
        scopes.label(self, scopes.BLOCK_CHILDREN)

    def _streams(self) -> tuple[_Stream, _Stream]:
        cfg = self.cfg
        video = _Stream(
            self.attn1, self.attn2, self.ff, self.scale_shift_table, self.prompt_scale_shift_table, cfg.cross_attn_mod
        )
        audio = _Stream(
            self.audio_attn1,
            self.audio_attn2,
            self.audio_ff,
            self.audio_scale_shift_table,
            self.audio_prompt_scale_shift_table,
            cfg.audio_cross_attn_mod,
        )
        return video, audio

    @scopes.scoped(scopes.BLOCK)
    def __call__(
        self, x_bld: jax.Array, a_bad: jax.Array, inp: BlockInputs, stg: jax.Array | None, *, isolate: bool
    ) -> tuple[jax.Array, jax.Array]:
        """Video ``x_bld [B, L, D]`` and audio ``a_bad [B, A, Da]`` through one block. ``stg`` is this
        layer's scalar flag: where true, rows with ``inp.keep == 0`` skip self-attention."""
        video, audio = self._streams()
        keep = None if inp.keep is None or stg is None else jnp.where(stg, inp.keep, 1.0)
        x_bld, mods = self._self_and_text(video, x_bld, inp.video, keep)
        a_bad, audio_mods = self._self_and_text(audio, a_bad, inp.audio, keep)
        if not isolate:
            x_bld, a_bad = self._audio_video(x_bld, a_bad, inp)
        return self._feed_forward(video, x_bld, mods), self._feed_forward(audio, a_bad, audio_mods)

    def _self_and_text(
        self, s: _Stream, x: jax.Array, inp: StreamInputs, keep: jax.Array | None
    ) -> tuple[jax.Array, list[jax.Array]]:
        """Self-attention (gated residual) then text cross-attention of one stream."""
        eps = self.cfg.norm_eps
        mods = table_params(s.table[...], inp.temb)  # shift/scale/gate msa, mlp[, text q]
        keep = keep if self.cfg.perturbed_attn else None
        x = x + s.attn1(modulate(rms_norm(x, eps), mods[0], mods[1]), q_rope=inp.rope, keep=keep) * mods[2]
        h, text = rms_norm(x, eps), inp.text
        if s.cross_mod:
            h = modulate(h, mods[6], mods[7])
        if self.cfg.prompt_modulation:
            assert s.prompt_table is not None
            kv_shift, kv_scale = table_params(s.prompt_table[...], inp.temb_prompt)
            text = modulate(text, kv_shift.astype(text.dtype), kv_scale.astype(text.dtype))
        out = s.attn2(h, text, bias=inp.text_bias)
        return x + (out * mods[8] if s.cross_mod else out), mods

    def _audio_video(self, x: jax.Array, a: jax.Array, inp: BlockInputs) -> tuple[jax.Array, jax.Array]:
        """a2v (Q video, K/V audio) and v2a (Q audio, K/V video) cross-attention, both from the
        same normalised inputs; per-layer tables rows: a2v scale, a2v shift, v2a scale, v2a shift, gate."""
        eps = self.cfg.norm_eps
        nx, na = rms_norm(x, eps), rms_norm(a, eps)
        video_rows = self.video_a2v_cross_attn_scale_shift_table[...]
        audio_rows = self.audio_a2v_cross_attn_scale_shift_table[...]
        video, audio = inp.video, inp.audio
        v_a2v_scale, v_a2v_shift, v_v2a_scale, v_v2a_shift = table_params(video_rows[:4], video.temb_ca)
        a_a2v_scale, a_a2v_shift, a_v2a_scale, a_v2a_shift = table_params(audio_rows[:4], audio.temb_ca)
        (a2v_gate,) = table_params(video_rows[4:], video.temb_ca_gate)
        (v2a_gate,) = table_params(audio_rows[4:], audio.temb_ca_gate)
        a2v = self.audio_to_video_attn(
            modulate(nx, v_a2v_shift, v_a2v_scale),
            modulate(na, a_a2v_shift, a_a2v_scale),
            q_rope=video.cross_rope,
            k_rope=audio.cross_rope,
        )
        v2a = self.video_to_audio_attn(
            modulate(na, a_v2a_shift, a_v2a_scale),
            modulate(nx, v_v2a_shift, v_v2a_scale),
            q_rope=audio.cross_rope,
            k_rope=video.cross_rope,
        )
        return x + a2v_gate * a2v, a + v2a_gate * v2a

    def _feed_forward(self, s: _Stream, x: jax.Array, mods: list[jax.Array]) -> jax.Array:
        h = modulate(rms_norm(x, self.cfg.norm_eps), mods[3], mods[4])
        return x + s.ff(h) * mods[5]


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
        cfg, dt = self.cfg, jnp.dtype(self.cfg.dtype)
        batch = hidden_states.shape[0]
        audio_timestep = timestep if audio_timestep is None else audio_timestep
        audio_sigma = sigma if audio_sigma is None else audio_sigma
        # Grid coordinates are the same for every row: tables for one row, broadcast over the batch
        # (half the cos/sin work and table memory of the CFG batch; explicit coords keep their B).
        if video_coords is None:
            video_coords = self._video_coords(1, num_frames, height, width, fps)
        if audio_coords is None:
            audio_coords = self._audio_coords(1, audio_num_frames)
        rope = av_rope(cfg, video_coords, audio_coords)
        text, audio_text = self._text(encoder_hidden_states, audio_encoder_hidden_states, dt)
        temb, emb = self.time_embed(jnp.asarray(timestep), dt)
        audio_temb, audio_emb = self.audio_time_embed(jnp.asarray(audio_timestep), dt)
        ca, audio_ca, ca_gate, audio_ca_gate = self._cross_embeddings(
            timestep, audio_timestep, sigma, audio_sigma, use_cross_timestep, dt
        )
        prompt, audio_prompt = self._prompt_embeddings(sigma, audio_sigma, dt)
        flags, keep = self._stg(batch, spatio_temporal_guidance_blocks, perturbation_mask, dt)
        inputs = BlockInputs(
            StreamInputs(text, _bias(encoder_attention_mask, dt), temb, ca, ca_gate, prompt, rope.video,
                         rope.cross_video),
            StreamInputs(audio_text, _bias(audio_encoder_attention_mask, dt), audio_temb, audio_ca,
                         audio_ca_gate, audio_prompt, rope.audio, rope.cross_audio),
            keep,
        )  # fmt: skip
        x = self.proj_in(hidden_states.astype(dt))
        a = self.audio_proj_in(audio_hidden_states.astype(dt))
        x, a = self._run_blocks(x, a, inputs, flags, isolate_modalities)
        return (
            _output(x, emb, self.scale_shift_table[...], self.proj_out),
            _output(a, audio_emb, self.audio_scale_shift_table[...], self.audio_proj_out),
        )

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

    def _text(self, text: jax.Array, audio_text: jax.Array, dt: jnp.dtype) -> tuple[jax.Array, jax.Array]:
        """Text features ``[B, S, caption_channels]`` -> ``[B, S, D]``, ``[B, S, Da]`` (LTX-2.0 caption
        projections; LTX-2.3 connectors already emit model widths)."""
        text, audio_text = text.astype(dt), audio_text.astype(dt)
        if self.caption_projection is not None and self.audio_caption_projection is not None:
            text, audio_text = self.caption_projection(text), self.audio_caption_projection(audio_text)
        return text, audio_text

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

    def _run_blocks(
        self, x: jax.Array, a: jax.Array, inputs: BlockInputs, flags: jax.Array | None, isolate: bool
    ) -> tuple[jax.Array, jax.Array]:
        """All blocks over the stacked state: ``lax.scan`` or a Python loop, same block function."""
        graphdef, state = nnx.split(self.transformer_blocks)
        strategy = self.cfg.sharding

        def layer(carry: tuple[jax.Array, jax.Array], xs: tuple[nnx.State, jax.Array | None]):
            state_l, stg = xs
            x, a = nnx.merge(graphdef, state_l)(*carry, inputs, stg, isolate=isolate)
            return (constrain(x, ACTIVATION, strategy), constrain(a, ACTIVATION, strategy)), None

        carry = (constrain(x, ACTIVATION, strategy), constrain(a, ACTIVATION, strategy))
        if self.cfg.scan_layers:
            carry, _ = jax.lax.scan(layer, carry, (state, flags))
            return carry
        for i in range(self.cfg.num_layers):
            carry, _ = layer(carry, (layer_slice(state, i), None if flags is None else flags[i]))
        return carry


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
