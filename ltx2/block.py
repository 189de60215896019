"""One LTX-2 DiT block (diffusers ``LTX2VideoTransformerBlock``) and what it reads.

Per stream (video, audio): self-attention ``attn1``, text cross-attention ``attn2``, then the
cross-modal attentions ``a2v`` (Q video, K/V audio) and ``v2a`` (Q audio, K/V video), then the
feed-forward ``ff``; AdaLN-zero modulation from per-layer tables plus global timestep embeddings.
The two streams run the same code (:class:`_Stream`).

Rows of one call may differ in how they are perturbed (the guidance passes of a step batched
together, :mod:`ltx2.passes`): ``BlockInputs.keep`` skips self-attention per row in STG blocks,
``BlockInputs.cross`` turns a2v/v2a off per row (modality isolation). Text keys/values may come
precomputed (:class:`TextKV`, one row per distinct prompt) instead of being projected here.

Shapes: B rows, L video tokens, A audio tokens, S text tokens, D / Da widths, T timestep rows
(1 = shared by every row, or B; per-token L/A), M modulation rows.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2 import scopes
from ltx2.attention import Attention
from ltx2.config import FF_MULT, TransformerConfig
from ltx2.layers import Linear, gelu_tanh, join_chunks, rms_norm, token_chunks
from ltx2.rope import RopeTables, rope_chunks
from ltx2.sharding import audio_names, constrain, get_strategy, param

# The residual stream, between the sub-layers and between blocks (the layer loop's carry too).
RESIDUAL = ("activation_batch", "activation_residual_length", "activation_embed")


def constrain_streams(x: jax.Array, a: jax.Array, strategy: str) -> tuple[jax.Array, jax.Array]:
    """The video and audio residual streams in their layouts between blocks (the audio's tokens by
    :func:`ltx2.sharding.audio_names`)."""
    return constrain(x, RESIDUAL, strategy), constrain(a, audio_names(RESIDUAL, strategy), strategy)


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


def take_rows(x: jax.Array, rows: tuple[int, ...] | None) -> jax.Array:
    """``x[rows]`` along axis 0 for a static row map (``None`` or the identity: ``x`` itself)."""
    if rows is None or rows == tuple(range(x.shape[0])):
        return x
    return jnp.take(x, np.asarray(rows), axis=0)


class FeedForward(nnx.Module):
    """D -> 4D -> D with GELU(tanh) (diffusers ``FeedForward``, ``gelu-approximate``)."""

    def __init__(self, dim: int, *, bias: bool, param_dtype: jnp.dtype, partials: str = "float32", rngs: nnx.Rngs):
        kw: dict[str, Any] = dict(use_bias=bias, dtype=param_dtype, partials=partials, rngs=rngs)
        self.proj_in = Linear(dim, FF_MULT * dim, axes=("mlp_in", "mlp"), **kw)
        self.proj_out = Linear(FF_MULT * dim, dim, axes=("mlp", "mlp_out"), **kw)
        scopes.label(self, scopes.FEED_FORWARD_CHILDREN)

    @scopes.module_scope
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj_out(gelu_tanh(self.proj_in(x)))


class StreamInputs(NamedTuple):
    """What every layer reads for one modality (video: D wide, T in {1, L}; audio: Da, T in {1, A})."""

    text: jax.Array | None  # [B, S, D] text keys/values source (None when TextKV comes precomputed)
    text_bias: jax.Array | None  # [B, 1, 1, S] additive mask
    temb: jax.Array  # [B, T, M*D] self-attention / FF (/ text query) modulation
    temb_ca: jax.Array  # [B, T, 4*D] a2v/v2a scale and shift
    temb_ca_gate: jax.Array  # [B, T, D] a2v (video) or v2a (audio) gate
    temb_prompt: jax.Array | None  # [B, 1, 2*D] text K/V modulation (LTX-2.3)
    rope: RopeTables  # self-attention RoPE
    cross_rope: RopeTables  # time-only RoPE of a2v/v2a attention


class BlockInputs(NamedTuple):
    """Everything a block reads besides its parameters and the two streams (same for every layer).
    ``keep``: STG row mask ``[B, 1, 1]`` (1 = attend) or None; ``cross``: a2v/v2a row mask
    ``[B, 1, 1]`` (0 = modality isolated) or None (every row attends across modalities)."""

    video: StreamInputs
    audio: StreamInputs
    keep: jax.Array | None
    cross: jax.Array | None = None


class TextKV(NamedTuple):
    """Text keys (``norm_k`` applied) and values of the text cross-attentions ``attn2`` /
    ``audio_attn2``, one row per distinct prompt: ``[R, S, D]`` / ``[R, S, Da]`` for one layer,
    with a leading ``[layers]`` axis for the whole model (:meth:`LTX2Transformer.text_kv`)."""

    video_k: jax.Array
    video_v: jax.Array
    audio_k: jax.Array
    audio_v: jax.Array


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
                rope_form=cfg.rope_form,
                impl=cfg.attention_impl,
                min_tokens=cfg.attention_impl_min_tokens,
                strategy=cfg.sharding,
                param_dtype=pd,
                partials=cfg.linear_partials,
                qk_float32=cfg.qk_dtype == "float32",
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
        self.ff = FeedForward(D, bias=cfg.ff_bias, param_dtype=pd, partials=cfg.linear_partials, rngs=rngs)
        self.audio_ff = FeedForward(Da, bias=cfg.audio_ff_bias, param_dtype=pd, partials=cfg.linear_partials, rngs=rngs)
        self.scale_shift_table = table(cfg.video_mod_params, D, D**-0.5)
        self.audio_scale_shift_table = table(cfg.audio_mod_params, Da, Da**-0.5)
        self.prompt_scale_shift_table = table(2, D, 1.0) if cfg.prompt_modulation else None
        self.audio_prompt_scale_shift_table = table(2, Da, 1.0) if cfg.prompt_modulation else None
        self.video_a2v_cross_attn_scale_shift_table = table(5, D, 1.0)
        self.audio_a2v_cross_attn_scale_shift_table = table(5, Da, 1.0)
        self.cfg = cfg
        scopes.label(self, scopes.BLOCK_CHILDREN)

    def _residual(self, x: jax.Array) -> jax.Array:
        """The residual stream after a sub-layer's add, laid out by the strategy's own
        ``activation_residual_length`` rule where it has one (sequence parallelism: the add's
        operand comes reduce-scattered); left to the compiler otherwise, as it always was."""
        strategy = get_strategy(self.cfg.sharding)
        return constrain(x, RESIDUAL, strategy) if "activation_residual_length" in strategy.rules else x

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
        self,
        x_bld: jax.Array,
        a_bad: jax.Array,
        inp: BlockInputs,
        stg: jax.Array | None,
        *,
        isolate: bool,
        kv: TextKV | None = None,
        text_rows: tuple[int, ...] | None = None,
        cross_from: int = 0,
    ) -> tuple[jax.Array, jax.Array]:
        """Video ``x_bld [B, L, D]`` and audio ``a_bad [B, A, Da]`` through one block. ``stg`` is this
        layer's scalar flag: where true, rows with ``inp.keep == 0`` skip self-attention. ``isolate``
        drops a2v/v2a for every row, ``cross_from`` for rows before it (``inp.cross`` by a mask, row by
        row; skipping leading rows saves their a2v/v2a work). ``kv``: this layer's precomputed
        text keys/values (R prompt rows), row ``text_rows[b]`` serving row ``b`` (default: row b);
        with ``text_rows`` but no ``kv``, ``inp.*.text`` are the R prompt rows, projected here once each."""
        video, audio = self._streams()
        keep = None if inp.keep is None or stg is None else jnp.where(stg, inp.keep, 1.0)
        if kv is None and text_rows is not None:  # inp.*.text holds the prompt rows: project each once
            kv = self.text_kv(inp.video.text, inp.audio.text, inp.video.temb_prompt, inp.audio.temb_prompt)
        video_kv = audio_kv = None
        if kv is not None:
            video_kv = (take_rows(kv.video_k, text_rows), take_rows(kv.video_v, text_rows))
            audio_kv = (take_rows(kv.audio_k, text_rows), take_rows(kv.audio_v, text_rows))
        chunks = self.cfg.token_chunks  # the video stream's per-token sub-layers (audio: a few tokens)
        if x_bld.shape[1] % chunks:  # before the first chunked op (attn1's output projection)
            raise ValueError(f"transformer.token_chunks={chunks} does not divide the {x_bld.shape[1]} video tokens")
        x_bld, mods = self._self_and_text(video, x_bld, inp.video, keep, video_kv, chunks)
        a_bad, audio_mods = self._self_and_text(audio, a_bad, inp.audio, keep, audio_kv)
        if not isolate and cross_from:
            x_c, a_c = self._audio_video(x_bld[cross_from:], a_bad[cross_from:], inp, cross_from, chunks)
            x_bld, a_bad = jnp.concatenate([x_bld[:cross_from], x_c]), jnp.concatenate([a_bad[:cross_from], a_c])
        elif not isolate:
            x_bld, a_bad = self._audio_video(x_bld, a_bad, inp, chunks=chunks)
        return self._feed_forward(video, x_bld, mods, chunks), self._feed_forward(audio, a_bad, audio_mods)

    def text_kv(
        self,
        text: jax.Array | None,
        audio_text: jax.Array | None,
        prompt: jax.Array | None,
        audio_prompt: jax.Array | None,
    ) -> TextKV:
        """This layer's text keys/values from ``text [R, S, D]`` / ``audio_text [R, S, Da]``, after the
        LTX-2.3 prompt modulation when the config has it (``prompt``: the prompt AdaLN output
        ``[R or 1, 1, 2*D]``, None without prompt AdaLN: the per-layer table alone)."""
        s_video, s_audio = self._streams()
        with scopes.scope(scopes.ATTN2):  # the K/V half of attn2's qkv, wherever it is computed
            video = s_video.attn2.project_kv(self._text(s_video, text, prompt))
        with scopes.scope(scopes.AUDIO_ATTN2):
            audio = s_audio.attn2.project_kv(self._text(s_audio, audio_text, audio_prompt))
        return TextKV(*video, *audio)

    def _text(self, s: _Stream, text: jax.Array | None, temb_prompt: jax.Array | None) -> jax.Array:
        """The text the cross-attention projects: modulated by the prompt tables in LTX-2.3."""
        if text is None:
            raise ValueError("StreamInputs.text is None: pass the text or this layer's precomputed TextKV")
        if self.cfg.prompt_modulation:
            assert s.prompt_table is not None
            kv_shift, kv_scale = table_params(s.prompt_table[...], temb_prompt)
            text = modulate(text, kv_shift.astype(text.dtype), kv_scale.astype(text.dtype))
        return text

    def _self_and_text(
        self,
        s: _Stream,
        x: jax.Array,
        inp: StreamInputs,
        keep: jax.Array | None,
        kv: tuple[jax.Array, jax.Array] | None,
        chunks: int = 1,
    ) -> tuple[jax.Array, list[jax.Array]]:
        """Self-attention (gated residual) then text cross-attention of one stream; the self-attention's
        output projection and the text cross-attention per token chunk (:meth:`_per_chunk`)."""
        eps = self.cfg.norm_eps
        mods = table_params(s.table[...], inp.temb)  # shift/scale/gate msa, mlp[, text q]
        keep = keep if self.cfg.perturbed_attn else None
        out = s.attn1(modulate(rms_norm(x, eps), mods[0], mods[1]), q_rope=inp.rope, keep=keep, out_chunks=chunks)
        x = self._residual(x + out * mods[2])

        def text(x: jax.Array, mods: list[jax.Array], chunk: int) -> jax.Array:
            h = rms_norm(x, eps)
            if s.cross_mod:
                h = modulate(h, mods[6], mods[7])
            if kv is None:
                out = s.attn2(h, self._text(s, inp.text, inp.temb_prompt), bias=inp.text_bias)
            else:
                out = s.attn2(h, bias=inp.text_bias, kv=kv)
            return self._residual(x + (out * mods[8] if s.cross_mod else out))

        return self._per_chunk(text, x, mods, chunks), mods

    def _per_chunk(self, fn: Any, x: jax.Array, mods: list[jax.Array], chunks: int) -> jax.Array:
        """``fn(x, mods, chunk)`` of a per-token sub-layer, run on ``chunks`` strided token chunks of
        ``x`` and its per-token modulations (``transformer.token_chunks``): the chunks are independent,
        so one chunk's output-projection all-reduce can run under the other's matmuls."""
        if chunks == 1:
            return fn(x, mods, 0)
        tokens = x.shape[1]  # divisible: checked once per block (__call__)
        parts = token_chunks(x, chunks, tokens)
        per_mod = [token_chunks(m, chunks, tokens) for m in mods]
        return join_chunks([fn(parts[c], [m[c] for m in per_mod], c) for c in range(chunks)])

    def _audio_video(
        self, x: jax.Array, a: jax.Array, inp: BlockInputs, first_row: int = 0, chunks: int = 1
    ) -> tuple[jax.Array, jax.Array]:
        """a2v (Q video, K/V audio) and v2a (Q audio, K/V video) cross-attention, both from the
        same normalised inputs; per-layer tables rows: a2v scale, a2v shift, v2a scale, v2a shift, gate.
        ``x``/``a`` are the block's rows from ``first_row`` on (row-wise inputs are sliced to match)."""
        eps = self.cfg.norm_eps
        if first_row:
            inp = inp._replace(video=_rows_from(inp.video, first_row), audio=_rows_from(inp.audio, first_row))
        nx, na = rms_norm(x, eps), rms_norm(a, eps)
        video_rows = self.video_a2v_cross_attn_scale_shift_table[...]
        audio_rows = self.audio_a2v_cross_attn_scale_shift_table[...]
        video, audio = inp.video, inp.audio
        v_a2v_scale, v_a2v_shift, v_v2a_scale, v_v2a_shift = table_params(video_rows[:4], video.temb_ca)
        a_a2v_scale, a_a2v_shift, a_v2a_scale, a_v2a_shift = table_params(audio_rows[:4], audio.temb_ca)
        (a2v_gate,) = table_params(video_rows[4:], video.temb_ca_gate)
        (v2a_gate,) = table_params(audio_rows[4:], audio.temb_ca_gate)
        if inp.cross is not None:  # isolated rows: gate 0, their streams pass through unchanged
            a2v_gate = a2v_gate * inp.cross.astype(a2v_gate.dtype)
            v2a_gate = v2a_gate * inp.cross.astype(v2a_gate.dtype)
        a2v_kv = modulate(na, a_a2v_shift, a_a2v_scale)
        ropes = rope_chunks(video.cross_rope, chunks, x.shape[1], self.cfg.rope_form == "fused")

        def a2v(x: jax.Array, per_token: list[jax.Array], chunk: int) -> jax.Array:
            out = self.audio_to_video_attn(per_token[0], a2v_kv, q_rope=ropes[chunk], k_rope=audio.cross_rope)
            return self._residual(x + per_token[1] * out)

        x_out = self._per_chunk(a2v, x, [modulate(nx, v_a2v_shift, v_a2v_scale), a2v_gate], chunks)
        v2a = self.video_to_audio_attn(
            modulate(na, a_v2a_shift, a_v2a_scale),
            modulate(nx, v_v2a_shift, v_v2a_scale),
            q_rope=audio.cross_rope,
            k_rope=video.cross_rope,
        )
        return x_out, self._residual(a + v2a_gate * v2a)

    def _feed_forward(self, s: _Stream, x: jax.Array, mods: list[jax.Array], chunks: int = 1) -> jax.Array:
        def ff(x: jax.Array, mods: list[jax.Array], chunk: int) -> jax.Array:
            h = modulate(rms_norm(x, self.cfg.norm_eps), mods[3], mods[4])
            return self._residual(x + s.ff(h) * mods[5])

        return self._per_chunk(ff, x, mods, chunks)


def _rows_from(inp: StreamInputs, first: int) -> StreamInputs:
    """The a2v/v2a inputs of rows ``first..``: per-row embeddings sliced, shared (1-row) ones kept."""
    cut = lambda t: t if t.shape[0] == 1 else t[first:]  # noqa: E731
    return inp._replace(temb_ca=cut(inp.temb_ca), temb_ca_gate=cut(inp.temb_ca_gate))
