"""Rotary position embeddings of LTX-2: patch coordinates, cos/sin tables, application.

Follows diffusers ``LTX2AudioVideoRotaryPosEmbed`` and ``apply_{interleaved,split}_rotary_emb``
(``diffusers/models/transformers/transformer_ltx2.py``). Positions are ``[start, end)`` bounds
per axis in pixel units (video: time in seconds, height, width) or seconds (audio); a token's
position is the midpoint, as a fraction of ``max_positions``. Frequencies depend only on
static sizes, so they are computed on the host with numpy, rounded as the reference's float64
or float32 program (``rope_double_precision``) but independent of the CPU's vector kernels (see
:func:`rope_frequencies`); everything downstream is float32, as in the reference.

Table layouts: ``interleaved`` cos/sin ``[B, T, dim]`` (pairs ``(x[2i], x[2i+1])``);
``split`` cos/sin ``[B, T, N, dim/(2N)]`` (each head rotates its first half against its second),
or ``[B, N, T, dim/(2N)]`` in the ``"fused"`` form (:data:`ROPE_FORMS`).
A table with B = 1 applies to every row of the batch (the transformer's grid coordinates).

Forms of the split rotation (``TransformerConfig.rope_form``), the same float32 arithmetic:

* ``"concat"``: diffusers' ``apply_split_rotary_emb`` as written -- slice each head into halves,
  rotate, concatenate.
* ``"fused"``: tables stored heads-major (``[B, N, T, R]``, the order the attention kernels read
  q and k in), and the rotation written as one elementwise expression over a ``[..., 2, R]`` view,
  ``x * cos + reverse_pairs(x) * (sign * sin)`` with sign ``(-1, +1)``: no slices or concatenate for
  the compiler to materialise. Each output is ``a*c + b*(-s)``, which IEEE arithmetic rounds as
  ``a*c - b*s`` (negation is exact), so both forms give the same numbers where the compiler
  contracts neither into a fused multiply-add.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ltx2 import scopes
from ltx2.config import ROPE_FORMS, ROPE_TYPES, TransformerConfig
from ltx2.layers import token_chunks


class RopeTables(NamedTuple):
    """cos and sin tables of one RoPE (layout set by the rope type, see module docstring)."""

    cos: jax.Array
    sin: jax.Array


class AVRope(NamedTuple):
    """The four RoPEs of one forward: self-attention per stream, and the time-only cross-modal
    pair for a2v/v2a attention (``cross_video`` on video tokens, ``cross_audio`` on audio)."""

    video: RopeTables
    audio: RopeTables
    cross_video: RopeTables
    cross_audio: RopeTables


def prepare_video_coords(
    batch_size: int,
    num_frames: int,
    height: int,
    width: int,
    *,
    patch_size: int = 1,
    patch_size_t: int = 1,
    scale_factors: Sequence[int] = (8, 32, 32),
    causal_offset: int = 1,
    fps: float = 24.0,
) -> np.ndarray:
    """Patch bounds ``coords_b3l2 [B, 3, L, 2]`` (float32) of a latent video grid (F, H, W),
    L = F*H*W (patch-strided), scaled to pixels by the VAE factors; time shifted for the causal
    first frame, clamped at 0 and divided by ``fps`` (diffusers ``prepare_video_coords``)."""
    f32 = np.float32
    axes = [
        np.arange(0, n, p, dtype=f32)
        for n, p in ((num_frames, patch_size_t), (height, patch_size), (width, patch_size))
    ]
    start_3fhw = np.stack(np.meshgrid(*axes, indexing="ij"))
    end_3fhw = start_3fhw + np.asarray([patch_size_t, patch_size, patch_size], f32)[:, None, None, None]
    pixel_3l2 = np.stack([start_3fhw, end_3fhw], axis=-1).reshape(3, -1, 2)
    pixel_3l2 = pixel_3l2 * np.asarray(scale_factors, f32)[:, None, None]
    time_l2 = np.maximum(pixel_3l2[0] + f32(causal_offset) - f32(scale_factors[0]), f32(0))
    pixel_3l2[0] = time_l2 / f32(fps)
    return np.broadcast_to(pixel_3l2[None], (batch_size, *pixel_3l2.shape))


def prepare_audio_coords(
    batch_size: int,
    num_frames: int,
    *,
    patch_size_t: int = 1,
    scale_factor: int = 4,
    causal_offset: int = 1,
    hop_length: int = 160,
    sampling_rate: int = 16000,
    shift: int = 0,
) -> np.ndarray:
    """Time bounds in seconds ``coords_b1a2 [B, 1, A, 2]`` (float32) of A latent audio frames: back
    to mel frames (x ``scale_factor``), causal shift, clamp at 0, x hop / sampling rate
    (diffusers ``prepare_audio_coords``)."""
    f32 = np.float32
    grid_a = np.arange(shift, num_frames + shift, patch_size_t, dtype=f32)

    def seconds(latent_a: np.ndarray) -> np.ndarray:
        mel_a = np.maximum(latent_a * f32(scale_factor) + f32(causal_offset) - f32(scale_factor), f32(0))
        return mel_a * f32(hop_length) / f32(sampling_rate)

    coords_a2 = np.stack([seconds(grid_a), seconds(grid_a + f32(patch_size_t))], axis=-1)
    return np.broadcast_to(coords_a2[None, None], (batch_size, 1, *coords_a2.shape))


def _linspace01(steps: int, dtype: type) -> np.ndarray:
    """``torch.linspace(0, 1, steps)``'s formula (halves counted from each end), so float32
    frequencies round like the reference's."""
    if steps == 1:
        return np.zeros(1, dtype)
    i = np.arange(steps)
    step = dtype(1.0) / dtype(steps - 1)
    head = i.astype(dtype) * step
    tail = dtype(1.0) - (steps - 1 - i).astype(dtype) * step
    return np.where(i < steps // 2, head, tail).astype(dtype)


def rope_frequencies(dim: int, num_axes: int, theta: float, double_precision: bool) -> np.ndarray:
    """``theta ** linspace(0, 1, dim // (2*num_axes)) * pi/2`` as float32 ``[dim // (2*num_axes)]``.

    ``double_precision``: the float64 formula rounded to float32 once, as diffusers. Otherwise
    diffusers' float32 program -- torch's float32 linspace formula for x, then
    ``fl(fl(theta ** x) * fl(pi)) / 2`` -- with every step correctly rounded, so the last bit does not
    follow the CPU: ``theta ** x`` is evaluated in float64 and rounded once. numpy's float32 power
    is not correctly rounded where it dispatches to its AVX-512 kernel (10000 ** 0.6 -> 251.18869,
    0.53 ulp off; libm, torch, and numpy with that dispatch disabled give 251.1887), which moved a
    dim-40 table by 2.8e-5 on an AMD EPYC with AVX-512.
    """
    steps = dim // (2 * num_axes)
    if double_precision:
        return (np.power(np.float64(theta), _linspace01(steps, np.float64)) * np.pi / 2.0).astype(np.float32)
    grid = _linspace01(steps, np.float32).astype(np.float64)
    powers = np.power(np.float64(theta), grid).astype(np.float32)
    return powers * np.float32(np.pi) / np.float32(2.0)


def rope_tables(
    coords: jax.Array | np.ndarray,
    *,
    dim: int,
    max_positions: Sequence[float],
    theta: float,
    double_precision: bool,
    rope_type: str,
    num_heads: int,
    heads_major: bool = False,
) -> RopeTables:
    """cos/sin for ``coords`` ``[B, n_axes, T, 2]`` bounds (or ``[B, n_axes, T]`` positions) over a
    ``dim``-wide feature vector; split tables are cut per head into ``num_heads`` slices, laid out
    ``[B, N, T, R]`` with ``heads_major`` (the ``"fused"`` form). Numpy coords (static shapes, the
    default) give positions computed exactly on the host."""
    if rope_type not in ROPE_TYPES:
        raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {rope_type!r}")
    # Host coordinates (numpy) stay on the host up to the grid: XLA:CPU float32 division is not
    # correctly rounded, and one ulp of position is ~1e-3 of angle at the highest frequencies.
    xp = np if isinstance(coords, np.ndarray) else jnp
    coords = coords.astype(np.float32)
    if coords.ndim == 4:
        coords = (coords[..., 0] + coords[..., 1]) / np.float32(2.0)
    batch, num_axes, tokens = coords.shape
    grid_btn = xp.stack([coords[:, i] / np.float32(max_positions[i]) for i in range(num_axes)], axis=-1)
    freqs_f = jnp.asarray(rope_frequencies(dim, num_axes, theta, double_precision))
    angles_btnf = jnp.asarray(grid_btn[..., None] * np.float32(2) - np.float32(1)) * freqs_f
    angles = jnp.swapaxes(angles_btnf, -1, -2).reshape(batch, tokens, -1)  # frequency-major, axis-minor
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    if rope_type == "interleaved":
        cos, sin = jnp.repeat(cos, 2, axis=-1), jnp.repeat(sin, 2, axis=-1)
        pad = dim - cos.shape[-1]
    else:
        pad = dim // 2 - cos.shape[-1]
    # Unused leading features get the identity rotation (cos 1, sin 0).
    cos = jnp.pad(cos, ((0, 0), (0, 0), (pad, 0)), constant_values=1.0)
    sin = jnp.pad(sin, ((0, 0), (0, 0), (pad, 0)), constant_values=0.0)
    if rope_type == "split":
        cos, sin = cos.reshape(batch, tokens, num_heads, -1), sin.reshape(batch, tokens, num_heads, -1)
        if heads_major:
            cos, sin = jnp.swapaxes(cos, 1, 2), jnp.swapaxes(sin, 1, 2)
    elif heads_major:
        raise ValueError("heads-major RoPE tables are split tables (rope_type 'split')")
    return RopeTables(cos, sin)


def apply_interleaved_rope(x_btd: jax.Array, rope: RopeTables) -> jax.Array:
    """Rotate pairs ``(x[2i], x[2i+1])`` of ``x_btd`` by cos/sin ``[B | 1, T, D]`` (computed in f32)."""
    x = x_btd.astype(jnp.float32)
    pairs = x.reshape(*x.shape[:-1], -1, 2)
    rotated = jnp.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
    return (x * rope.cos + rotated * rope.sin).astype(x_btd.dtype)


def apply_split_rope(x_btd: jax.Array, rope: RopeTables) -> jax.Array:
    """Rotate the first half of each head's features against the second half; cos/sin
    ``[B | 1, T, N, R]`` and ``D = N * 2R`` (N is the *table's* head count, as in diffusers)."""
    tokens, heads, half = rope.cos.shape[1:]
    x = x_btd.astype(jnp.float32).reshape(x_btd.shape[0], tokens, heads, 2 * half)
    first, second = x[..., :half], x[..., half:]
    out = jnp.concatenate([first * rope.cos - second * rope.sin, second * rope.cos + first * rope.sin], axis=-1)
    return out.reshape(x_btd.shape).astype(x_btd.dtype)


def apply_fused_split_rope(x_btd: jax.Array, rope: RopeTables) -> jax.Array:
    """:func:`apply_split_rope` with heads-major tables ``[B | 1, N, T, R]`` (the ``"fused"`` form):
    one elementwise expression over the ``[B, T, N, 2, R]`` view of ``x``, ``x1 c - x2 s`` and ``x2 c
    + x1 s`` joined on the pair axis. The halves are sliced from ``x`` in its own dtype and only then
    widened to float32: compiled for v7x (libtpu 0.0.42.1, the 19B loop), widening first made libtpu
    write each rotated tensor (the norm's output) to HBM as float32 before the rotation read it, 25
    MB per tensor and layer, whether the halves were swapped by a reverse (as this form did) or
    sliced; sliced after, the rotation reads the norm's bf16 output: 116.1 -> 93.6 GB per step."""
    cos, sin = jnp.swapaxes(rope.cos, 1, 2)[..., None, :], jnp.swapaxes(rope.sin, 1, 2)[..., None, :]
    tokens, heads, half = cos.shape[1], cos.shape[2], cos.shape[-1]
    x = x_btd.reshape(x_btd.shape[0], tokens, heads, 2, half)
    x1, x2 = x[..., :1, :].astype(jnp.float32), x[..., 1:, :].astype(jnp.float32)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-2)
    return out.reshape(x_btd.shape).astype(x_btd.dtype)


def rope_chunks(rope: RopeTables, n: int, tokens: int, heads_major: bool) -> list[RopeTables]:
    """:func:`~ltx2.layers.token_chunks` of RoPE tables (tokens on axis 1, or 2 for heads-major split tables)."""
    axis = 2 if heads_major else 1
    cos, sin = token_chunks(rope.cos, n, tokens, axis), token_chunks(rope.sin, n, tokens, axis)
    return [RopeTables(c, s) for c, s in zip(cos, sin, strict=True)]


@scopes.scoped(scopes.ROPE)
def apply_rope(x_btd: jax.Array, rope: RopeTables, rope_type: str, form: str = "concat") -> jax.Array:
    """Rotate ``x_btd [B, T, D]`` by ``rope`` (tables of ``rope_type``, laid out for ``form``)."""
    if form not in ROPE_FORMS:
        raise ValueError(f"rope form must be one of {ROPE_FORMS}, got {form!r}")
    if rope_type == "interleaved":
        if form != "concat":
            raise ValueError(f"the {form!r} RoPE form applies to split tables, not interleaved ones")
        return apply_interleaved_rope(x_btd, rope)
    if rope_type == "split":
        return apply_fused_split_rope(x_btd, rope) if form == "fused" else apply_split_rope(x_btd, rope)
    raise ValueError(f"rope_type must be one of {ROPE_TYPES}, got {rope_type!r}")


@scopes.scoped(scopes.ROPE)
def av_rope(
    cfg: TransformerConfig, video_coords: jax.Array | np.ndarray, audio_coords: jax.Array | np.ndarray
) -> AVRope:
    """The transformer's four RoPEs from ``video_coords [B, 3, L, 2]`` and ``audio_coords
    [B, 1, A, 2]`` (diffusers ``rope``, ``audio_rope``, ``cross_attn_rope``, ``cross_attn_audio_rope``).
    The cross pair uses the time axis only, ``audio_cross_attention_dim`` wide, split by the video
    and audio head counts respectively."""

    def table(coords: jax.Array | np.ndarray, dim: int, heads: int, max_positions: Sequence[float]) -> RopeTables:
        return rope_tables(
            coords,
            dim=dim,
            max_positions=max_positions,
            theta=cfg.rope_theta,
            double_precision=cfg.rope_double_precision,
            rope_type=cfg.rope_type,
            num_heads=heads,
            heads_major=cfg.rope_form == "fused",
        )

    cross_max, cross_dim = (cfg.cross_pos_embed_max_pos,), cfg.audio_cross_attention_dim
    video_max = (cfg.pos_embed_max_pos, cfg.base_height, cfg.base_width)
    return AVRope(
        video=table(video_coords, cfg.inner_dim, cfg.num_attention_heads, video_max),
        audio=table(audio_coords, cfg.audio_inner_dim, cfg.audio_num_attention_heads, (cfg.audio_pos_embed_max_pos,)),
        cross_video=table(video_coords[:, 0:1], cross_dim, cfg.num_attention_heads, cross_max),
        cross_audio=table(audio_coords[:, 0:1], cross_dim, cfg.audio_num_attention_heads, cross_max),
    )
