"""The text stage: Gemma-3 over the prompts, then the text connectors (``LTX2Pipeline.encode_prompt``)."""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from ltx2.components import abstract_state, random_gemma, random_state
from ltx2.denoise import TextEmbeddings
from ltx2.pipeline_config import PipelineConfig
from ltx2.stages.program import StageProgram, StageUnavailable, Workload, put, sds, setup
from ltx2.text.connectors import LTX2TextConnectors
from ltx2.text.gemma import abstract_gemma, encode_pair_with

# Gemma-3 runs through torchax, which materialises its PyTorch weights on the host: above this
# size (hidden x layers) a random encoder is not built (the medium preset's 1024 x 4 is 0.3 GB fp32;
# Gemma-3 12B's 3840 x 48 is 48 GB, more than a CPU host holds) and the stage is traced without weights.
MAX_HOST_GEMMA = 1024 * 16
IDS = ("activation_batch", None)


def text_encode(cfg: PipelineConfig, wl: Workload, mesh: Mesh) -> StageProgram:
    """Gemma-3 over the positive and negative prompts (``text_encoder.batching``), then the connectors.

    Random token ids ``[videos, S]``, left padded by a quarter as the tokenizer writes them; the
    random Gemma-3 weights (seed 0) are built with the program; a Gemma-3 too large to build on the
    host is traced without weights (compile-only). ``text_encoder.placement = "host"`` runs Gemma-3
    in PyTorch on the host: then only the connectors are an XLA program."""
    s = setup(cfg, wl)
    c = s.cfg
    too_big = c.gemma.hidden_size * c.gemma.num_hidden_layers > MAX_HOST_GEMMA
    if too_big and c.text_encoder.placement == "host":
        raise StageUnavailable(
            "text_encode at full size with text_encoder.placement = 'host': Gemma-3 would run in "
            "PyTorch with its weights materialised on the host (48 GB fp32 for 12B)"
        )
    videos, seq = s.videos, wl.text_tokens
    strategy = c.connectors.sharding
    cgraph, cstate = abstract_state(lambda: LTX2TextConnectors(c.connectors, rngs=nnx.Rngs(0)), strategy, mesh)
    encoder = None
    if not too_big:
        encoder = random_gemma(c.replace(text_encoder=dataclasses.replace(c.text_encoder, max_sequence_length=seq)), 0)
    cfg_on = s.plan.passes.cfg
    tokens = (videos, seq)

    def connect(state: Any, hidden: Any, mask: Any) -> Any:
        return TextEmbeddings(*nnx.merge(cgraph, state)(hidden, mask))

    def ids_and_masks(rng: Any) -> tuple[Any, ...]:
        out = []
        for _ in range(2 if cfg_on else 1):
            ids = rng.integers(1, c.gemma.vocab_size, tokens, dtype=np.int32)
            mask = np.ones(tokens, np.int32)
            mask[:, : seq // 4] = 0  # left padding, as the tokenizer writes it
            out += [ids, mask]
        return tuple(out)

    notes: tuple[str, ...] = (
        f"text_encode = Gemma-3 ({c.text_encoder.placement}, batching {c.text_encoder.batching}) "
        "+ text connectors; random token ids, left padded by a quarter",
    )
    if encoder is not None and c.text_encoder.placement == "host":
        abstract_in = (
            cstate,
            sds(
                (videos * (1 + cfg_on), seq, encoder.hidden_size, encoder.num_hidden_states),
                jnp.float32,
                ("activation_batch", None, None, None),
                strategy,
                mesh,
            ),
            sds((videos * (1 + cfg_on), seq), jnp.int32, IDS, strategy, mesh),
        )
        connect_jit = jax.jit(connect)

        def run_host(state: Any, *ids_masks: Any) -> Any:
            hidden: Any
            if cfg_on:
                pos, neg = encoder.encode_pair(*ids_masks)
                hidden, mask = np.concatenate([neg, pos]), np.concatenate([ids_masks[3], ids_masks[1]])
            else:
                hidden, mask = encoder.encode(*ids_masks), ids_masks[1]
            return connect_jit(
                state, jax.device_put(hidden, abstract_in[1].sharding), jax.device_put(mask, abstract_in[2].sharding)
            )

        def make_host(seed: int) -> tuple[Any, ...]:
            return (random_state(cstate, seed), *ids_and_masks(np.random.default_rng(seed + 1)))

        return StageProgram(
            "text_encode",
            connect_jit,
            abstract_in,
            make_host,
            host_run=run_host,
            strategy=strategy,
            notes=notes
            + (
                "static metrics cover the connectors only: Gemma-3 runs in PyTorch on "
                "the host (text_encoder.placement = 'host')",
            ),
        )

    weights: dict[str, Any] | None = None
    shapes: dict[str, Any]
    if encoder is None:  # compile-only: the torchax program of a Gemma-3 built on torch's meta device
        shapes, apply = abstract_gemma(c.gemma.to_transformers(), c.text_encoder.sharding)
        notes += ("Gemma-3 traced without weights (too large to make on the host): compile-only",)
    else:
        assert encoder.apply is not None and encoder.weights is not None
        apply, weights = encoder.apply, encoder.weights
        shapes = weights
    gemma_abstract = {k: sds(tuple(v.shape), v.dtype, (None,) * v.ndim, strategy, mesh) for k, v in shapes.items()}

    def encode(gemma: Any, state: Any, *ids_masks: Any) -> Any:
        if not cfg_on:
            return connect(state, apply(gemma, ids_masks[0], ids_masks[1]), ids_masks[1])
        _, pos_mask, _, neg_mask = ids_masks  # as GemmaTextEncoder.encode_pair, with the weights traced
        pos, neg = encode_pair_with(partial(apply, gemma), c.text_encoder.batching, *ids_masks)
        return connect(state, jnp.concatenate([neg, pos]), jnp.concatenate([neg_mask, pos_mask]))

    id_sds = sds(tokens, jnp.int32, IDS, strategy, mesh)
    abstract_args = (gemma_abstract, cstate, *([id_sds] * (4 if cfg_on else 2)))

    def make_args(seed: int) -> tuple[Any, ...]:
        if weights is None:
            raise StageUnavailable(
                "running text_encode at full size: the Gemma-3 encoder runs through torchax, which needs its "
                "PyTorch weights materialised on the host (48 GB fp32 for 12B); compile-only analysis lowers "
                "it without them"
            )
        ids = [jax.device_put(x, id_sds.sharding) for x in ids_and_masks(np.random.default_rng(seed + 1))]
        return (put(weights, gemma_abstract), random_state(cstate, seed), *ids)

    return StageProgram(
        "text_encode",
        jax.jit(encode),
        abstract_args,
        make_args,
        notes=notes,
        extra={"text_tokens": seq, "videos": videos},
        strategy=strategy,
    )
