"""What the layout search needs to know of the model before compiling anything: every array it
lays out (logical names and shape), the workload's FLOPs and token counts.

Parameters come from an abstract build of the transformer (``nnx.eval_shape``: no memory, any
size), each distinct (names, shape) once with how many there are. Activations are the ones the
transformer constrains: ``(batch, length, embed)`` of both streams at block boundaries
(``ltx2.transformer.ACTIVATION``) and ``(batch, heads, length, head_dim)`` inside the splash kernel
(only there), and the denoising step's text input ``(batch, text_length, caption)``
(``ltx2.stages.denoise.TEXT``). Logical names none of these carry (``kv``: the text encoder's) do not
change the denoising step's program.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.plan.search_space import AxesOption
from ltx2 import LTX2Transformer, PipelineConfig, Plan, with_overrides
from ltx2 import Workload as ModelWorkload


@dataclass(frozen=True)
class ArraySig:
    """One array shape the model lays out: parameter or activation, its names, shape, bytes per item."""

    what: str  # "param" | "activation"
    names: tuple[str | None, ...]
    shape: tuple[int, ...]
    itemsize: int
    count: int = 1  # parameters with this signature
    kernel: str | None = None  # laid out only under this attention_impl (None: always)

    def laid_out(self, attention: str) -> bool:
        """Whether this array is laid out under ``attention``: always without a kernel, and under every
        impl of the kernel's family (``splash`` covers ``splash_ring``, ``splash_input``, ...)."""
        return self.kernel is None or attention == self.kernel or attention.startswith(f"{self.kernel}_")


@dataclass(frozen=True)
class ModelFacts:
    """The arrays, FLOPs and sizes of one model config and workload (full depth)."""

    base: str
    arrays: tuple[ArraySig, ...]
    forward_flops: float  # one transformer forward over the workload's batch
    num_layers: int
    video_tokens: int
    audio_tokens: int
    batch: int
    inner_dim: int
    audio_inner_dim: int
    act_itemsize: int
    text_tokens: int = 0
    heads: int = 1
    audio_heads: int = 1

    def strategy(self, rules: Sequence[tuple[str, AxesOption]]) -> Any:
        """The base strategy with ``rules`` in place (ValueError where the strategy rejects them)."""
        return _strategy(self.base, tuple(rules))

    @property
    def params(self) -> tuple[ArraySig, ...]:
        return tuple(a for a in self.arrays if a.what == "param")


@functools.cache
def _strategy(base: str, rules: tuple[tuple[str, AxesOption], ...]) -> Any:
    return with_overrides(base, dict(rules))


def _param_sigs(cfg: PipelineConfig) -> list[ArraySig]:
    from flax import nnx  # the abstract build; JAX loads only when a search runs

    module = nnx.eval_shape(lambda: LTX2Transformer(cfg.transformer, rngs=nnx.Rngs(0)))
    counts: dict[tuple[tuple[str | None, ...], tuple[int, ...], int], int] = {}
    for _, var in nnx.to_flat_state(nnx.state(module, nnx.Param)):
        names = var.get_metadata().get("logical_axes") or (None,) * len(var.shape)
        key = (tuple(names), tuple(var.shape), int(np.dtype(var.dtype).itemsize))
        counts[key] = counts.get(key, 0) + 1
    return [ArraySig("param", n, s, i, c) for (n, s, i), c in sorted(counts.items(), key=str)]


def model_facts(cfg: PipelineConfig, wl: ModelWorkload, base: str) -> ModelFacts:
    """The facts of ``cfg`` (full depth) running ``wl``; ``base`` is the strategy rules derive from."""
    t = cfg.transformer
    plan = Plan.build(
        cfg, batch=wl.batch, height=wl.height, width=wl.width, num_frames=wl.num_frames, frame_rate=wl.frame_rate
    )
    act = int(np.dtype(t.dtype).itemsize)
    B, L, A = wl.batch, plan.video_tokens, plan.audio_frames
    tokens = ("activation_batch", "activation_length", "activation_embed")  # a stream's tokens
    heads = ("activation_batch", "activation_heads", None, None)  # attention's per-head arrays
    text = ("activation_batch", "activation_text_length", None)
    acts = [
        ArraySig("activation", tokens, (B, L, t.inner_dim), act),
        ArraySig("activation", tokens, (B, A, t.audio_inner_dim), act),
        ArraySig("activation", heads, (B, t.num_attention_heads, L, t.head_dim), act, kernel="splash"),
        ArraySig("activation", heads, (B, t.audio_num_attention_heads, A, t.audio_head_dim), act, kernel="splash"),
        ArraySig("input", text, (B, wl.text_tokens, t.caption_channels), act),
    ]
    return ModelFacts(
        base=base,
        arrays=tuple(_param_sigs(cfg) + acts),
        forward_flops=float(t.forward_flops(L, A, wl.text_tokens, B)),
        num_layers=t.num_layers,
        video_tokens=L,
        audio_tokens=A,
        batch=B,
        inner_dim=t.inner_dim,
        audio_inner_dim=t.audio_inner_dim,
        act_itemsize=act,
        text_tokens=wl.text_tokens,
        heads=t.num_attention_heads,
        audio_heads=t.audio_num_attention_heads,
    )
