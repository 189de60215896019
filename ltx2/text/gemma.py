"""Gemma-3 text encoder: token ids -> every hidden state, stacked ``[B, S, H, L+1]``.

The model itself stays the transformers ``Gemma3TextModel``; this module decides where it runs:

* ``placement="torchax"``: inside JAX. ``torchax.extract_jax`` turns the module into a pure
  function of ``(weights, ids, mask)`` that we ``jax.jit`` (and that the pipeline can call
  inside its own compiled programs); the weights become a pytree of JAX arrays.
* ``placement="host"``: in PyTorch on the host, returning numpy.

Follows ``LTX2Pipeline._get_gemma_prompt_embeds`` (diffusers): left padding to
``max_sequence_length``, ``output_hidden_states=True``, ``torch.stack(hidden_states, -1)``
(embeddings first, the final-norm output last). Shapes: B batch, S tokens, H Gemma hidden
size, L Gemma layers. Positions that are padding hold implementation-defined values (the
torchax path uses eager attention, see :func:`_extract`); every consumer masks them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding

from ltx2 import scopes
from ltx2.sharding import LogicalAxes, constrain, get_strategy
from ltx2.text.torchax_compat import import_torchax

Placement = Literal["torchax", "host"]
Batching = Literal["joint", "separate"]
PLACEMENTS = ("torchax", "host")
BATCHINGS = ("joint", "separate")
Array = jax.Array | np.ndarray
HIDDEN_AXES: LogicalAxes = ("activation_batch", "activation_text_length", "activation_embed", None)

# Logical names of the Gemma-3 weights (torch layout: a Linear weight is [out, in]), by key suffix;
# the first match wins. Gemma has no biases; rotary tables and the embedding scale stay whole.
GEMMA_WEIGHT_AXES: tuple[tuple[str, LogicalAxes], ...] = (
    ("embed_tokens.weight", ("vocab", "embed")),
    ("self_attn.q_proj.weight", ("heads", "qkv_in")),
    ("self_attn.k_proj.weight", ("kv", "qkv_in")),
    ("self_attn.v_proj.weight", ("kv", "qkv_in")),
    ("self_attn.o_proj.weight", ("attn_out", "heads")),
    ("mlp.gate_proj.weight", ("mlp", "mlp_in")),
    ("mlp.up_proj.weight", ("mlp", "mlp_in")),
    ("mlp.down_proj.weight", ("mlp_out", "mlp")),
    ("norm.weight", ("norm",)),  # every RMSNorm: per layer, q/k norms, the final norm
    ("layernorm.weight", ("norm",)),
    ("embed_tokens.embed_scale", ()),
    ("inv_freq", (None,)),
)


@dataclass(frozen=True)
class TextEncoderConfig:
    """Where and how the Gemma-3 text encoder runs.

    ``batching``: ``joint`` encodes the negative and positive prompts in one pass of batch 2B
    (``[negative, positive]``, the pipeline's CFG order); ``separate`` runs two passes of batch B.
    Both give the same embeddings. ``tokenizer_dir``: a local tokenizer directory (optional;
    without one, callers pass token ids).
    """

    placement: Placement = "torchax"
    batching: Batching = "joint"
    max_sequence_length: int = 1024
    tokenizer_dir: str | None = None
    sharding: str = "replicated"

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"TextEncoderConfig.placement={self.placement!r}: must be one of {PLACEMENTS}")
        if self.batching not in BATCHINGS:
            raise ValueError(f"TextEncoderConfig.batching={self.batching!r}: must be one of {BATCHINGS}")
        if not isinstance(self.max_sequence_length, int) or self.max_sequence_length <= 0:
            raise ValueError(
                f"TextEncoderConfig.max_sequence_length={self.max_sequence_length!r}: must be a positive integer"
            )
        try:
            get_strategy(self.sharding)
        except ValueError as e:
            raise ValueError(f"TextEncoderConfig.sharding={self.sharding!r}: {e}") from None


def gemma_logical_axes(key: str, ndim: int) -> LogicalAxes:
    """Logical names of one torchax weight of the Gemma-3 text model (see ``GEMMA_WEIGHT_AXES``);
    a key no rule covers is an error naming it, so a new weight is never placed by accident."""
    for suffix, names in GEMMA_WEIGHT_AXES:
        if key.endswith(suffix):
            if len(names) != ndim:
                raise ValueError(f"Gemma weight {key!r}: rank {ndim} does not match logical names {names}")
            return names
    raise ValueError(f"Gemma weight {key!r} has no logical axis rule in GEMMA_WEIGHT_AXES")


def gemma_weight_shardings(weights: dict[str, jax.Array], strategy: str, mesh: Mesh) -> dict[str, NamedSharding]:
    """Where each torchax weight lives under ``strategy`` on ``mesh`` (dimensions the mesh axes
    do not divide stay whole, as for every parameter)."""
    strat = get_strategy(strategy)
    return {
        k: NamedSharding(
            mesh, strat.spec(gemma_logical_axes(k, w.ndim), mesh.axis_names, shape=w.shape, mesh_shape=mesh.shape)
        )
        for k, w in weights.items()
    }


def load_tokenizer(path: str) -> Any:
    """A transformers tokenizer from a local directory (never the hub), set to left padding
    with ``eos`` as the pad token if it has none (as the pipeline does)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as e:
        raise ValueError(f"no usable tokenizer in {path!r}: {e}") from e
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@contextlib.contextmanager
def _attention_implementation(config: Any, name: str) -> Iterator[None]:
    previous = config._attn_implementation
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous


def _stacked_hidden_states_module(language_model: Any, attn_implementation: str | None) -> Any:
    """A torch module ``(ids, mask) -> stack(hidden_states, -1)`` around the Gemma-3 text model."""
    import torch

    class StackedHiddenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.language_model = language_model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            config = self.language_model.config
            ctx = (
                _attention_implementation(config, attn_implementation)
                if attn_implementation
                else contextlib.nullcontext()
            )
            with ctx:
                out = self.language_model(
                    input_ids=ids, attention_mask=mask, output_hidden_states=True, use_cache=False
                )
            return torch.stack(out.hidden_states, dim=-1)

    return StackedHiddenStates().eval()


def _extract(language_model: Any, strategy: str) -> tuple[dict[str, jax.Array], Callable[..., jax.Array]]:
    """torchax: weights pytree and a pure ``apply(weights, ids, mask) -> [B, S, H, L+1]``, its
    output constrained to ``strategy``'s text layout under a context mesh (no-op without one).

    Attention runs in transformers' ``eager`` form while traced: its ``sdpa`` form becomes a JAX
    softmax over ``-inf`` for the fully masked rows of left padding, whose NaNs then reach valid
    tokens through ``probs @ V``. Valid tokens match the module's own attention either way.
    """
    torchax = import_torchax()
    wrapper = _stacked_hidden_states_module(language_model, "eager")
    weights, fn = torchax.extract_jax(wrapper)
    return weights, _apply(fn, strategy)


def _apply(fn: Callable[..., jax.Array], strategy: str) -> Callable[..., jax.Array]:
    """``apply(weights, ids, mask)`` of a torchax ``fn(weights, (ids, mask))``: scoped as the text
    encoder, its output constrained to ``strategy``'s text layout under a context mesh."""

    @scopes.scoped(scopes.TEXT_ENCODER)
    def apply(weights: dict[str, jax.Array], ids_bs: jax.Array, mask_bs: jax.Array) -> jax.Array:
        return constrain(fn(weights, (ids_bs, mask_bs)), HIDDEN_AXES, strategy)

    return apply


def abstract_gemma(text_config: Any, strategy: str) -> tuple[dict[str, jax.ShapeDtypeStruct], Callable[..., jax.Array]]:
    """The torchax ``(weights, apply)`` of :func:`_extract` for a Gemma-3 of ``text_config`` sizes,
    with no weight made: the module is built on torch's ``meta`` device, and ``weights`` holds each
    parameter's and buffer's shape and dtype. ``apply`` is the same traced function (what a
    compile-only analysis lowers); calling it needs real weights of those shapes."""
    import torch
    from transformers import Gemma3TextModel

    torchax = import_torchax()
    with torch.device("meta"):
        model = Gemma3TextModel(text_config).eval()
    module = torchax.interop.JittableModule(_stacked_hidden_states_module(model, "eager"))
    tensors = {**module.buffers, **module.params}
    dtype = torchax.ops.mappings.t2j_dtype
    weights = {k: jax.ShapeDtypeStruct(tuple(t.shape), dtype(t.dtype)) for k, t in tensors.items()}
    # torchax makes a PRNG key when its environment is first built: under a compile-only mesh of
    # devices this process cannot address, that key has to be made on a host CPU device.
    with jax.set_mesh(Mesh(jax.local_devices(backend="cpu")[:1], ("host",))):
        env = torchax.default_env()

    def fn(states: dict[str, jax.Array], args: tuple[jax.Array, jax.Array]) -> jax.Array:
        params = {k: states[k] for k in module.params}
        buffers = {k: states[k] for k in module.buffers}
        params, buffers, args = env.j2t_iso((params, buffers, args))
        with env:
            out = module.functional_call("forward", params, buffers, *args)
        return env.t2j_iso(out)

    return weights, _apply(fn, strategy)


def encode_pair_with(
    encode: Callable[[Any, Any], Any],
    batching: str,
    pos_ids: Any,
    pos_mask: Any,
    neg_ids: Any,
    neg_mask: Any,
    xp: Any = jnp,
) -> tuple[Any, Any]:
    """(positive, negative) ``encode(ids, mask)`` outputs: one pass of ``[negative; positive]``
    (``joint``) or two passes (``separate``). ``xp`` concatenates (``jnp`` when traced)."""
    if np.shape(pos_ids) != np.shape(neg_ids):
        raise ValueError(
            f"positive and negative ids must have the same shape for CFG, got "
            f"{np.shape(pos_ids)} and {np.shape(neg_ids)}"
        )
    if batching == "separate":
        return encode(pos_ids, pos_mask), encode(neg_ids, neg_mask)
    both = encode(xp.concatenate([neg_ids, pos_ids]), xp.concatenate([neg_mask, pos_mask]))
    batch = np.shape(pos_ids)[0]
    return both[batch:], both[:batch]


class GemmaTextEncoder:
    """Gemma-3 text model -> stacked hidden states ``[B, S, H, L+1]``, placed per ``cfg``."""

    def __init__(self, language_model: Any, cfg: TextEncoderConfig, *, tokenizer: Any = None):
        self.language_model = language_model.eval()
        self.cfg = cfg
        text_config = language_model.config
        self.hidden_size: int = text_config.hidden_size
        self.num_layers: int = text_config.num_hidden_layers
        if tokenizer is None and cfg.tokenizer_dir is not None:
            tokenizer = load_tokenizer(cfg.tokenizer_dir)
        self.tokenizer = tokenizer
        self.weights: dict[str, jax.Array] | None = None
        self.apply: Callable[..., jax.Array] | None = None
        if cfg.placement == "torchax":
            self.weights, self.apply = _extract(self.language_model, cfg.sharding)
            self._jitted = jax.jit(self.apply)
        else:
            self._host_module = _stacked_hidden_states_module(self.language_model, None)

    def shard(self, mesh: Mesh) -> GemmaTextEncoder:
        """Place the torchax weights on ``mesh`` by ``cfg.sharding`` (in place); run :meth:`encode`
        under ``jax.set_mesh(mesh)`` so the output is constrained too."""
        if self.weights is None:
            raise ValueError("placement='host' runs Gemma in PyTorch on the host: there are no JAX weights to shard")
        self.weights = jax.device_put(self.weights, gemma_weight_shardings(self.weights, self.cfg.sharding, mesh))
        return self

    @property
    def num_hidden_states(self) -> int:
        """L + 1: the embeddings and every layer's output."""
        return self.num_layers + 1

    def encode(self, ids_bs: Array, mask_bs: Array) -> Array:
        """Token ids and mask ``[B, S]`` (1 = token, left padding) -> ``[B, S, H, L+1]``:
        a ``jax.Array`` (torchax) or a numpy array (host; bfloat16 comes back as float32)."""
        if np.shape(ids_bs) != np.shape(mask_bs) or np.ndim(ids_bs) != 2:
            raise ValueError(f"ids and mask must both be [B, S], got {np.shape(ids_bs)} and {np.shape(mask_bs)}")
        if self.cfg.placement == "torchax":
            return self._jitted(self.weights, jnp.asarray(ids_bs, jnp.int32), jnp.asarray(mask_bs, jnp.int32))
        return self._encode_host(ids_bs, mask_bs)

    def _encode_host(self, ids_bs: Array, mask_bs: Array) -> np.ndarray:
        import torch

        ids = torch.from_numpy(np.asarray(ids_bs, np.int64))
        mask = torch.from_numpy(np.asarray(mask_bs, np.int64))
        with torch.no_grad():
            out = self._host_module(ids, mask)
        return (out.float() if out.dtype == torch.bfloat16 else out).numpy()

    def encode_pair(self, pos_ids: Array, pos_mask: Array, neg_ids: Array, neg_mask: Array) -> tuple[Array, Array]:
        """(positive, negative) hidden states, in one pass of ``[negative; positive]`` (joint)
        or two passes (separate), per ``cfg.batching``."""
        xp = jnp if self.cfg.placement == "torchax" else np
        return encode_pair_with(self.encode, self.cfg.batching, pos_ids, pos_mask, neg_ids, neg_mask, xp)

    def tokenize(self, prompts: str | Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Prompts -> (ids, mask) ``[B, max_sequence_length]`` int32, left padded, truncated."""
        if self.tokenizer is None:
            raise ValueError(
                "text prompts need a tokenizer, and none is loaded: set TextEncoderConfig.tokenizer_dir "
                "to a local tokenizer directory, pass tokenizer=..., or pass token ids to encode()"
            )
        prompts = [prompts] if isinstance(prompts, str) else list(prompts)
        self.tokenizer.padding_side = "left"
        tokens = self.tokenizer(
            [p.strip() for p in prompts],
            padding="max_length",
            max_length=self.cfg.max_sequence_length,
            truncation=True,
            add_special_tokens=True,
            return_tensors="np",
        )
        return tokens["input_ids"].astype(np.int32), tokens["attention_mask"].astype(np.int32)

    def encode_text(self, prompts: str | Sequence[str]) -> tuple[Array, np.ndarray]:
        """Prompts -> (hidden states ``[B, S, H, L+1]``, mask ``[B, S]``)."""
        ids, mask = self.tokenize(prompts)
        return self.encode(ids, mask), mask
