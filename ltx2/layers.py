"""Building blocks shared by every LTX-2 component: dense layers, norms, layer stacking.

Weights follow Flax conventions (a Linear ``kernel`` is ``[in, out]``); ``ltx2.convert``
transposes PyTorch's ``[out, in]``. Every parameter is tagged with logical axis names.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from ltx2 import scopes
from ltx2.sharding import LogicalAxes, param

Initializer = Callable[..., jax.Array]
# Where a Linear's product is rounded to a 16-bit activation dtype (TransformerConfig.linear_partials):
# "float32": summed, biased, then rounded once (a contraction sharded across devices all-reduces its
# float32 partial sums); "activation": the dot returns the activation dtype, so sharded partial sums
# are rounded per shard and all-reduced in it (half the bytes), then the bias adds in float32.
LINEAR_PARTIALS = ("float32", "activation")


class Linear(nnx.Module):
    """``y = x @ kernel + bias`` with logical names ``(in_axis, out_axis)`` on the kernel."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        axes: tuple[str | None, str | None],
        use_bias: bool = True,
        dtype: jnp.dtype = jnp.float32,
        partials: str = "float32",
        rngs: nnx.Rngs,
    ):
        if in_features <= 0 or out_features <= 0:
            raise ValueError(f"Linear needs positive sizes, got in={in_features}, out={out_features}")
        if partials not in LINEAR_PARTIALS:
            raise ValueError(f"Linear partials must be one of {LINEAR_PARTIALS}, got {partials!r}")
        init = nnx.initializers.lecun_normal()
        self.kernel = param(init(rngs.params(), (in_features, out_features), dtype), axes)
        self.bias = param(jnp.zeros((out_features,), dtype), (axes[1],)) if use_bias else None
        self.in_features, self.out_features, self.partials = in_features, out_features, partials

    @scopes.module_scope
    def __call__(self, x: jax.Array) -> jax.Array:
        """``x [..., in]`` -> ``[..., out]`` in ``x``'s dtype; products accumulate (and the bias adds) in
        float32 before the one rounding to a 16-bit ``x`` dtype (weights are cast to ``x``'s dtype).
        With ``partials="activation"`` and a 16-bit ``x`` the product is rounded to ``x``'s dtype by
        the dot itself (where the contraction is sharded: per shard, before the all-reduce), and the
        bias adds in float32 after it: two roundings instead of one."""
        return linear(x, self.kernel[...], None if self.bias is None else self.bias[...], self.partials)


def linear(x: jax.Array, kernel: jax.Array, bias: jax.Array | None, partials: str = "float32") -> jax.Array:
    """:class:`Linear`'s arithmetic on explicit parameters (``kernel [in, out]``, ``bias [out]``), for
    code that holds a shard of them (inside ``shard_map``)."""
    rounded = partials == "activation" and x.dtype != jnp.float32
    y = jnp.matmul(x, kernel.astype(x.dtype), preferred_element_type=x.dtype if rounded else jnp.float32)
    if bias is not None:
        y = y.astype(jnp.float32) + bias.astype(jnp.float32)
    return y.astype(x.dtype)


@scopes.scoped(scopes.NORM_MOD)
def rms_norm(x: jax.Array, eps: float, scale: jax.Array | None = None, shard_axes: tuple[str, ...] = ()) -> jax.Array:
    """RMSNorm over the last axis, computed in float32 (torch.nn.RMSNorm / diffusers RMSNorm).
    ``shard_axes``: inside ``shard_map``, the mesh axes the last axis is split over (the mean of
    squares sums over them)."""
    xf = x.astype(jnp.float32)
    if shard_axes:
        total = x.shape[-1] * jax.lax.psum(1, shard_axes)
        mean = jax.lax.psum(jnp.sum(xf * xf, axis=-1, keepdims=True), shard_axes) / total
    else:
        mean = jnp.mean(xf * xf, axis=-1, keepdims=True)
    y = xf * jax.lax.rsqrt(mean + eps)
    if scale is not None:
        y = y * scale.astype(jnp.float32)
    return y.astype(x.dtype)


@scopes.scoped(scopes.NORM_MOD)
def layer_norm(x: jax.Array, eps: float) -> jax.Array:
    """LayerNorm without affine parameters over the last axis."""
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
    return ((xf - mean) * jax.lax.rsqrt(var + eps)).astype(x.dtype)


def token_chunks(t: jax.Array, n: int, tokens: int, axis: int = 1) -> list[jax.Array]:
    """``n`` strided chunks of an array along its token axis (chunk ``c``: tokens ``c, c + n, ...``),
    so each chunk keeps every sequence shard's share of the tokens; a size-1 token axis (one value for
    every token) is every chunk's."""
    if n == 1 or t.ndim <= axis or t.shape[axis] != tokens:
        return [t] * n
    view = t.reshape(*t.shape[:axis], tokens // n, n, *t.shape[axis + 1 :])
    return [jax.lax.index_in_dim(view, c, axis + 1, keepdims=False) for c in range(n)]


def join_chunks(parts: list[jax.Array]) -> jax.Array:
    """The inverse of :func:`token_chunks` (axis 1): the chunks' tokens interleaved back in order."""
    b, per = parts[0].shape[:2]
    return jnp.stack(parts, axis=2).reshape(b, per * len(parts), *parts[0].shape[2:])


class RMSNorm(nnx.Module):
    """RMSNorm with an optional learned scale (``weight`` in diffusers)."""

    def __init__(
        self, dim: int, *, eps: float, affine: bool = True, axis_name: str = "norm", out_float32: bool = False
    ):
        self.eps, self.out_float32 = eps, out_float32
        self.scale = param(jnp.ones((dim,), jnp.float32), (axis_name,)) if affine else None

    @scopes.module_scope
    def __call__(self, x: jax.Array) -> jax.Array:
        """``x`` normalised, in ``x``'s dtype (``out_float32``: in float32, the norm's own precision)."""
        scale = None if self.scale is None else self.scale[...]
        return rms_norm(x.astype(jnp.float32) if self.out_float32 else x, self.eps, scale)


def gelu_tanh(x: jax.Array) -> jax.Array:
    """GELU with the tanh approximation (torch ``approximate="tanh"``), computed in float32 and rounded
    once to ``x``'s dtype, as torch computes a bfloat16 activation (jax's formula in bfloat16 rounds
    each of its eight operations)."""
    return jax.nn.gelu(x.astype(jnp.float32), approximate=True).astype(x.dtype)


def silu(x: jax.Array) -> jax.Array:
    """``x * sigmoid(x)`` computed in float32 and rounded once to ``x``'s dtype (torch's bfloat16
    SiLU); in bfloat16 the sigmoid and the product round separately."""
    return jax.nn.silu(x.astype(jnp.float32)).astype(x.dtype)


def stack_layers(make: Callable[[nnx.Rngs], nnx.Module], num_layers: int, rngs: nnx.Rngs) -> nnx.Module:
    """Build ``num_layers`` copies of a module with their parameters stacked on a leading
    ``"layers"`` axis (one graph, ``[L, ...]`` arrays): the layout ``lax.scan`` consumes and
    that the Python-loop path slices, so parameter names never depend on the path taken."""
    if num_layers <= 0:
        raise ValueError(f"num_layers must be positive, got {num_layers}")

    @nnx.split_rngs(splits=num_layers)
    @nnx.vmap(in_axes=(0,), out_axes=0)
    def build(r: nnx.Rngs) -> nnx.Module:
        return make(r)

    stacked = build(rngs)
    for _, var in nnx.iter_graph(stacked):
        if isinstance(var, nnx.Variable):
            names: LogicalAxes = var.get_metadata().get("logical_axes") or (None,) * (var.ndim - 1)
            var.set_metadata("logical_axes", ("layers", *names))
    return stacked


def layer_slice(stacked_state: nnx.State, index: int) -> nnx.State:
    """The state of layer ``index`` from a stacked state (used by the Python-loop path)."""
    return jax.tree.map(lambda a: a[index], stacked_state)
