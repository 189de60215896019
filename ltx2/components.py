"""Randomly initialised pipeline components for a :class:`~ltx2.pipeline_config.PipelineConfig`.

Random weights give true timings (speed does not depend on values) and let presets run
without a checkpoint; ``ltx2.convert.load_pretrained`` builds the same set from a diffusers
directory. With ``pipeline.vae_replication`` the VAEs and the vocoder are built replicated.

For programs compiled and run at any size (:mod:`ltx2.stages`): :func:`abstract_state` is a
module's state as sharded ``ShapeDtypeStruct``s (nothing allocated), :func:`random_state`
random arrays shaped and sharded like it, generated in place.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from ltx2.pipeline_config import PipelineConfig
from ltx2.sharding import Strategy, param_shardings, place, vae_strategy
from ltx2.text.connectors import LTX2TextConnectors
from ltx2.text.gemma import GemmaTextEncoder
from ltx2.transformer import LTX2Transformer
from ltx2.vae.audio import AutoencoderKLLTX2Audio
from ltx2.vae.upsampler import LTX2LatentUpsamplerModel
from ltx2.vae.video import VideoVAE
from ltx2.vae.vocoder import LTX2Vocoder, LTX2VocoderWithBWE, VocoderWithBWEConfig

VAE_FIELDS = ("video_vae", "audio_vae", "vocoder", "upsampler")


def vae_configs(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` with the VAEs, vocoder and upsampler laid out by ``pipeline.vae_replication`` under the
    transformer's strategy (:func:`ltx2.sharding.vae_strategy`: replicated weights with batch/frames
    split, or weights sharded like the model; ``replicated`` stays replicated)."""
    name = vae_strategy(cfg.transformer.sharding, cfg.pipeline.vae_replication).name
    names = [n for n in VAE_FIELDS if getattr(cfg, n) is not None]
    return cfg.replace(**{n: dataclasses.replace(getattr(cfg, n), sharding=name) for n in names})


def random_gemma(cfg: PipelineConfig, seed: int) -> GemmaTextEncoder:
    """A randomly initialised transformers ``Gemma3TextModel`` of ``cfg.gemma`` sizes, wrapped."""
    import torch
    from transformers import Gemma3TextModel

    torch.manual_seed(seed)
    return GemmaTextEncoder(Gemma3TextModel(cfg.gemma.to_transformers()).eval(), cfg.text_encoder)


@partial(jax.jit, static_argnums=(0, 1))
def _random_state(cls: type, cfg: Any, key: jax.Array) -> nnx.State:
    return nnx.state(cls(cfg, rngs=nnx.Rngs(key)))


def init_random(cls: type, cfg: Any, seed: int) -> Any:
    """``cls(cfg, rngs=...)`` initialised in one compiled program from an ``unsafe_rbg`` key.

    Eager init runs one small XLA program per parameter, and threefry makes the one-program
    init slow to compile: 143 s for the tiny video VAE on a busy 2-core machine, 12 s this way.
    Weight values only need to be random, not any particular stream."""
    key = jax.random.key(seed, impl="unsafe_rbg")
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: cls(cfg, rngs=nnx.Rngs(key))))
    return nnx.merge(graphdef, _random_state(cls, cfg, key))


def build_components(cfg: PipelineConfig, *, seed: int = 0, text_encoder: bool = True) -> dict[str, Any]:
    """Every component with random weights, as ``LTX2Pipeline`` keyword arguments."""
    cfg = vae_configs(cfg)
    vocoder_cls: Any = LTX2VocoderWithBWE if isinstance(cfg.vocoder, VocoderWithBWEConfig) else LTX2Vocoder
    up = cfg.upsampler
    return dict(  # each component its own seed offset, so they do not share random streams
        transformer=init_random(LTX2Transformer, cfg.transformer, seed),
        connectors=init_random(LTX2TextConnectors, cfg.connectors, seed + 1),
        video_vae=init_random(VideoVAE, cfg.video_vae, seed + 2),
        audio_vae=init_random(AutoencoderKLLTX2Audio, cfg.audio_vae, seed + 3),
        vocoder=init_random(vocoder_cls, cfg.vocoder, seed + 4),
        upsampler=init_random(LTX2LatentUpsamplerModel, up, seed + 5) if up is not None else None,
        text_encoder=random_gemma(cfg, seed) if text_encoder else None,
    )


# --------------------------------------------------------------------------- abstract and random states

HOST_INIT_BYTES = 64 * 2**20  # leaves up to this size are drawn on the host, larger ones on device
INIT_STD = 0.02


def abstract_state(make: Callable[[], Any], strategy: str | Strategy, mesh: Mesh) -> tuple[nnx.GraphDef, Any]:
    """(graphdef, state of sharded ``ShapeDtypeStruct``s) of the NNX module ``make()`` builds, laid out
    by ``strategy`` on ``mesh``: nothing is allocated, so any model size works."""
    graphdef, state = nnx.split(nnx.eval_shape(make))
    shardings = param_shardings(state, strategy, mesh)

    def sds(sharding: Any, var: Any) -> Any:  # the shardings tree is a prefix of the state tree
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), var)

    return graphdef, jax.tree.map(sds, shardings, state)


@functools.cache
def _device_normal(shape: tuple[int, ...], dtype: Any, sharding: Any) -> Callable[[Any, Any], Any]:
    def normal(seed: Any, index: Any) -> Any:
        key = jax.random.fold_in(jax.random.key(seed), index)
        return (jax.random.normal(key, shape) * INIT_STD).astype(dtype)

    return jax.jit(normal, out_shardings=sharding)


def random_state(abstract: Any, seed: int) -> Any:
    """Random N(0, 0.02) arrays shaped and sharded like a tree of ``ShapeDtypeStruct``s.

    Speed does not depend on weight values, so this stands in for the modules' own
    initialisers, which compile hundreds of tiny programs (tens of seconds on CPU). Small
    leaves come from NumPy on the host; large ones are generated in place, already sharded,
    so a full-size model never has to fit in one device or the host.
    """
    rng = np.random.default_rng(seed)
    indices = iter(range(len(jax.tree.leaves(abstract))))

    def leaf(a: Any) -> Any:
        # Keys derived inside the program, from host integers: no process reads a key array that
        # spans other processes' devices (multi-process meshes).
        index = np.uint32(next(indices))
        if a.size * a.dtype.itemsize <= HOST_INIT_BYTES:
            host = (rng.standard_normal(a.shape, dtype=np.float32) * INIT_STD).astype(a.dtype)
            return place(host, a.sharding)
        return _device_normal(tuple(a.shape), a.dtype, a.sharding)(np.uint32(seed), index)

    return jax.tree.map(leaf, abstract)
