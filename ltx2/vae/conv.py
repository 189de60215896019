"""What the VAEs, the vocoder and the latent upsampler share: channels-last convolutions, the
non-trainable state a checkpoint carries (:class:`Buffer`), torch's group norm, and the checks and
diffusers-config reading their configs have in common.

Activations are ``[B, *spatial, C]`` (``NWC``, ``NHWC``, ``NDHWC``): the layout XLA prefers on
TPU and GPU. Kernels are ``[*kernel, C_in / groups, C_out]`` with logical names
``(None, ..., "conv_in", "conv_out")``; :func:`kernel_from_torch` converts PyTorch's
``[C_out, C_in / groups, *kernel]``. Padding is explicit (:func:`pad`) so every PyTorch padding
mode (zeros, reflect, replicate, circular) and the causal time padding of LTX-2 are exact.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from ltx2 import scopes
from ltx2.sharding import get_strategy, param

# torch ``padding_mode`` / ``F.pad(mode=...)`` names -> ``jnp.pad`` modes.
PADDING_MODES: dict[str, str] = {
    "zeros": "constant",
    "constant": "constant",
    "reflect": "reflect",
    "replicate": "edge",
    "circular": "wrap",
}


def _ntuple(value: int | Sequence[int], n: int, name: str) -> tuple[int, ...]:
    out = (value,) * n if isinstance(value, int) else tuple(value)
    if len(out) != n or any(v <= 0 for v in out):
        raise ValueError(f"{name} must be a positive int or {n} positive ints, got {value!r}")
    return out


def kernel_from_torch(w: np.ndarray) -> np.ndarray:
    """torch ``ConvNd.weight`` ``[C_out, C_in/g, *k]`` -> our kernel ``[*k, C_in/g, C_out]``."""
    return np.transpose(w, (*range(2, w.ndim), 1, 0))


def pad(x: jax.Array, pads: Sequence[tuple[int, int]], mode: str = "zeros") -> jax.Array:
    """Pad the spatial axes of a channels-last ``x`` (``pads`` has one pair per spatial axis)
    with a PyTorch padding mode; batch and channel axes are never padded."""
    if mode not in PADDING_MODES:
        raise ValueError(f"padding mode {mode!r} is not one of {sorted(PADDING_MODES)}")
    if len(pads) != x.ndim - 2:
        raise ValueError(f"{len(pads)} padding pairs for an input with {x.ndim - 2} spatial axes")
    if not any(lo or hi for lo, hi in pads):
        return x
    return jnp.pad(x, ((0, 0), *pads, (0, 0)), mode=PADDING_MODES[mode])


class Conv(nnx.Module):
    """N-d convolution on channels-last input with no implicit padding (torch ``ConvNd`` with
    ``padding=0``); ``ndim`` is ``len(kernel_size)``. ``x [B, *S, C_in] -> [B, *S', C_out]``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Sequence[int],
        *,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        use_bias: bool = True,
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        n = len(kernel_size)
        self.kernel_size = _ntuple(tuple(kernel_size), n, "kernel_size")
        self.stride = _ntuple(stride, n, "stride")
        self.dilation = _ntuple(dilation, n, "dilation")
        if in_channels <= 0 or out_channels <= 0 or groups <= 0:
            raise ValueError(f"Conv needs positive sizes, got in={in_channels}, out={out_channels}, groups={groups}")
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"groups={groups} must divide in={in_channels} and out={out_channels}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        shape = (*self.kernel_size, in_channels // groups, out_channels)
        init = nnx.initializers.lecun_normal()
        self.kernel = param(init(rngs.params(), shape, dtype), (*(None,) * n, "conv_in", "conv_out"))
        self.bias = param(jnp.zeros((out_channels,), dtype), ("conv_out",)) if use_bias else None

    def __call__(self, x: jax.Array) -> jax.Array:
        """Products accumulate (and the bias adds) in float32, rounded once to ``x``'s dtype, as
        torch's convolution rounds a bfloat16 output once; summing rounded time taps or adding the
        bias in bfloat16 left the tiny video VAE and upsampler 1.2-1.3x further from float32 than
        diffusers' bfloat16 (tests/ltx2/test_bf16_accuracy.py)."""
        n = len(self.kernel_size)
        if not 1 <= n <= 3:
            raise ValueError(f"Conv supports 1 to 3 spatial dims, got {n}")
        kernel = self.kernel[...].astype(x.dtype)
        conv = functools.partial(_conv, stride=self.stride, dilation=self.dilation, groups=self.groups)
        if n == 3 and self.kernel_size[0] > 1:
            # XLA:CPU's 3-D convolution is a slow generic loop; a sum of 2-D convolutions over the time
            # taps ran 2.7-3.4x faster on decoder shapes (e.g. 49 -> 18 ms at 5x34x34x64 -> 64, 2 cores).
            # Chosen by lowering platform, so TPU/GPU targets (also compiled from a CPU host) keep the 3-D op.
            taps = functools.partial(
                _conv3d_by_time_taps, stride=self.stride, dilation=self.dilation, groups=self.groups
            )
            y = jax.lax.platform_dependent(x, kernel, cpu=taps, default=conv)
        else:
            y = conv(x, kernel)
        if self.bias is not None:
            y = y + self.bias[...].astype(jnp.float32)
        return y.astype(x.dtype)


def _conv(x: jax.Array, kernel: jax.Array, *, stride: Sequence[int], dilation: Sequence[int], groups: int) -> jax.Array:
    """VALID N-d convolution, channels-last ``x [B, *S, C_in]``, kernel ``[*k, C_in/g, C_out]``."""
    spatial = "DHW"[-(x.ndim - 2) :]
    lhs = f"N{spatial}C"
    return jax.lax.conv_general_dilated(
        x,
        kernel,
        window_strides=stride,
        padding="VALID",
        rhs_dilation=dilation,
        dimension_numbers=(lhs, f"{spatial}IO", lhs),
        feature_group_count=groups,
        preferred_element_type=jnp.float32,
    )


def _conv3d_by_time_taps(
    x: jax.Array, kernel: jax.Array, *, stride: Sequence[int], dilation: Sequence[int], groups: int
) -> jax.Array:
    """The VALID 3-D convolution as ``sum_i conv2d(frames of tap i, kernel[i])``: each time tap's
    (strided, dilated) frames are folded into the batch of one 2-D convolution over (H, W)."""
    (st, *s_hw), (dt, *d_hw) = stride, dilation
    B, T = x.shape[:2]
    kt = kernel.shape[0]
    frames = (T - dt * (kt - 1) - 1) // st + 1
    y = None
    for i in range(kt):
        xi = jax.lax.slice_in_dim(x, i * dt, i * dt + (frames - 1) * st + 1, st, axis=1)
        yi = _conv(xi.reshape(B * frames, *x.shape[2:]), kernel[i], stride=s_hw, dilation=d_hw, groups=groups)
        y = yi if y is None else y + yi
    assert y is not None
    return y.reshape(B, frames, *y.shape[1:])


def causal_time_pads(kernel_t: int, causal: bool) -> tuple[int, int]:
    """Frames to replicate before/after the clip: all ``k-1`` in front when causal, else
    ``(k-1)//2`` on each side (diffusers ``LTX2VideoCausalConv3d``, which ignores dilation)."""
    total = kernel_t - 1
    return (total, 0) if causal else (total // 2, total // 2)


class CausalConv3d(nnx.Module):
    """diffusers ``LTX2VideoCausalConv3d``: time is padded by repeating the first frame
    (causal) or the first and last frames (non-causal), then H/W get ``k//2`` of
    ``spatial_padding_mode`` and a VALID 3-D convolution runs. ``x [B, F, H, W, C_in]``.

    The inner ``conv`` attribute mirrors the diffusers key ``<name>.conv.weight``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int] = 3,
        *,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        spatial_padding_mode: str = "zeros",
        dtype: jnp.dtype = jnp.float32,
        rngs: nnx.Rngs,
    ):
        if spatial_padding_mode not in PADDING_MODES:
            raise ValueError(f"spatial_padding_mode {spatial_padding_mode!r} is not one of {sorted(PADDING_MODES)}")
        kernel = _ntuple(kernel_size, 3, "kernel_size")
        # diffusers: an int dilation applies to time only.
        dil = (dilation, 1, 1) if isinstance(dilation, int) else _ntuple(dilation, 3, "dilation")
        self.spatial_padding_mode = spatial_padding_mode
        self.conv = Conv(
            in_channels,
            out_channels,
            kernel,
            stride=stride,
            dilation=dil,
            groups=groups,
            dtype=dtype,
            rngs=rngs,
        )

    @scopes.module_scope
    def __call__(self, x: jax.Array, *, causal: bool) -> jax.Array:
        kt, kh, kw = self.conv.kernel_size
        front, back = causal_time_pads(kt, causal)
        x = pad(x, ((front, back), (0, 0), (0, 0)), "replicate")
        x = pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)), self.spatial_padding_mode)
        return self.conv(x)


# ----------------------------------------------------------------------------- buffers, norms, configs


class Buffer(nnx.Variable):
    """Checkpointed non-trainable state (torch ``register_buffer``), apart from :class:`nnx.Param`."""


def buffer(value: jax.Array, names: tuple[str | None, ...]) -> Buffer:
    if len(names) != value.ndim:
        raise ValueError(f"logical names {names} do not match buffer shape {value.shape}")
    return Buffer(value, logical_axes=tuple(names))


class GroupNorm(nnx.Module):
    """torch ``nn.GroupNorm`` on channels-last ``[B, *S, C]`` (statistics in float32)."""

    def __init__(self, num_groups: int, num_channels: int, *, eps: float, dtype: jnp.dtype = jnp.float32):
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: {num_channels} channels do not split into {num_groups} groups")
        self.num_groups, self.eps = num_groups, eps
        self.scale = param(jnp.ones((num_channels,), dtype), ("norm",))
        self.bias = param(jnp.zeros((num_channels,), dtype), ("norm",))

    def __call__(self, x: jax.Array) -> jax.Array:
        b, c = x.shape[0], x.shape[-1]
        xg = x.astype(jnp.float32).reshape(b, -1, self.num_groups, c // self.num_groups)
        mean = jnp.mean(xg, axis=(1, 3), keepdims=True)
        var = jnp.mean(jnp.square(xg - mean), axis=(1, 3), keepdims=True)
        y = ((xg - mean) * jax.lax.rsqrt(var + self.eps)).reshape(x.shape)
        return (y * self.scale[...].astype(jnp.float32) + self.bias[...].astype(jnp.float32)).astype(x.dtype)


def config_fail(cfg: Any, field: str, why: str) -> None:
    raise ValueError(f"{type(cfg).__name__}.{field}={getattr(cfg, field)!r}: {why}")


def check_common(cfg: Any) -> None:
    """``sharding`` names a registered strategy and ``dtype`` a float dtype (our two fields)."""
    try:
        get_strategy(cfg.sharding)
    except ValueError as e:
        config_fail(cfg, "sharding", str(e))
    try:
        ok = jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating)
    except TypeError:
        ok = False
    if not ok:
        config_fail(cfg, "dtype", "must name a floating dtype such as 'float32' or 'bfloat16'")


def config_from_mapping(cls: Any, config: Mapping[str, Any], overrides: Mapping[str, Any]) -> Any:
    """A config dataclass from a diffusers ``module.config``: lists become tuples, ``_``-prefixed
    metadata keys are dropped, any other unknown key is an error naming it."""
    names = {f.name for f in dataclasses.fields(cls)}
    values = {k: v for k, v in {**dict(config), **overrides}.items() if not k.startswith("_")}
    unknown = sorted(set(values) - names)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown diffusers config keys {unknown}")

    def freeze(v: Any) -> Any:
        return tuple(freeze(x) for x in v) if isinstance(v, list | tuple) else v

    return cls(**{k: freeze(v) for k, v in values.items()})
