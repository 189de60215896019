"""Named scopes: the one table of names under which the model's ops appear in compiled programs.

Each name here becomes a ``jax.named_scope`` around part of the model, so every HLO instruction's
``metadata.op_name`` carries the path of scopes it was traced under, e.g.
``jit(step)/while/body/transformer/block/attn1/qkv/dot_general``. A profiler (or any reader of the
compiled program) attributes time, FLOPs, bytes and collectives to model parts by keeping the
path components that are names of this table (:func:`scope_path`); every other component is JAX's
own (``jit(...)``, ``while``, ``body``, primitive names).

Scopes are attached three ways, chosen so that model code changes by a decorator or one line:

* :func:`scoped` decorates a function (``@scoped(GUIDANCE)``);
* :func:`module_scope` decorates an NNX module's ``__call__``: it opens the scope named by the
  instance's ``scope`` attribute, if one was set;
* :func:`label` sets that attribute on a module's children from a table (attribute -> scope) kept
  here, e.g. ``Block``'s ``audio_to_video_attn`` is ``a2v``.

Scopes change metadata only, never the computation: ``tests/ltx2/test_scopes.py`` compiles the
same programs with scopes :func:`disabled` and checks the HLO is identical apart from metadata.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import jax
from flax import nnx

F = TypeVar("F", bound=Callable[..., Any])

# ---------------------------------------------------------------- the names, by model part

TRANSFORMER = "transformer"  # the DiT's forward; ops in no deeper scope are its glue (layer scan, casts)
EMBED = "embed"  # patchified latents and caption features -> model width (proj_in, caption projection)
TIMESTEP = "timestep"  # AdaLN-single timestep embeddings (global modulation, cross-attention gates)
ROPE = "rope"  # rotary tables (top level) and their application to q / k (inside an attention)
BLOCK = "block"  # one transformer layer; ops in no deeper scope are its residual adds
NORM_MOD = "norm_mod"  # RMS / layer norms, AdaLN scale-shift tables and modulation
ATTN1, AUDIO_ATTN1 = "attn1", "audio_attn1"  # self-attention, video / audio stream
ATTN2, AUDIO_ATTN2 = "attn2", "audio_attn2"  # text cross-attention
A2V, V2A = "a2v", "v2a"  # audio -> video (Q video, K/V audio) and video -> audio cross-attention
FF, AUDIO_FF = "ff", "audio_ff"  # feed-forward
QKV = "qkv"  # inside an attention: q/k/v projections and q/k RMS norms
CORE = "core"  # inside an attention: scores, softmax, weighted values (the kernel)
OUT = "out"  # inside an attention: output projection and per-head gates
PROJ_IN, PROJ_OUT = "proj_in", "proj_out"  # inside a feed-forward
OUTPUT = "output"  # final norm, modulation and output projection of the DiT
GUIDANCE = "guidance"  # combining the guidance passes' velocities (CFG, STG, modality isolation)
SCHEDULER = "scheduler"  # the Euler step of the sampler
TEXT_ENCODER = "text_encoder"  # Gemma-3 (through torchax)
CONNECTORS = "connectors"  # the text connectors (Gemma hidden states -> DiT text embeddings)
VIDEO_VAE = "video_vae"  # video VAE decoder
AUDIO_VAE = "audio_vae"  # audio VAE decoder
VOCODER = "vocoder"  # mel -> waveform
UPSAMPLER = "upsampler"  # latent upsampler
CONV_IN, MID, UP, CONV_OUT = "conv_in", "mid", "up", "conv_out"  # decoder stages (``up.<i>`` per level)
STAGE = "stage"  # a vocoder upsampling stage (``stage.<i>``: transposed conv + its resblocks)

SCOPES: Mapping[str, str] = {
    TRANSFORMER: "the DiT forward (ops outside its parts: layer scan, casts, RoPE broadcast)",
    EMBED: "input projections of latents and caption features",
    TIMESTEP: "AdaLN-single timestep embeddings",
    ROPE: "rotary position tables and their application",
    BLOCK: "one transformer layer (ops outside its parts: residual adds)",
    NORM_MOD: "norms and AdaLN modulation",
    ATTN1: "video self-attention",
    AUDIO_ATTN1: "audio self-attention",
    ATTN2: "video text cross-attention",
    AUDIO_ATTN2: "audio text cross-attention",
    A2V: "audio-to-video cross-attention",
    V2A: "video-to-audio cross-attention",
    FF: "video feed-forward",
    AUDIO_FF: "audio feed-forward",
    QKV: "q/k/v projections and q/k norms",
    CORE: "attention scores, softmax and values",
    OUT: "attention output",
    PROJ_IN: "feed-forward input projection",
    PROJ_OUT: "feed-forward output projection",
    OUTPUT: "final norm and output projection",
    GUIDANCE: "guidance combination",
    SCHEDULER: "sampler step",
    TEXT_ENCODER: "Gemma-3 text encoder",
    CONNECTORS: "text connectors",
    VIDEO_VAE: "video VAE decoder",
    AUDIO_VAE: "audio VAE decoder",
    VOCODER: "vocoder",
    UPSAMPLER: "latent upsampler",
    CONV_IN: "decoder input convolution",
    MID: "decoder mid block",
    UP: "decoder up level (up.<i>)",
    CONV_OUT: "decoder output convolution",
    STAGE: "vocoder upsampling stage (stage.<i>)",
}

# ---------------------------------------------------------------- children tables (attribute -> scope)

TRANSFORMER_CHILDREN: Mapping[str, str] = {
    "proj_in": EMBED,
    "audio_proj_in": EMBED,
    "caption_projection": EMBED,
    "audio_caption_projection": EMBED,
    "time_embed": TIMESTEP,
    "audio_time_embed": TIMESTEP,
    "av_cross_attn_video_scale_shift": TIMESTEP,
    "av_cross_attn_audio_scale_shift": TIMESTEP,
    "av_cross_attn_video_a2v_gate": TIMESTEP,
    "av_cross_attn_audio_v2a_gate": TIMESTEP,
    "prompt_adaln": TIMESTEP,
    "audio_prompt_adaln": TIMESTEP,
}
BLOCK_CHILDREN: Mapping[str, str] = {
    "attn1": ATTN1,
    "audio_attn1": AUDIO_ATTN1,
    "attn2": ATTN2,
    "audio_attn2": AUDIO_ATTN2,
    "audio_to_video_attn": A2V,
    "video_to_audio_attn": V2A,
    "ff": FF,
    "audio_ff": AUDIO_FF,
}
ATTENTION_CHILDREN: Mapping[str, str] = {
    "to_q": QKV,
    "to_k": QKV,
    "to_v": QKV,
    "norm_q": QKV,
    "norm_k": QKV,
    "to_out": OUT,
    "to_gate_logits": OUT,
}
FEED_FORWARD_CHILDREN: Mapping[str, str] = {"proj_in": PROJ_IN, "proj_out": PROJ_OUT}
DECODER_CHILDREN: Mapping[str, str] = {
    "conv_in": CONV_IN,
    "mid_block": MID,
    "mid": MID,
    "up_blocks": UP,
    "up": UP,
    "conv_out": CONV_OUT,
}
VOCODER_CHILDREN: Mapping[str, str] = {"conv_in": CONV_IN, "conv_out": CONV_OUT}

ATTRIBUTE = "scope"  # the instance attribute module_scope reads

_enabled = True


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Trace without named scopes (to check that scopes change nothing but metadata)."""
    global _enabled
    saved, _enabled = _enabled, False
    try:
        yield
    finally:
        _enabled = saved


def scope(name: str | None) -> contextlib.AbstractContextManager[Any]:
    """``jax.named_scope(name)``; nothing for ``None`` or while :func:`disabled`."""
    if name is None or not _enabled:
        return contextlib.nullcontext()
    return jax.named_scope(name)


def scoped(name: str) -> Callable[[F], F]:
    """Decorator: run the function inside :func:`scope` ``(name)``."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with scope(name):
                return fn(*args, **kwargs)

        return inner  # type: ignore[return-value]

    return wrap


def module_scope(call: F) -> F:
    """Decorator for a module's ``__call__``: inside the scope its :func:`label` gave it, if any."""

    @functools.wraps(call)
    def inner(self: Any, *args: Any, **kwargs: Any) -> Any:
        with scope(getattr(self, ATTRIBUTE, None)):
            return call(self, *args, **kwargs)

    return inner  # type: ignore[return-value]


def label(module: Any, children: Mapping[str, str], *, group: int = 1) -> None:
    """Name ``module``'s children after ``children`` (attribute -> scope). A child that is a list of
    modules names its items ``<scope>.<index // group>``; absent (None) children are skipped."""
    for attr, name in children.items():
        child = getattr(module, attr, None)
        if child is None:
            continue
        if isinstance(child, list | tuple | nnx.List):
            for i, item in enumerate(child):
                setattr(item, ATTRIBUTE, indexed(name, i // group))
        else:
            setattr(child, ATTRIBUTE, name)


def attributes() -> dict[str, tuple[str, ...]]:
    """Scope -> the module attributes its parameters live under (``a2v`` -> ``audio_to_video_attn``,
    ``block`` -> ``transformer_blocks``): how a parameter path maps onto scopes."""
    out: dict[str, set[str]] = {BLOCK: {"transformer_blocks"}}
    for table in (
        TRANSFORMER_CHILDREN,
        BLOCK_CHILDREN,
        ATTENTION_CHILDREN,
        FEED_FORWARD_CHILDREN,
        DECODER_CHILDREN,
        VOCODER_CHILDREN,
        {"upsamplers": STAGE, "resnets": STAGE},
    ):
        for attr, name in table.items():
            out.setdefault(name, set()).add(attr)
    return {name: tuple(sorted(attrs)) for name, attrs in out.items()}


def indexed(name: str, index: int) -> str:
    """``up.2``: one of several scopes of a kind (a decoder's levels, a vocoder's stages)."""
    return f"{name}.{index}"


def scope_path(op_name: str) -> tuple[str, ...]:
    """The scopes of this table in an HLO ``op_name`` (``jit(f)/while/body/block/ff/dot_general`` ->
    ``("block", "ff")``); an indexed name (``up.2``) counts as its kind. XLA writes an op combined
    from several (``block/(attn1/qkv/dot:a2v/qkv/dot)``) with its parts' names as alternatives:
    such an op has the scopes its parts share (``("block",)``)."""
    paths = [tuple(p for p in alt.split("/") if p.partition(".")[0] in SCOPES) for alt in _alternatives(op_name)]
    common = paths[0]
    for path in paths[1:]:
        n = next((i for i, (a, b) in enumerate(zip(common, path, strict=False)) if a != b), min(len(common), len(path)))
        common = common[:n]
    return common


def _alternatives(text: str, limit: int = 64) -> list[str]:
    """``a/(b:c)/d`` -> ``a/b/d``, ``a/c/d`` (nested groups too; a group opens after ``/`` or at the
    start, so ``jit(f)`` is a name, not a group)."""
    start = next((i for i, ch in enumerate(text) if ch == "(" and (i == 0 or text[i - 1] == "/")), None)
    if start is None:
        return [text]
    depth, parts, begin = 0, [], start + 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 1 and text[i] == ":":
            parts.append(text[begin:i])
            begin = i + 1
        elif depth == 0:
            parts.append(text[begin:i])
            rest = text[i + 1 :]
            return [x for part in parts for x in _alternatives(text[:start] + part + rest, limit)][:limit]
    return [text]  # unbalanced: read as one name
