"""LTX-2 text connectors: Gemma-3 hidden states -> video and audio text embeddings.

Follows diffusers ``LTX2TextConnectors`` (``diffusers/pipelines/ltx2/connectors.py``):

* LTX-2.0 (``per_modality_projections=False``): ``per_layer_masked_mean_norm`` of the stacked
  hidden states, one shared ``text_proj_in`` (C*L' -> C) feeding both connectors.
* LTX-2.3 (``per_modality_projections=True``): ``per_token_rms_norm``, per-modality projections
  ``video_text_proj_in`` / ``audio_text_proj_in`` (with bias), gated attention in the blocks.

Each connector (``LTX2ConnectorTransformer1d``) moves the valid tokens to the front, fills the
tail with learnable registers (then attends without a mask), applies 1-D RoPE over positions and
runs pre-norm self-attention + feed-forward blocks, stacked and scanned.

Shapes: B batch, S text tokens, C caption channels (Gemma hidden), L' = text_proj_in_factor
(hidden states per token: layers + embeddings), D connector width, N heads, K head dim.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from ltx2 import scopes
from ltx2.layers import Linear, RMSNorm, gelu_tanh, layer_slice, rms_norm, stack_layers
from ltx2.rope import RopeTables, apply_rope, rope_tables
from ltx2.sharding import constrain, get_strategy, param

EPS = 1e-6  # diffusers hard-codes 1e-6 for every connector norm
FF_MULT = 4
ROPE_TYPES = ("interleaved", "split")
DTYPES = ("float32", "bfloat16")
TEXT_AXES = ("activation_batch", "activation_text_length", "activation_embed")
_KNOBS = ("scan_layers", "sharding", "dtype", "param_dtype")
_STREAM_FIELDS = ("num_attention_heads", "attention_head_dim", "num_layers", "num_learnable_registers")


@dataclass(frozen=True)
class Stream:
    """Hyper-parameters of one connector (video or audio)."""

    num_heads: int
    head_dim: int
    num_layers: int
    num_registers: int | None
    gated: bool

    @property
    def inner_dim(self) -> int:
        return self.num_heads * self.head_dim


def _fail(field: str, value: Any, reason: str) -> ValueError:
    return ValueError(f"ConnectorsConfig.{field}={value!r}: {reason}")


@dataclass(frozen=True)
class ConnectorsConfig:
    """``LTX2TextConnectors`` hyper-parameters (diffusers names and defaults) plus our knobs."""

    caption_channels: int = 3840
    text_proj_in_factor: int = 49
    video_connector_num_attention_heads: int = 30
    video_connector_attention_head_dim: int = 128
    video_connector_num_layers: int = 2
    video_connector_num_learnable_registers: int | None = 128
    video_gated_attn: bool = False
    audio_connector_num_attention_heads: int = 30
    audio_connector_attention_head_dim: int = 128
    audio_connector_num_layers: int = 2
    audio_connector_num_learnable_registers: int | None = 128
    audio_gated_attn: bool = False
    connector_rope_base_seq_len: int = 4096
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    causal_temporal_positioning: bool = False  # stored but unused by diffusers' forward, as here
    rope_type: str = "interleaved"
    per_modality_projections: bool = False
    video_hidden_dim: int = 4096
    audio_hidden_dim: int = 2048
    proj_bias: bool = False
    # Our knobs (not diffusers fields).
    scan_layers: bool = True
    sharding: str = "replicated"
    dtype: str = "float32"
    param_dtype: str = "float32"

    def __post_init__(self) -> None:
        for name in ("caption_channels", "text_proj_in_factor", "connector_rope_base_seq_len"):
            if not _positive_int(getattr(self, name)):
                raise _fail(name, getattr(self, name), "must be a positive integer")
        for prefix in ("video", "audio"):
            for field in _STREAM_FIELDS:
                name = f"{prefix}_connector_{field}"
                value = getattr(self, name)
                if not (_positive_int(value) or (field == "num_learnable_registers" and value is None)):
                    raise _fail(name, value, "must be a positive integer")
        for name, allowed in (("rope_type", ROPE_TYPES), ("dtype", DTYPES), ("param_dtype", DTYPES)):
            if getattr(self, name) not in allowed:
                raise _fail(name, getattr(self, name), f"must be one of {allowed}")
        try:
            get_strategy(self.sharding)
        except ValueError as e:
            raise _fail("sharding", self.sharding, str(e)) from None
        self._check_dims()

    def _check_dims(self) -> None:
        for prefix in ("video", "audio"):
            s = self.stream(prefix)
            # The connector input is the projection output: C (2.0, shared) or the modality width (2.3).
            width, what = (
                (getattr(self, f"{prefix}_hidden_dim"), f"{prefix}_hidden_dim")
                if self.per_modality_projections
                else (self.caption_channels, "caption_channels")
            )
            if s.inner_dim != width:
                raise _fail(
                    f"{prefix}_connector_num_attention_heads",
                    s.num_heads,
                    f"heads * head_dim = {s.inner_dim} must equal {what} = {width}",
                )
            if s.head_dim % 2:
                raise _fail(f"{prefix}_connector_attention_head_dim", s.head_dim, "must be even (RoPE pairs)")

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def text_encoder_dim(self) -> int:
        """Features per token entering the connectors: C * L'."""
        return self.caption_channels * self.text_proj_in_factor

    def stream(self, modality: str) -> Stream:
        if modality not in ("video", "audio"):
            raise ValueError(f"modality must be 'video' or 'audio', got {modality!r}")
        get = lambda f: getattr(self, f"{modality}_connector_{f}")  # noqa: E731
        return Stream(
            get("num_attention_heads"),
            get("attention_head_dim"),
            get("num_layers"),
            get("num_learnable_registers"),
            getattr(self, f"{modality}_gated_attn"),
        )

    # ---- presets ---------------------------------------------------------------------------
    @classmethod
    def tiny(cls, **overrides: Any) -> ConnectorsConfig:
        """The reference tiny LTX-2.0 connectors: C=24, L'=3, heads 2x12, 2/1 layers, 8 registers."""
        base = dict(
            caption_channels=24,
            text_proj_in_factor=3,
            video_connector_num_attention_heads=2,
            video_connector_attention_head_dim=12,
            video_connector_num_layers=2,
            video_connector_num_learnable_registers=8,
            audio_connector_num_attention_heads=2,
            audio_connector_attention_head_dim=12,
            audio_connector_num_layers=1,
            audio_connector_num_learnable_registers=8,
            rope_type="split",
            video_hidden_dim=32,
            audio_hidden_dim=16,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def tiny_ltx2_3(cls, **overrides: Any) -> ConnectorsConfig:
        """Tiny LTX-2.3 connectors: per-modality projections to 32 (2x16) / 16 (2x8), gated."""
        base = dict(
            caption_channels=24,
            text_proj_in_factor=3,
            video_connector_num_attention_heads=2,
            video_connector_attention_head_dim=16,
            video_connector_num_layers=2,
            video_connector_num_learnable_registers=8,
            video_gated_attn=True,
            audio_connector_num_attention_heads=2,
            audio_connector_attention_head_dim=8,
            audio_connector_num_layers=1,
            audio_connector_num_learnable_registers=8,
            audio_gated_attn=True,
            rope_type="split",
            per_modality_projections=True,
            video_hidden_dim=32,
            audio_hidden_dim=16,
            proj_bias=True,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def ltx2_19b(cls, **overrides: Any) -> ConnectorsConfig:
        """Released LTX-2.0 connectors (1,431.5 M params): diffusers defaults with split RoPE."""
        return cls(**{"rope_type": "split", **overrides})

    @classmethod
    def ltx2_3(cls, **overrides: Any) -> ConnectorsConfig:
        """LTX-2.3 connectors: 32x128 video / 32x64 audio, 8 layers each, gated attention,
        per-modality projections with bias (diffusers converter config)."""
        base = dict(
            video_connector_num_attention_heads=32,
            video_connector_attention_head_dim=128,
            video_connector_num_layers=8,
            video_gated_attn=True,
            audio_connector_num_attention_heads=32,
            audio_connector_attention_head_dim=64,
            audio_connector_num_layers=8,
            audio_gated_attn=True,
            rope_type="split",
            per_modality_projections=True,
            proj_bias=True,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def from_diffusers_config(cls, config: Mapping[str, Any], **overrides: Any) -> ConnectorsConfig:
        """From ``LTX2TextConnectors.config``; unknown keys raise ValueError naming the key."""
        fields = {f.name for f in dataclasses.fields(cls)} - set(_KNOBS)
        kwargs: dict[str, Any] = {}
        for key, value in config.items():
            if key.startswith("_"):
                continue  # _class_name, _diffusers_version, ...
            if key not in fields:
                raise ValueError(f"diffusers config key {key!r} is not supported by ConnectorsConfig")
            kwargs[key] = value
        return cls(**{**kwargs, **overrides})

    def replace(self, **changes: Any) -> ConnectorsConfig:
        return dataclasses.replace(self, **changes)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# ---- feature extraction (pure functions) ------------------------------------------------------


def per_layer_masked_mean_norm(
    x_bscl: jax.Array, lengths_b: jax.Array, padding_side: str = "left", scale_factor: float = 8.0
) -> jax.Array:
    """LTX-2.0 normalisation of ``[B, S, C, L']`` hidden states -> ``[B, S, C*L']``: per sample
    and layer, subtract the masked mean over (tokens, channels), divide by the masked range,
    scale; padded tokens are zero. The mask comes from the lengths, as in diffusers.

    Computed in float32 and rounded once to the input's dtype: diffusers divides the sum by a
    float32 count, so torch's type promotion carries the mean, the centring, the division and the
    scaling of a bfloat16 input in float32 and rounds only at its final ``.to(original_dtype)``."""
    x_bscl, dtype = x_bscl.astype(jnp.float32), x_bscl.dtype
    batch, seq, channels, _ = x_bscl.shape
    token_s = jnp.arange(seq)[None, :]
    if padding_side == "left":
        valid_bs = token_s >= seq - lengths_b[:, None]
    elif padding_side == "right":
        valid_bs = token_s < lengths_b[:, None]
    else:
        raise ValueError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
    valid = valid_bs[:, :, None, None]
    count = (lengths_b * channels).reshape(batch, 1, 1, 1)
    mean = jnp.where(valid, x_bscl, 0.0).sum(axis=(1, 2), keepdims=True) / (count + EPS)
    lo = jnp.where(valid, x_bscl, jnp.inf).min(axis=(1, 2), keepdims=True)
    hi = jnp.where(valid, x_bscl, -jnp.inf).max(axis=(1, 2), keepdims=True)
    normed = (x_bscl - mean) / (hi - lo + EPS) * scale_factor
    normed_bsf = normed.reshape(batch, seq, -1)
    return jnp.where(valid_bs[..., None], normed_bsf, 0.0).astype(dtype)


def per_token_rms_norm(x_bscl: jax.Array) -> jax.Array:
    """LTX-2.3 normalisation: RMS over the channel axis C of ``[B, S, C, L']`` (input dtype)."""
    variance = jnp.mean(jnp.square(x_bscl), axis=2, keepdims=True)
    return x_bscl * jax.lax.rsqrt(variance + EPS)


def additive_mask(mask_bs: jax.Array, dtype: jnp.dtype) -> jax.Array:
    """1 = keep / 0 = pad -> additive bias ``(mask - 1) * finfo.max`` (diffusers' exact values)."""
    return (mask_bs.astype(jnp.int32) - 1).astype(dtype) * jnp.finfo(dtype).max


def fill_with_registers(x_bsd: jax.Array, valid_bs: jax.Array, registers_rd: jax.Array) -> jax.Array:
    """Move valid tokens to the front (stable order), fill the tail with the registers tiled to
    S and indexed by absolute position (diffusers / LTX ``_replace_padded_with_learnable_registers``)."""
    seq, num_registers = x_bsd.shape[1], registers_rd.shape[0]
    if seq % num_registers:
        raise ValueError(f"text length {seq} must be divisible by the number of registers {num_registers}")
    registers_sd = jnp.tile(registers_rd, (seq // num_registers, 1)).astype(x_bsd.dtype)
    order_bs = jnp.argsort(1 - valid_bs.astype(jnp.int32), axis=1, stable=True)
    front_bsd = jnp.take_along_axis(x_bsd, order_bs[..., None], axis=1)
    front_bs = jnp.arange(seq)[None, :] < valid_bs.sum(axis=1, keepdims=True)
    return jnp.where(front_bs[..., None], front_bsd, registers_sd[None])


def connector_rope(batch: int, seq_len: int, stream: Stream, cfg: ConnectorsConfig) -> RopeTables:
    """1-D RoPE over token positions / ``connector_rope_base_seq_len`` (``LTX2RotaryPosEmbed1d``)."""
    positions = jnp.broadcast_to(jnp.arange(seq_len, dtype=jnp.float32), (batch, 1, seq_len))  # [B, 1 axis, S]
    return rope_tables(
        positions,
        dim=stream.inner_dim,
        max_positions=(cfg.connector_rope_base_seq_len,),
        theta=cfg.rope_theta,
        double_precision=cfg.rope_double_precision,
        rope_type=cfg.rope_type,
        num_heads=stream.num_heads,
    )


# ---- modules ----------------------------------------------------------------------------------


class ConnectorAttention(nnx.Module):
    """Self-attention of a connector block (diffusers ``LTX2Attention`` with
    ``LTX2AudioVideoAttnProcessor``): q/k/v (+bias), RMSNorm across heads on q and k, RoPE,
    softmax(q k^T / sqrt(K) + bias) v, optional per-head gate ``2*sigmoid(to_gate_logits(x))``."""

    def __init__(self, stream: Stream, rope_type: str, *, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        dim = inner = stream.inner_dim

        def lin(n_in: int, n_out: int, axes: tuple[str | None, str | None]) -> Linear:
            return Linear(n_in, n_out, axes=axes, dtype=param_dtype, rngs=rngs)

        self.to_q = lin(dim, inner, ("qkv_in", "heads"))
        self.to_k = lin(dim, inner, ("qkv_in", "heads"))
        self.to_v = lin(dim, inner, ("qkv_in", "heads"))
        self.norm_q = RMSNorm(inner, eps=EPS)
        self.norm_k = RMSNorm(inner, eps=EPS)
        self.to_out = lin(inner, dim, ("heads", "attn_out"))
        self.to_gate_logits = lin(dim, stream.num_heads, ("embed", None)) if stream.gated else None
        self.num_heads, self.head_dim, self.rope_type = stream.num_heads, stream.head_dim, rope_type

    def __call__(self, x_bsd: jax.Array, bias_bs: jax.Array | None, rope: RopeTables) -> jax.Array:
        batch, seq, _ = x_bsd.shape
        q = apply_rope(self.norm_q(self.to_q(x_bsd)), rope, self.rope_type)
        k = apply_rope(self.norm_k(self.to_k(x_bsd)), rope, self.rope_type)
        v = self.to_v(x_bsd)
        q_bsnk, k_bsnk, v_bsnk = (t.reshape(batch, seq, self.num_heads, self.head_dim) for t in (q, k, v))
        bias = None if bias_bs is None else bias_bs[:, None, None, :].astype(q.dtype)
        o_bsnk = jax.nn.dot_product_attention(q_bsnk, k_bsnk, v_bsnk, bias=bias)
        if self.to_gate_logits is not None:
            gates_bsn = 2.0 * jax.nn.sigmoid(self.to_gate_logits(x_bsd))
            o_bsnk = o_bsnk * gates_bsn[..., None].astype(o_bsnk.dtype)
        return self.to_out(o_bsnk.reshape(batch, seq, -1))


class FeedForward(nnx.Module):
    """diffusers ``FeedForward(dim, activation_fn="gelu-approximate")``: D -> 4D -> GELU(tanh) -> D."""

    def __init__(self, dim: int, *, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        self.proj_in = Linear(dim, FF_MULT * dim, axes=("mlp_in", "mlp"), dtype=param_dtype, rngs=rngs)
        self.proj_out = Linear(FF_MULT * dim, dim, axes=("mlp", "mlp_out"), dtype=param_dtype, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.proj_out(gelu_tanh(self.proj_in(x)))


class ConnectorBlock(nnx.Module):
    """``LTX2TransformerBlock1d``: x + attn1(rms(x)); x + ff(rms(x)) (weightless RMSNorms)."""

    def __init__(self, stream: Stream, rope_type: str, *, param_dtype: jnp.dtype, rngs: nnx.Rngs):
        self.attn1 = ConnectorAttention(stream, rope_type, param_dtype=param_dtype, rngs=rngs)
        self.ff = FeedForward(stream.inner_dim, param_dtype=param_dtype, rngs=rngs)

    def __call__(self, x_bsd: jax.Array, bias_bs: jax.Array | None, rope: RopeTables) -> jax.Array:
        x_bsd = x_bsd + self.attn1(rms_norm(x_bsd, EPS), bias_bs, rope)
        return x_bsd + self.ff(rms_norm(x_bsd, EPS))


def _registers_init(stream: Stream, dtype: jnp.dtype, rngs: nnx.Rngs) -> jax.Array:
    """``torch.rand(R, D) * 2 - 1`` in diffusers: uniform in [-1, 1)."""
    shape = (stream.num_registers or 0, stream.inner_dim)
    return jax.random.uniform(rngs.params(), shape, dtype, -1.0, 1.0)


class ConnectorTransformer1d(nnx.Module):
    """``LTX2ConnectorTransformer1d``: registers, 1-D RoPE, stacked blocks, final RMSNorm."""

    def __init__(self, stream: Stream, cfg: ConnectorsConfig, *, rngs: nnx.Rngs):
        pdt = jnp.dtype(cfg.param_dtype)
        self.learnable_registers = (
            None if stream.num_registers is None else param(_registers_init(stream, pdt, rngs), (None, "embed"))
        )
        self.transformer_blocks = stack_layers(
            lambda r: ConnectorBlock(stream, cfg.rope_type, param_dtype=pdt, rngs=r), stream.num_layers, rngs
        )
        self.stream, self.cfg = stream, cfg

    def __call__(self, x_bsd: jax.Array, bias_bs: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``x_bsd [B, S, D]``, additive ``bias_bs [B, S]`` -> (``[B, S, D]``, the bias used)."""
        attn_bias: jax.Array | None = bias_bs
        if self.learnable_registers is not None:
            x_bsd = fill_with_registers(x_bsd, bias_bs >= -9000.0, self.learnable_registers[...])
            bias_bs, attn_bias = jnp.zeros_like(bias_bs), None  # all tokens valid now
        rope = connector_rope(x_bsd.shape[0], x_bsd.shape[1], self.stream, self.cfg)
        x_bsd = self._blocks(x_bsd, attn_bias, rope)
        return rms_norm(x_bsd, EPS), bias_bs

    def _blocks(self, x_bsd: jax.Array, bias_bs: jax.Array | None, rope: RopeTables) -> jax.Array:
        graphdef, stacked = nnx.split(self.transformer_blocks)

        def block(h: jax.Array, layer_state: nnx.State) -> tuple[jax.Array, None]:
            h = nnx.merge(graphdef, layer_state)(h, bias_bs, rope)
            return constrain(h, TEXT_AXES, self.cfg.sharding), None

        x_bsd = constrain(x_bsd, TEXT_AXES, self.cfg.sharding)
        if self.cfg.scan_layers:
            return jax.lax.scan(block, x_bsd, stacked)[0]
        for i in range(self.stream.num_layers):
            x_bsd = block(x_bsd, layer_slice(stacked, i))[0]
        return x_bsd


class LTX2TextConnectors(nnx.Module):
    """Stacked Gemma-3 hidden states -> (video text embedding ``[B, S, Dv]``, audio text
    embedding ``[B, S, Da]``, mask ``[B, S]`` int32), like diffusers ``LTX2TextConnectors``."""

    def __init__(self, cfg: ConnectorsConfig, *, rngs: nnx.Rngs):
        def proj(width: int) -> Linear:
            return Linear(
                cfg.text_encoder_dim,
                width,
                axes=("caption", "embed"),
                use_bias=cfg.proj_bias,
                dtype=jnp.dtype(cfg.param_dtype),
                rngs=rngs,
            )

        per_modality = cfg.per_modality_projections
        self.text_proj_in = None if per_modality else proj(cfg.caption_channels)
        self.video_text_proj_in = proj(cfg.video_hidden_dim) if per_modality else None
        self.audio_text_proj_in = proj(cfg.audio_hidden_dim) if per_modality else None
        self.video_connector = ConnectorTransformer1d(cfg.stream("video"), cfg, rngs=rngs)
        self.audio_connector = ConnectorTransformer1d(cfg.stream("audio"), cfg, rngs=rngs)
        self.cfg = cfg

    @scopes.scoped(scopes.CONNECTORS)
    def __call__(
        self,
        text_hidden_states: jax.Array,
        attention_mask_bs: jax.Array,
        *,
        padding_side: str = "left",
        scale_factor: float = 8.0,
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``text_hidden_states`` ``[B, S, C, L']`` or flattened ``[B, S, C*L']`` (feature
        ``c*L' + l``); ``attention_mask_bs`` 1 = token, 0 = padding. ``padding_side`` and
        ``scale_factor`` matter for the 2.0 path only."""
        cfg = self.cfg
        x = text_hidden_states.astype(jnp.dtype(cfg.dtype))
        if x.ndim == 3:
            x = x.reshape(*x.shape[:2], cfg.caption_channels, -1)
        if cfg.per_modality_projections:
            video_in, audio_in = self._project_per_modality(x, attention_mask_bs)
        else:
            normed = per_layer_masked_mean_norm(x, attention_mask_bs.sum(-1), padding_side, scale_factor)
            assert self.text_proj_in is not None  # set for every 2.0 config
            video_in = audio_in = self.text_proj_in(normed)
        bias_bs = additive_mask(attention_mask_bs, video_in.dtype)
        video_bsd, video_bias = self.video_connector(video_in, bias_bs)
        # diffusers binarises the connector's returned bias with `< 1e-6`: every entry passes
        # (0 with registers, 0 or -max without), so the mask handed to the DiT is all ones.
        mask_bs = (video_bias < 1e-6).astype(jnp.int32)
        video_bsd = video_bsd * mask_bs[..., None].astype(video_bsd.dtype)
        audio_bsd, _ = self.audio_connector(audio_in, bias_bs)
        return video_bsd, audio_bsd, mask_bs

    def _project_per_modality(self, x_bscl: jax.Array, mask_bs: jax.Array) -> tuple[jax.Array, jax.Array]:
        cfg = self.cfg
        assert self.video_text_proj_in is not None and self.audio_text_proj_in is not None  # 2.3 configs
        normed = per_token_rms_norm(x_bscl).reshape(*x_bscl.shape[:2], -1)
        normed = jnp.where(mask_bs.astype(bool)[..., None], normed, 0.0)
        video = self.video_text_proj_in(normed * math.sqrt(cfg.video_hidden_dim / cfg.caption_channels))
        audio = self.audio_text_proj_in(normed * math.sqrt(cfg.audio_hidden_dim / cfg.caption_channels))
        return video, audio
