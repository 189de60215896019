"""Frozen configs of the LTX-2 components, with named presets.

``TransformerConfig`` mirrors the constructor of diffusers' ``LTX2VideoTransformer3DModel``
(same field names, same defaults) plus our performance knobs (``scan_layers``, ``sharding``,
``attention_impl``, ``attention_impl_min_tokens``, ``dtype``, ``param_dtype``, ``linear_partials``,
``rope_form``, ``token_chunks``, ``pipeline_stages``, ``qk_dtype``).
Derived sizes are properties.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ltx2.layers import LINEAR_PARTIALS
from ltx2.sharding import get_strategy

ROPE_TYPES = ("interleaved", "split")
ROPE_FORMS = ("concat", "fused")  # how a split RoPE is written (ltx2.rope): the same float32 arithmetic
ATTENTION_IMPLS = ("auto", "xla", "blocked", "cudnn", "splash", "splash_ring", "splash_input")
DTYPES = ("float32", "bfloat16")
QK_DTYPES = ("activation", "float32")  # what the Q/K norms return (TransformerConfig.qk_dtype)
TIMESTEP_EMBED_DIM = 256  # sinusoidal timestep features (diffusers PixArtAlphaCombinedTimestepSizeEmbeddings)
FF_MULT = 4

# diffusers constructor arguments we accept only at one value (anything else is a different model).
_FIXED_DIFFUSERS_FIELDS: dict[str, Any] = {
    "activation_fn": "gelu-approximate",
    "qk_norm": "rms_norm_across_heads",
    "norm_elementwise_affine": False,
    "use_keyframes_abs_pos_embedding": False,
}
# Our performance knobs: TransformerConfig fields that are not diffusers constructor arguments.
KNOBS = (
    "scan_layers",
    "sharding",
    "attention_impl",
    "attention_impl_min_tokens",
    "dtype",
    "param_dtype",
    "linear_partials",
    "rope_form",
    "token_chunks",
    "pipeline_stages",
    "qk_dtype",
)


def _fail(field: str, value: Any, reason: str) -> ValueError:
    return ValueError(f"TransformerConfig.{field}={value!r}: {reason}")


@dataclass(frozen=True)
class TransformerConfig:
    """``LTX2VideoTransformer3DModel`` hyper-parameters (diffusers names and defaults)."""

    in_channels: int = 128
    out_channels: int = 128
    patch_size: int = 1
    patch_size_t: int = 1
    num_attention_heads: int = 32
    attention_head_dim: int = 128
    cross_attention_dim: int = 4096
    vae_scale_factors: tuple[int, int, int] = (8, 32, 32)
    pos_embed_max_pos: int = 20
    base_height: int = 2048
    base_width: int = 2048
    gated_attn: bool = False
    cross_attn_mod: bool = False
    audio_in_channels: int = 128
    audio_out_channels: int = 128
    audio_patch_size: int = 1
    audio_patch_size_t: int = 1
    audio_num_attention_heads: int = 32
    audio_attention_head_dim: int = 64
    audio_cross_attention_dim: int = 2048
    audio_scale_factor: int = 4
    audio_pos_embed_max_pos: int = 20
    audio_sampling_rate: int = 16000
    audio_hop_length: int = 160
    audio_gated_attn: bool = False
    audio_cross_attn_mod: bool = False
    num_layers: int = 48
    norm_eps: float = 1e-6
    caption_channels: int = 3840
    attention_bias: bool = True
    attention_out_bias: bool = True
    rope_theta: float = 10000.0
    rope_double_precision: bool = True
    causal_offset: int = 1
    timestep_scale_multiplier: int = 1000
    cross_attn_timestep_scale_multiplier: int = 1000
    rope_type: str = "interleaved"
    use_prompt_embeddings: bool = True
    perturbed_attn: bool = False
    ff_bias: bool = True
    audio_ff_bias: bool = True
    use_prompt_adaln_single: bool = True
    # Our knobs (not diffusers fields).
    scan_layers: bool = True
    sharding: str = "replicated"
    # "auto" is the fast choice (ltx2.attention.resolve_attention_impl); the default stays "xla" while
    # reports/baselines/nightly.jsonl (recorded with "xla") gates the replicated variants' memory/FLOPs.
    attention_impl: str = "xla"
    # attention_impl runs the attentions whose queries and keys both number at least this many tokens;
    # shorter ones take the XLA path (MaxDiffusion's flash_min_seq_length: flash for the video
    # self-attention, dot-product for the text and audio attentions). 1: every attention.
    attention_impl_min_tokens: int = 1
    dtype: str = "float32"
    param_dtype: str = "float32"
    # Where the blocks' projections round their products to a 16-bit dtype (ltx2.layers.LINEAR_PARTIALS):
    # "float32" once, after the sum and the bias (diffusers' one rounding; a contraction sharded over
    # devices all-reduces float32 partial sums); "activation" by the dot, so sharded partial sums are
    # all-reduced in the activation dtype (half the bytes), the bias added after. No effect in float32.
    linear_partials: str = "float32"
    # How the split RoPE is written (ltx2.rope.ROPE_FORMS): "concat" as diffusers (slices, concatenate);
    # "fused" heads-major tables and one elementwise expression, the same arithmetic. Split RoPE only.
    rope_form: str = "concat"
    # The video stream's per-token work after the self-attention's core (its output projection, the
    # text cross-attention, a2v, the feed-forward) runs on this many strided token chunks: independent
    # chains, so one chunk's output-projection all-reduce can run under another chunk's matmuls
    # (ltx2.block.Block._per_chunk). v2a's keys/values take every token. 1: the whole stream at once.
    token_chunks: int = 1
    # The blocks as an interleaved pipeline over the "layers" rule's mesh axes (ltx2.pipeline_parallel):
    # stage s holds layers s, s + S, ... (stored stage-major), the batch rows split into S microbatches
    # that pass from stage to stage layer by layer. 1: every device runs every layer.
    pipeline_stages: int = 1
    # The dtype the attentions' Q/K RMSNorms return, so the queries and keys RoPE rotates and the
    # attention kernel (and a sequence-parallel key gather) takes: "activation" as diffusers (the
    # projection's dtype); "float32" as MaxDiffusion's LTX-2 (nnx.RMSNorm(dtype=float32) at b224fd25,
    # attention_ltx2.py: q and k stay float32 into the flash kernel, values in the activation dtype).
    # The attention's output is rounded to the activation dtype before the output projection.
    qk_dtype: str = "activation"

    def __post_init__(self) -> None:
        object.__setattr__(self, "vae_scale_factors", tuple(self.vae_scale_factors))
        sizes = [f.name for f in dataclasses.fields(self) if f.type == "int" and f.name != "causal_offset"]
        for name in sizes:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise _fail(name, value, "must be a positive integer")
        if len(self.vae_scale_factors) != 3 or any(not isinstance(s, int) or s <= 0 for s in self.vae_scale_factors):
            raise _fail("vae_scale_factors", self.vae_scale_factors, "must be 3 positive integers (t, h, w)")
        for name in ("norm_eps", "rope_theta"):
            if not getattr(self, name) > 0:
                raise _fail(name, getattr(self, name), "must be positive")
        if self.causal_offset < 0:
            raise _fail("causal_offset", self.causal_offset, "must be >= 0")
        self._check_choices()
        self._check_dims()

    def _check_choices(self) -> None:
        for name, allowed in (
            ("rope_type", ROPE_TYPES),
            ("attention_impl", ATTENTION_IMPLS),
            ("dtype", DTYPES),
            ("param_dtype", DTYPES),
            ("linear_partials", LINEAR_PARTIALS),
            ("rope_form", ROPE_FORMS),
            ("qk_dtype", QK_DTYPES),
        ):
            if getattr(self, name) not in allowed:
                raise _fail(name, getattr(self, name), f"must be one of {allowed}")
        if self.rope_form != "concat" and self.rope_type != "split":
            raise _fail("rope_form", self.rope_form, f"applies to rope_type 'split', not {self.rope_type!r}")
        try:
            get_strategy(self.sharding)
        except ValueError as e:
            raise _fail("sharding", self.sharding, str(e)) from None

    def _check_dims(self) -> None:
        if self.num_layers % self.pipeline_stages:
            raise _fail("pipeline_stages", self.pipeline_stages, f"must divide num_layers ({self.num_layers})")
        # Text K/V come out of the caption projection (inner width) and the prompt tables are inner wide.
        text_at_inner = self.use_prompt_embeddings or self.prompt_modulation
        for prefix, inner in (("", self.inner_dim), ("audio_", self.audio_inner_dim)):
            name = f"{prefix}cross_attention_dim"
            if text_at_inner and getattr(self, name) != inner:
                raise _fail(
                    name,
                    getattr(self, name),
                    f"must equal {prefix}num_attention_heads * {prefix}attention_head_dim = {inner}",
                )
        # audio_cross_attention_dim is also the a2v/v2a RoPE width, applied to audio-inner-wide q/k.
        if self.audio_cross_attention_dim != self.audio_inner_dim:
            raise _fail(
                "audio_cross_attention_dim",
                self.audio_cross_attention_dim,
                f"must equal audio inner dim {self.audio_inner_dim} (cross-modal RoPE width)",
            )
        for name in ("attention_head_dim", "audio_attention_head_dim"):
            if getattr(self, name) % 2:
                raise _fail(name, getattr(self, name), "must be even (RoPE rotates pairs)")
        if self.rope_type == "split" and self.audio_cross_attention_dim % (2 * self.num_attention_heads):
            raise _fail(
                "audio_cross_attention_dim",
                self.audio_cross_attention_dim,
                "split RoPE divides it among the video heads: must be a multiple of "
                f"2 * num_attention_heads = {2 * self.num_attention_heads}",
            )

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def inner_dim(self) -> int:
        """Video model width D = N * K."""
        return self.num_attention_heads * self.attention_head_dim

    @property
    def audio_inner_dim(self) -> int:
        """Audio model width Da = Na * Ka."""
        return self.audio_num_attention_heads * self.audio_attention_head_dim

    @property
    def head_dim(self) -> int:
        return self.attention_head_dim

    @property
    def audio_head_dim(self) -> int:
        return self.audio_attention_head_dim

    @property
    def prompt_modulation(self) -> bool:
        """LTX-2.3 text cross-attention modulation (prompt scale/shift tables in every block)."""
        return self.cross_attn_mod or self.audio_cross_attn_mod

    @property
    def video_mod_params(self) -> int:
        return 9 if self.cross_attn_mod else 6

    @property
    def audio_mod_params(self) -> int:
        return 9 if self.audio_cross_attn_mod else 6

    @property
    def cross_pos_embed_max_pos(self) -> int:
        return max(self.pos_embed_max_pos, self.audio_pos_embed_max_pos)

    # ---- presets ---------------------------------------------------------------------------
    @classmethod
    def tiny(cls, **overrides: Any) -> TransformerConfig:
        """The verified tiny LTX-2.0 config (109,264 params): tests, milliseconds per forward."""
        base = dict(
            in_channels=8,
            out_channels=8,
            num_attention_heads=2,
            attention_head_dim=16,
            cross_attention_dim=32,
            audio_in_channels=8,
            audio_out_channels=8,
            audio_num_attention_heads=2,
            audio_attention_head_dim=8,
            audio_cross_attention_dim=16,
            num_layers=2,
            caption_channels=24,
            rope_type="split",
            rope_double_precision=True,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def small(cls, **overrides: Any) -> TransformerConfig:
        """CPU benchmark size (1.3 M params): width 128 (4x32) video, 64 (4x16) audio, 2 layers."""
        base = dict(
            in_channels=128,
            out_channels=128,
            num_attention_heads=4,
            attention_head_dim=32,
            cross_attention_dim=128,
            audio_in_channels=128,
            audio_out_channels=128,
            audio_num_attention_heads=4,
            audio_attention_head_dim=16,
            audio_cross_attention_dim=64,
            num_layers=2,
            caption_channels=128,
            rope_type="split",
        )
        return cls(**{**base, **overrides})

    @classmethod
    def medium(cls, **overrides: Any) -> TransformerConfig:
        """CPU compute-bound benchmark size (71 M params): width 1024 (16x64) video, 512 (8x64) audio,
        2 layers. At the `small` workload (576 video tokens, CFG batch 2, 92 GFLOP per step) 93% of
        the FLOPs are projection/feed-forward GEMMs of at least 1152x1024x512, so the step's time
        measures kernel efficiency against the machine's matmul peak rather than per-op overhead."""
        wide = dict(
            num_attention_heads=16,
            attention_head_dim=64,
            cross_attention_dim=1024,
            audio_num_attention_heads=8,
            audio_attention_head_dim=64,
            audio_cross_attention_dim=512,
            caption_channels=1024,
        )
        return cls.small(**{**wide, **overrides})  # small's channels, layers and RoPE, 8x the width

    @classmethod
    def ltx2_19b(cls, **overrides: Any) -> TransformerConfig:
        """Released LTX-2.0 (18,876 M params): the diffusers defaults with split RoPE."""
        return cls(**{"rope_type": "split", **overrides})

    @classmethod
    def ltx2_3_22b(cls, **overrides: Any) -> TransformerConfig:
        """LTX-2.3 (18,989 M params): gated attention, cross-attention modulation, prompt AdaLN,
        perturbed (STG) self-attention, text projections moved into the connectors."""
        base = dict(
            rope_type="split",
            gated_attn=True,
            audio_gated_attn=True,
            cross_attn_mod=True,
            audio_cross_attn_mod=True,
            use_prompt_embeddings=False,
            perturbed_attn=True,
        )
        return cls(**{**base, **overrides})

    @classmethod
    def from_diffusers_config(cls, config: Mapping[str, Any], **overrides: Any) -> TransformerConfig:
        """From ``LTX2VideoTransformer3DModel.config``; unsupported keys or values raise ValueError."""
        fields = {f.name for f in dataclasses.fields(cls)} - set(KNOBS)
        kwargs: dict[str, Any] = {}
        for key, value in config.items():
            if key.startswith("_"):
                continue  # _class_name, _diffusers_version, _name_or_path ...
            if key in _FIXED_DIFFUSERS_FIELDS:
                if value != _FIXED_DIFFUSERS_FIELDS[key]:
                    raise ValueError(
                        f"diffusers config {key}={value!r} is not supported (only {_FIXED_DIFFUSERS_FIELDS[key]!r})"
                    )
            elif key in fields:
                kwargs[key] = value
            else:
                raise ValueError(f"diffusers config key {key!r} is not supported by TransformerConfig")
        for out, inp in (("out_channels", "in_channels"), ("audio_out_channels", "audio_in_channels")):
            if out in kwargs and kwargs[out] is None:  # diffusers: `out_channels or in_channels`
                kwargs[out] = kwargs.get(inp, getattr(cls, inp))
        return cls(**{**kwargs, **overrides})

    def replace(self, **changes: Any) -> TransformerConfig:
        return dataclasses.replace(self, **changes)

    # ---- cost model ------------------------------------------------------------------------
    def forward_flops(
        self, num_video_tokens: int, num_audio_tokens: int, num_text_tokens: int, batch_size: int = 1
    ) -> int:
        """Matmul FLOPs (2*m*n*k) of one forward: every projection, attention scores and values,
        feed-forward; per-sample timesteps. Elementwise ops (norms, RoPE, softmax) are not counted."""
        B, L, A, S = batch_size, num_video_tokens, num_audio_tokens, num_text_tokens
        D, Da, N, Na = self.inner_dim, self.audio_inner_dim, self.num_attention_heads, self.audio_num_attention_heads

        def mm(m: int, k: int, n: int) -> int:
            return 2 * B * m * k * n

        def attn(lq: int, lk: int, dq: int, dkv: int, inner: int, heads: int, gated: bool) -> int:
            proj = mm(lq, dq, inner) + 2 * mm(lk, dkv, inner) + mm(lq, inner, dq)
            return proj + 2 * mm(lq, lk, inner) + (mm(lq, dq, heads) if gated else 0)

        g, ga = self.gated_attn, self.audio_gated_attn
        block = (
            attn(L, L, D, D, D, N, g)
            + attn(A, A, Da, Da, Da, Na, ga)
            + attn(L, S, D, self.cross_attention_dim, D, N, g)
            + attn(A, S, Da, self.audio_cross_attention_dim, Da, Na, ga)
            + attn(L, A, D, Da, Da, Na, g)
            + attn(A, L, Da, D, Da, Na, ga)
            + 2 * mm(L, D, FF_MULT * D)
            + 2 * mm(A, Da, FF_MULT * Da)
        )
        io = mm(L, self.in_channels, D) + mm(A, self.audio_in_channels, Da)
        io += mm(L, D, self.out_channels) + mm(A, Da, self.audio_out_channels)
        if self.use_prompt_embeddings:
            io += mm(S, self.caption_channels, D) + mm(S, D, D)
            io += mm(S, self.caption_channels, Da) + mm(S, Da, Da)
        return self.num_layers * block + io + self._timestep_flops(B)

    def _timestep_flops(self, batch_size: int) -> int:
        D, Da, T = self.inner_dim, self.audio_inner_dim, TIMESTEP_EMBED_DIM
        mods = [(D, self.video_mod_params), (Da, self.audio_mod_params), (D, 4), (Da, 4), (D, 1), (Da, 1)]
        if self.prompt_modulation and self.use_prompt_adaln_single:
            mods += [(D, 2), (Da, 2)]
        return sum(2 * batch_size * (T * d + d * d + d * n * d) for d, n in mods)
