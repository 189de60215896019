"""Logical axis names and the tables that map them onto mesh axes.

Model code names logical axes only (``"embed"``, ``"heads"``, ``"activation_length"``...).
A *strategy* is one table ``logical name -> mesh axes``; this module owns every table.
Parameters carry their logical names as variable metadata (``logical_axes``); activations
are constrained with :func:`constrain` at block boundaries. With no mesh in context (plain
CPU runs, parity tests) every constraint is a no-op, so numerics never depend on layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import jax
from flax import nnx
from jax.sharding import PartitionSpec as P

MeshAxes = tuple[str, ...]
LogicalAxes = tuple[str | None, ...]

# Every logical name the model uses. Overrides naming anything else are rejected.
PARAM_AXES: frozenset[str] = frozenset(
    {
        "layers",  # stacked transformer blocks (scan axis)
        "embed",  # model width D (video or audio stream)
        "heads",  # attention heads x head dim, fused (N*K)
        "kv",  # key/value projection output (N*K) of cross attention
        "mlp",  # feed-forward hidden width
        "modulation",  # AdaLN modulation params (n_mod * D)
        "table",  # rows of scale/shift tables
        "caption",  # text-encoder feature width
        "in_features",  # patchified latent channels
        "conv_in",  # convolution input channels
        "conv_out",  # convolution output channels
        "vocab",  # text-encoder vocabulary
        "norm",  # normalisation scales
    }
)
ACTIVATION_AXES: frozenset[str] = frozenset(
    {
        "activation_batch",
        "activation_length",  # video / audio tokens (L, A)
        "activation_text_length",  # text tokens S
        "activation_embed",
        "activation_heads",
        "activation_mlp",
        "activation_frames",  # VAE latent / pixel frames
        "activation_channels",
    }
)
LOGICAL_AXES: frozenset[str] = PARAM_AXES | ACTIVATION_AXES


@dataclass(frozen=True)
class Strategy:
    """A named table from logical axis names to mesh axes (unlisted names are replicated)."""

    name: str
    rules: Mapping[str, MeshAxes] = field(default_factory=dict)
    description: str = ""

    def __post_init__(self) -> None:
        unknown = sorted(set(self.rules) - LOGICAL_AXES)
        if unknown:
            raise ValueError(f"strategy {self.name!r}: unknown logical axis names {unknown}")

    def mesh_axes(self, logical: str | None) -> MeshAxes:
        return () if logical is None else tuple(self.rules.get(logical, ()))

    def spec(self, names: Sequence[str | None], mesh_axis_names: Sequence[str] | None = None) -> P:
        """PartitionSpec for one array; mesh axes absent from the mesh are dropped, and a
        mesh axis is used at most once (first dimension wins), as PartitionSpec requires."""
        used: set[str] = set()
        out: list[str | tuple[str, ...] | None] = []
        for logical in names:
            axes = tuple(
                a
                for a in self.mesh_axes(logical)
                if (mesh_axis_names is None or a in mesh_axis_names) and a not in used
            )
            used.update(axes)
            out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
        return P(*out)


REPLICATED = Strategy("replicated", {}, "everything replicated: the numerical reference")

_REGISTRY: dict[str, Strategy] = {REPLICATED.name: REPLICATED}


def register(strategy: Strategy) -> Strategy:
    _REGISTRY[strategy.name] = strategy
    return strategy


def get_strategy(name: str) -> Strategy:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown sharding strategy {name!r}; known: {sorted(_REGISTRY)}") from None


def strategy_names() -> list[str]:
    return sorted(_REGISTRY)


def _context_mesh_axis_names() -> tuple[str, ...]:
    mesh = jax.sharding.get_abstract_mesh()
    return () if mesh.empty else tuple(mesh.axis_names)


def constrain(x: jax.Array, names: LogicalAxes, strategy: str | Strategy) -> jax.Array:
    """Constrain an activation to the strategy's layout under the context mesh (no-op without one)."""
    axis_names = _context_mesh_axis_names()
    if not axis_names:
        return x
    strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
    if len(names) != x.ndim:
        raise ValueError(f"logical names {names} do not match array rank {x.ndim}")
    return jax.lax.with_sharding_constraint(x, strat.spec(names, axis_names))


def logical_axes(var: nnx.Variable) -> LogicalAxes:
    """The logical names a parameter was created with (replicated if it has none)."""
    names = var.get_metadata().get("logical_axes")
    return tuple(names) if names is not None else (None,) * len(var.shape)


def param(value: jax.Array, names: LogicalAxes) -> nnx.Param:
    """A parameter tagged with one logical name per dimension."""
    if len(names) != value.ndim:
        raise ValueError(f"logical names {names} do not match parameter shape {value.shape}")
    return nnx.Param(value, logical_axes=tuple(names))
