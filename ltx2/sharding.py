"""Logical axis names and the tables that map them onto mesh axes.

Model code names logical axes only (``"embed"``, ``"heads"``, ``"activation_length"``...).
A *strategy* is one table ``logical name -> mesh axes``; this module owns every table.
Parameters carry their logical names as variable metadata (``logical_axes``); activations
are constrained with :func:`constrain` at block boundaries. With no mesh in context (plain
CPU runs, parity tests) every constraint is a no-op, so numerics never depend on layout.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

MeshAxes = tuple[str, ...]
LogicalAxes = tuple[str | None, ...]

# Every logical name the model uses. Overrides naming anything else are rejected.
PARAM_AXES: frozenset[str] = frozenset(
    {
        "layers",  # stacked transformer blocks (scan axis)
        "embed",  # model width D (video or audio stream)
        "mlp_in",  # contracted (input) dim D of the FFN input kernels (ff.proj_in); falls back to embed
        "qkv_in",  # contracted (input) dim of the Q/K/V projection kernels; falls back to embed
        "mlp_out",  # output dim D of the FFN output kernels (ff.proj_out); falls back to embed
        "attn_out",  # output dim D of the attention output kernels (to_out); falls back to embed
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
        "activation_residual_length",  # the residual stream's tokens around a block's sub-layers
        "activation_audio_length",  # the audio stream's tokens where a strategy names them apart (audio_names)
        "activation_text_length",  # text tokens S
        "activation_embed",
        "activation_heads",
        "activation_attention_heads",  # heads inside a fused attention kernel; falls back to heads
        "activation_mlp",
        "activation_frames",  # VAE latent / pixel frames
        "activation_channels",
    }
)
LOGICAL_AXES: frozenset[str] = PARAM_AXES | ACTIVATION_AXES

# Names that cut a finer piece out of another: a strategy that does not name one places it as
# its parent, so a table written before the name existed lays the model out as it did then.
# They let a rule target one kernel's model-width dim alone (the MaxDiffusion LTX-2 fixes: the FFN
# kernels, then the attention projections, no longer sharded on it over the sequence axis; their
# PR #385 unshards both the input kernels' contracted dim and the output kernels' output dim).
FALLBACK_AXES: Mapping[str, str] = {
    "mlp_in": "embed",
    "qkv_in": "embed",
    "mlp_out": "embed",
    "attn_out": "embed",
    # The heads inside a fused attention kernel's shard_map: by default where the Q/K/V projections
    # put them (their output dim, `heads`), so the kernel computes each head once (a layout that
    # splits `heads` but not `activation_heads` would otherwise run every head on every shard of
    # that axis). Over the sequence axes too, the kernel runs head-parallel (an all-to-all from
    # tokens to heads and back, as MaxDiffusion's LTX-2 flash attention with
    # activation_self_attn_heads -> [context, tensor]) instead of gathering K/V.
    "activation_attention_heads": "heads",
    # The tokens of the residual stream (the block's input, and each sub-layer's output added to it):
    # by default as every activation's. Over the axis the heads / mlp are on too (Megatron's sequence
    # parallelism), the output projections reduce-scatter instead of all-reducing, the norms and
    # modulations run on a shard of the tokens, and the next projections all-gather them.
    "activation_residual_length": "activation_length",
    # The audio stream's tokens (:func:`audio_names`): as the video's unless a strategy names them.
    "activation_audio_length": "activation_length",
}


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
        if self.rules.get("conv_in") and self.rules.get("activation_frames"):
            # XLA's SPMD partitioner (jax 0.10.2, CPU) returns wrong numbers for a convolution whose
            # spatial dim and kernel input-feature dim are both sharded, even over different axes.
            raise ValueError(
                f"strategy {self.name!r}: conv_in {tuple(self.rules['conv_in'])} and activation_frames "
                f"{tuple(self.rules['activation_frames'])} cannot both be sharded (XLA miscompiles such convolutions)"
            )

    def rule_name(self, logical: str) -> str:
        """The logical name whose rule places ``logical``: itself, or its parent (:data:`FALLBACK_AXES`)
        where this strategy has no rule of its own for it."""
        return FALLBACK_AXES[logical] if logical not in self.rules and logical in FALLBACK_AXES else logical

    def mesh_axes(self, logical: str | None) -> MeshAxes:
        """Mesh axes of one logical name: its rule, else its parent's (:data:`FALLBACK_AXES`), else ()."""
        return () if logical is None else tuple(self.rules.get(self.rule_name(logical), ()))

    def spec(
        self,
        names: Sequence[str | None],
        mesh_axis_names: Sequence[str] | None = None,
        *,
        shape: Sequence[int] | None = None,
        mesh_shape: Mapping[str, int] | None = None,
    ) -> P:
        """PartitionSpec for one array; mesh axes absent from the mesh are dropped, and a
        mesh axis is used at most once (first dimension wins), as PartitionSpec requires.

        With ``shape`` and ``mesh_shape`` (parameters), a dimension keeps only the longest
        prefix of its mesh axes whose sizes multiply to a divisor of it: odd-sized weights
        (a stereo output conv, a single KV head) stay whole instead of failing to place."""
        used: set[str] = set()
        out: list[str | tuple[str, ...] | None] = []
        for i, logical in enumerate(names):
            axes = tuple(
                a
                for a in self.mesh_axes(logical)
                if (mesh_axis_names is None or a in mesh_axis_names) and a not in used
            )
            if shape is not None and mesh_shape is not None:
                axes = _dividing_prefix(axes, shape[i], mesh_shape)
            used.update(axes)
            out.append(None if not axes else axes[0] if len(axes) == 1 else axes)
        return P(*out)


def _dividing_prefix(axes: MeshAxes, size: int, mesh_shape: Mapping[str, int]) -> MeshAxes:
    while axes and size % math.prod(mesh_shape[a] for a in axes):
        axes = axes[:-1]
    return axes


MESH_AXES: tuple[str, ...] = ("data", "fsdp", "context", "tensor")
"""The mesh axis vocabulary every strategy is written against (a mesh may use any subset)."""

_ACT_TOKENS = ("activation_length",)

REPLICATED = Strategy("replicated", {}, "everything replicated: the numerical reference")
NAIVE = Strategy(
    "naive",
    {
        # The layout before the known fixes: QKV / FFN input kernels sharded on their
        # contracted feature dim over the same axis the sequence is sharded on, so every
        # projection needs an all-gather of activations or weights.
        "embed": ("context", "fsdp"),
        "activation_length": ("context", "fsdp"),
        "activation_batch": ("data",),
    },
    "weights sharded on the contracted feature dim + sequence-sharded activations (pre-fix)",
)
CONTEXT = Strategy(
    "context",
    {
        # Sequence parallel: tokens stay sharded, weights are sharded only on output dims
        # (heads / mlp over tensor), so projections and the FFN need no sequence all-gather;
        # only attention gathers K/V.
        "activation_length": ("context", "fsdp"),
        "activation_batch": ("data",),
        "heads": ("tensor",),
        "kv": ("tensor",),
        "mlp": ("tensor",),
        "activation_heads": ("tensor",),
        "activation_mlp": ("tensor",),
    },
    "sequence-parallel activations, weights sharded on output dims only",
)
TRILLIUM = Strategy(
    "trillium",
    {
        # 2-D: heads/mlp over tensor, the model width over fsdp (FSDP-style weight gathers),
        # batch over data+fsdp. Tuned for TPU v6e (Trillium) 2-D tori.
        "heads": ("tensor",),
        "kv": ("tensor",),
        "mlp": ("tensor",),
        "embed": ("fsdp",),
        "modulation": ("tensor",),
        "activation_batch": ("data", "fsdp"),
        "activation_heads": ("tensor",),
        "activation_mlp": ("tensor",),
    },
    "2-D heads (tensor) + embed (fsdp) sharding, tuned for TPU v6e",
)
IRONWOOD = Strategy(
    "ironwood",
    {
        # 1-D heads: Megatron-style column/row parallel attention and FFN over one axis.
        "heads": ("tensor",),
        "kv": ("tensor",),
        "mlp": ("tensor",),
        "activation_batch": ("data",),
        "activation_heads": ("tensor",),
        "activation_mlp": ("tensor",),
    },
    "1-D heads sharding, tuned for TPU v7x (Ironwood)",
)

_REGISTRY: dict[str, Strategy] = {s.name: s for s in (REPLICATED, NAIVE, CONTEXT, TRILLIUM, IRONWOOD)}


def register(strategy: Strategy) -> Strategy:
    """Make ``strategy`` nameable by component configs; re-registering an equal table is a
    no-op, a different table under a taken name is an error naming it."""
    known = _REGISTRY.get(strategy.name)
    if known is not None and dict(known.rules) != dict(strategy.rules):
        raise ValueError(f"sharding strategy {strategy.name!r} is already registered with other rules")
    _REGISTRY.setdefault(strategy.name, strategy)
    return _REGISTRY[strategy.name]


def get_strategy(name: str) -> Strategy:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown sharding strategy {name!r}; known: {sorted(_REGISTRY)}") from None


def strategy_names() -> list[str]:
    """The named strategies, without those derived from them (``<base>+<change>``: VAE layouts,
    rule overrides), which are registered when derived, so the list would depend on what ran."""
    return sorted(n for n in _REGISTRY if "+" not in n)


def with_overrides(base: str | Strategy, overrides: Mapping[str, Sequence[str] | str | None]) -> Strategy:
    """A strategy with some rules replaced, e.g. from a manifest's ``sharding.rules.*`` overrides.

    Its name spells the overrides (:func:`overrides_name`); it is not registered (see
    :func:`register_overrides`). Unknown logical names or mesh axes are errors that name them."""
    strat = get_strategy(base) if isinstance(base, str) else base
    rules = dict(strat.rules)
    for logical, mesh_axes in normalize_overrides(overrides).items():
        rules[logical] = mesh_axes
    return Strategy(overrides_name(strat.name, overrides), rules, strat.description)


def normalize_overrides(overrides: Mapping[str, Sequence[str] | str | None]) -> dict[str, MeshAxes]:
    """``logical -> mesh axes`` with ``None`` / ``[]`` as ``()`` and a string as one axis, checked:
    unknown logical names, unknown mesh axes and repeated axes are errors that name them."""
    out: dict[str, MeshAxes] = {}
    for logical, axes in overrides.items():
        if logical not in LOGICAL_AXES:
            raise ValueError(f"override names unknown logical axis {logical!r}; known: {sorted(LOGICAL_AXES)}")
        if not (
            axes is None
            or isinstance(axes, str)
            or (isinstance(axes, Sequence) and all(isinstance(a, str) for a in axes))
        ):
            raise ValueError(f"override {logical!r}: expected a mesh axis name or a list of them, got {axes!r}")
        mesh_axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
        bad = [a for a in mesh_axes if a not in MESH_AXES]
        if bad:
            raise ValueError(f"override {logical!r} names unknown mesh axes {bad}; known: {list(MESH_AXES)}")
        if len(set(mesh_axes)) != len(mesh_axes):
            raise ValueError(f"override {logical!r} repeats a mesh axis: {list(mesh_axes)}")
        out[logical] = mesh_axes
    return out


def overrides_name(base: str, overrides: Mapping[str, Sequence[str] | str | None]) -> str:
    """``base`` with each overridden rule appended in sorted order: ``naive+mlp_in=-+qkv_in=-``
    (``-``: replicated), ``naive+mlp_in=fsdp``, ``context+embed=fsdp,context``. Equal overrides
    give equal names, whatever order they were written in."""
    rules = normalize_overrides(overrides)
    return base + "".join(f"+{k}={','.join(v) or '-'}" for k, v in sorted(rules.items()))


def register_overrides(base: str, overrides: Mapping[str, Sequence[str] | str | None]) -> Strategy:
    """:func:`with_overrides`, registered under its name so component configs can name it
    (deriving twice gives the same object; no overrides give ``base`` itself)."""
    if not overrides:
        return get_strategy(base)
    return register(with_overrides(base, overrides))


# Logical names of the convolutional components (video / audio VAE, vocoders, latent upsampler).
VAE_PARAM_AXES: tuple[str, ...] = ("conv_in", "conv_out", "norm", "table")
VAE_ACTIVATION_AXES: tuple[str, ...] = ("activation_batch", "activation_frames", "activation_channels")
VAE_COMPONENTS: tuple[str, ...] = ("video_vae", "audio_vae", "vocoder", "upsampler")


def vae_strategy(strategy: str | Strategy, replicate: bool) -> Strategy:
    """The layout of the VAEs, vocoders and latent upsampler under a model strategy: the
    pipeline's ``vae_replication`` decision, as a table derived from the model's one.

    ``replicate=True``: every VAE weight whole on every device (no weight traffic); the batch
    goes over the strategy's batch axes and latent / pixel frames over every other mesh axis,
    so all devices decode a slice of the video (causal temporal convs exchange frame halos).
    ``replicate=False``: the VAE is sharded like the transformer: conv output channels over the
    strategy's ``heads`` axes (model parallel, channel-sharded activations), conv input channels
    over its ``embed`` axes (FSDP-style gathers), batch over its batch axes, frames over its
    sequence axes unless conv input channels are sharded (XLA miscompiles convolutions sharded on
    both). Less memory per device, collectives on channels.

    Only the VAE names (:data:`VAE_PARAM_AXES`, :data:`VAE_ACTIVATION_AXES`) change. A strategy
    with no rules (``replicated``, the numerical reference) is returned as is. The result is
    registered as ``<name>+vae-replicated`` / ``<name>+vae-sharded`` so that component configs,
    which name their strategy, can use it (deriving twice gives the same object)."""
    base = get_strategy(strategy) if isinstance(strategy, str) else strategy
    if not base.rules:
        return base
    batch = base.mesh_axes("activation_batch")
    rules = {k: v for k, v in base.rules.items() if k not in (*VAE_PARAM_AXES, *VAE_ACTIVATION_AXES)}
    rules["activation_batch"] = batch
    if replicate:
        rules["activation_frames"] = tuple(a for a in MESH_AXES if a not in batch)
    else:
        channels = tuple(a for a in base.mesh_axes("heads") if a not in batch)
        rules["conv_out"] = rules["activation_channels"] = channels
        rules["conv_in"] = base.mesh_axes("embed")
        # Frames are sharded only when conv input channels are not (see Strategy.__post_init__).
        frames = () if rules["conv_in"] else base.mesh_axes("activation_length")
        rules["activation_frames"] = tuple(a for a in frames if a not in (*batch, *channels))
    kind = "replicated" if replicate else "sharded"
    return register(Strategy(f"{base.name}+vae-{kind}", rules, f"{base.description}; VAE {kind}"))


def component_strategies(strategy: str | Strategy, vae_replication: bool) -> dict[str, str]:
    """Strategy name per pipeline component: the model strategy for the transformer, the text
    connectors and the text encoder; :func:`vae_strategy` for :data:`VAE_COMPONENTS`. ``strategy``
    must be registered (its name is what component configs hold)."""
    base = get_strategy(strategy) if isinstance(strategy, str) else get_strategy(strategy.name)
    vae = vae_strategy(base, vae_replication).name
    return {
        "transformer": base.name,
        "connectors": base.name,
        "text_encoder": base.name,
        **{c: vae for c in VAE_COMPONENTS},
    }


def _context_mesh_axis_names() -> tuple[str, ...]:
    mesh = jax.sharding.get_abstract_mesh()
    return () if mesh.empty else tuple(mesh.axis_names)


def mesh_axes_in_context(strategy: str | Strategy, logical: str) -> MeshAxes:
    """The mesh axes ``strategy`` puts ``logical`` on that the context mesh has (none without one)."""
    mesh = jax.sharding.get_abstract_mesh()
    strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
    return () if mesh.empty else tuple(a for a in strat.mesh_axes(logical) if a in mesh.shape)


def shards(strategy: str | Strategy, logical: str) -> int:
    """How many ways the context mesh splits ``logical`` under ``strategy`` (1 without a mesh)."""
    mesh = jax.sharding.get_abstract_mesh()
    return math.prod(mesh.shape[a] for a in mesh_axes_in_context(strategy, logical))


def audio_names(names: LogicalAxes, strategy: str | Strategy) -> LogicalAxes:
    """``names`` of a stream activation as the audio stream's: its token name becomes
    ``activation_audio_length`` where the strategy has a rule for that name (the audio's tokens,
    126 for 121 frames, split fewer ways than the video's), else ``names`` unchanged."""
    strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
    if "activation_audio_length" not in strat.rules:
        return names
    tokens = ("activation_length", "activation_residual_length")
    return tuple("activation_audio_length" if n in tokens else n for n in names)


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


@dataclass(frozen=True)
class MeshSpec:
    """Named mesh axes and sizes, e.g. ``(("data", 1), ("context", -1))``; -1 = the rest."""

    axes: tuple[tuple[str, int], ...]

    @classmethod
    def from_mapping(cls, axes: Mapping[str, int]) -> MeshSpec:
        return cls(tuple((str(k), int(v)) for k, v in axes.items()))

    def resolve(self, num_devices: int) -> tuple[tuple[str, int], ...]:
        """Axis sizes with -1 filled in; raises ValueError saying why the mesh cannot be built."""
        names = [n for n, _ in self.axes]
        unknown = [n for n in names if n not in MESH_AXES]
        if unknown:
            raise ValueError(f"mesh: unknown axis names {unknown}; known: {list(MESH_AXES)}")
        if len(set(names)) != len(names):
            raise ValueError(f"mesh: repeated axis names in {names}")
        bad = [(n, s) for n, s in self.axes if s == 0 or s < -1]
        if bad:
            raise ValueError(f"mesh: axis sizes must be positive or -1, got {bad}")
        rest = [n for n, s in self.axes if s == -1]
        if len(rest) > 1:
            raise ValueError(f"mesh: only one axis may be -1, got {rest}")
        fixed = math.prod(s for _, s in self.axes if s != -1)
        if rest:
            if num_devices % fixed:
                raise ValueError(f"mesh: {num_devices} devices are not divisible by the fixed axes' product {fixed}")
            return tuple((n, num_devices // fixed if s == -1 else s) for n, s in self.axes)
        if fixed != num_devices:
            raise ValueError(
                f"mesh: axis sizes {dict(self.axes)} multiply to {fixed}, but {num_devices} devices are present"
            )
        return self.axes


def build_mesh(spec: MeshSpec | Mapping[str, int], devices: Sequence[Any] | None = None) -> Mesh:
    """A mesh with Auto axis types (jax 0.10's ``make_mesh`` defaults to Explicit axes, which
    ``with_sharding_constraint`` rejects)."""
    spec = spec if isinstance(spec, MeshSpec) else MeshSpec.from_mapping(spec)
    devs = list(jax.devices() if devices is None else devices)
    axes = spec.resolve(len(devs))
    shape = tuple(s for _, s in axes)
    names = tuple(n for n, _ in axes)
    device_array = mesh_utils.create_device_mesh(shape, devices=devs, allow_split_physical_axes=True)
    return Mesh(device_array, names, axis_types=(AxisType.Auto,) * len(names))


def param_shardings(module_or_state: Any, strategy: str | Strategy, mesh: Mesh) -> Any:
    """A tree of ``NamedSharding`` matching ``nnx.state(module)``, from each parameter's logical names."""
    strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
    state = module_or_state if isinstance(module_or_state, nnx.State) else nnx.state(module_or_state)

    def one(var: Any) -> Any:
        if not isinstance(var, nnx.Variable):
            return NamedSharding(mesh, P())
        spec = strat.spec(logical_axes(var), mesh.axis_names, shape=var.shape, mesh_shape=mesh.shape)
        return NamedSharding(mesh, spec)

    return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def shard_module(module: nnx.Module, strategy: str | Strategy, mesh: Mesh) -> nnx.Module:
    """Place a module's parameters on ``mesh`` according to ``strategy`` (in place)."""
    state = nnx.state(module)
    shardings = param_shardings(state, strategy, mesh)
    nnx.update(module, jax.device_put(state, shardings))
    return module


def input_sharding(
    names: LogicalAxes, strategy: str | Strategy, mesh: Mesh, shape: Sequence[int] | None = None
) -> NamedSharding:
    """Where an input with these logical names lives under ``strategy``; with ``shape``, dimensions
    keep only the mesh axes that divide them (as parameters do), so an input is always placeable."""
    strat = get_strategy(strategy) if isinstance(strategy, str) else strategy
    mesh_shape = None if shape is None else mesh.shape
    return NamedSharding(mesh, strat.spec(names, mesh.axis_names, shape=shape, mesh_shape=mesh_shape))


def place(host: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    """A host value laid out by ``sharding``, each process putting only the shards of its own devices.

    The same as ``jax.device_put(host, sharding)`` on one process; on a mesh spanning several
    processes (``jax.distributed``), every process holds the same host value and places its slices."""
    value = np.asarray(host)
    # dtype given: a process whose devices hold no shard of it still makes its (empty) part of the array
    return jax.make_array_from_callback(value.shape, sharding, lambda i: np.asarray(value[i]), dtype=value.dtype)
