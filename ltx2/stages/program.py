"""What a stage builder returns, what it is built for, and the pieces every builder shares.

A :class:`StageProgram` is one pipeline stage as a compilable program: the jitted function,
its abstract (sharded ``ShapeDtypeStruct``) arguments for ahead-of-time compilation, a way to
make concrete arguments on the devices, and the facts a measurement needs (analytic FLOPs,
how often one video calls it). A :class:`Workload` is the size of the generation, in the
units a manifest writes (pixels, frames, transformer rows).

Batch convention (every stage): ``Workload.batch`` counts transformer rows of the conditional +
unconditional pass, so with classifier-free guidance ``batch = 2`` is one video; without it,
``batch`` videos.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from ltx2.components import vae_configs
from ltx2.latents import Plan
from ltx2.pipeline_config import PipelineConfig
from ltx2.sharding import audio_names, get_strategy, input_sharding, place

# Stages whose inputs are sequence-sharded under the transformer's strategy: their sharded dims
# must divide their mesh axes. Decoders and the text encoder place inputs by shape (indivisible
# dims stay whole).
TRANSFORMER_STAGES = ("denoise_step", "guided_step", "denoise_loop")


class StageUnavailable(NotImplementedError):
    """A stage the model code cannot build for this config (the message says why)."""


class WorkloadError(ValueError):
    """A workload the transformer stages cannot run. ``fields`` names the :class:`Workload` fields at
    fault (so a caller can point at the setting that is wrong); ``sharded`` is True when they are
    at fault only together with the mesh and the strategy laying it out (a dim that does not divide)."""

    def __init__(self, message: str, fields: tuple[str, ...], sharded: bool = False):
        super().__init__(message)
        self.fields, self.sharded = fields, sharded


@dataclass(frozen=True)
class Workload:
    """One generation's size: ``height x width`` pixels, ``num_frames`` at ``frame_rate``,
    ``batch`` transformer rows, ``steps`` denoising steps, ``text_tokens`` S."""

    height: int
    width: int
    num_frames: int
    frame_rate: float
    batch: int
    steps: int
    text_tokens: int


@dataclass(frozen=True)
class StageProgram:
    """One stage, ready to compile (``fn.lower(*abstract_args)``) and to run (``run(*make_args(seed))``).

    ``fn`` is the XLA program a static analysis compiles. ``host_run``, when set, is what one call
    of the stage does instead: host work around ``fn`` (a Python loop over it, a PyTorch text
    encoder before it). ``calls_per_video``: how often one video runs ``fn`` (the denoising steps
    for a one-step program). ``extra``: JSON-able facts for the record (token counts, videos...).
    ``strategy``: the sharding strategy its activations are laid out by (what a profiler reads a
    collective's rule from; the parameters carry their own logical axes)."""

    name: str
    fn: Callable[..., Any]
    abstract_args: tuple[Any, ...]
    make_args: Callable[[int], tuple[Any, ...]]
    analytic_flops: float | None = None
    calls_per_video: int = 1
    notes: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    host_run: Callable[..., Any] | None = None
    strategy: str = "replicated"

    def run(self, *args: Any) -> Any:
        """One call of the stage on concrete arguments (not blocked on)."""
        return (self.host_run or self.fn)(*args)


# --------------------------------------------------------------------------- config and plan


def workload_config(cfg: PipelineConfig, wl: Workload) -> PipelineConfig:
    """``cfg`` with the workload's size and steps as pipeline options, and the VAEs, vocoder and
    upsampler laid out by ``pipeline.vae_replication`` (:func:`ltx2.components.vae_configs`)."""
    opts = cfg.pipeline.replace(
        height=wl.height,
        width=wl.width,
        num_frames=wl.num_frames,
        frame_rate=float(wl.frame_rate),
        num_inference_steps=wl.steps,
    )
    return vae_configs(cfg.replace(pipeline=opts))


def workload_plan(cfg: PipelineConfig, wl: Workload, batch: int) -> Plan:
    """The :class:`~ltx2.latents.Plan` (latent grid, audio length, passes) of a workload."""
    return Plan.build(
        cfg, batch=batch, height=wl.height, width=wl.width, num_frames=wl.num_frames, frame_rate=wl.frame_rate
    )


@dataclass(frozen=True)
class Setup:
    """What the pipeline stages share: the resolved config, the plan of the videos, and the
    transformer rows per guided step (all guidance passes)."""

    cfg: PipelineConfig
    plan: Plan
    videos: int
    rows: int


def setup(cfg: PipelineConfig, wl: Workload) -> Setup:
    cfg = workload_config(cfg, wl)
    passes = cfg.guidance.passes()
    if passes.cfg and wl.batch % 2:
        raise ValueError(f"workload.batch={wl.batch} counts rows of the CFG pass (2 per video); it must be even")
    videos = wl.batch // 2 if passes.cfg else wl.batch
    rows = videos * (2 * passes.cfg + (not passes.cfg) + passes.stg + passes.modality)
    return Setup(cfg, workload_plan(cfg, wl, videos), videos, rows)


def check_workload(cfg: PipelineConfig, wl: Workload, mesh_shape: Mapping[str, int], stages: Sequence[str]) -> None:
    """A workload the transformer stages can run: its video fits the latent grid exactly, and its
    sequence-sharded dims (batch, video / audio / text tokens) divide their mesh axes under the
    transformer's strategy. :class:`WorkloadError` names the dimension, the shard count and the axes,
    and carries the workload fields at fault."""
    if not set(stages) & set(TRANSFORMER_STAGES):
        return
    t = cfg.transformer
    st, sh, sw = t.vae_scale_factors
    off_grid = tuple(
        name
        for name, rest in (
            ("height", wl.height % (sh * t.patch_size)),
            ("width", wl.width % (sw * t.patch_size)),
            ("num_frames", (wl.num_frames - 1) % st),
        )
        if rest
    )
    if off_grid:
        raise WorkloadError(
            f"workload {wl.width}x{wl.height}x{wl.num_frames} does not fit the latent grid: width "
            f"and height must be multiples of {sw * t.patch_size}, frames of the form {st}k + 1",
            off_grid,
        )
    plan = workload_plan(cfg, wl, wl.batch)
    if plan.frames % t.patch_size_t:
        raise WorkloadError(
            f"{plan.frames} latent frames are not a multiple of patch_size_t={t.patch_size_t}", ("num_frames",)
        )
    strategy = get_strategy(t.sharding)
    dims = (
        ("batch", wl.batch, "activation_batch", ("batch",)),
        ("video tokens", plan.video_tokens, "activation_length", ("height", "width", "num_frames")),
        (
            "audio tokens",
            plan.audio_frames,
            audio_names(("activation_length",), strategy)[0],
            ("num_frames", "frame_rate"),
        ),
        ("text tokens", wl.text_tokens, "activation_text_length", ("text_tokens",)),
    )
    for what, size, logical, fields in dims:
        axes = [a for a in strategy.mesh_axes(logical) if mesh_shape.get(a, 1) > 1]
        shards = math.prod(mesh_shape[a] for a in axes)
        if size % shards:
            raise WorkloadError(
                f"{what} ({size}) do not divide into {shards} shards ({logical} over "
                f"{' x '.join(axes)} under strategy {strategy.name!r})",
                fields,
                sharded=True,
            )


def token_facts(plan: Plan, text_tokens: int) -> dict[str, int]:
    """The latent grid and token counts a transformer stage records (``extra["tokens"]``)."""
    return {
        "latent_frames": plan.frames,
        "latent_height": plan.height,
        "latent_width": plan.width,
        "video_tokens": plan.video_tokens,
        "audio_frames": plan.audio_frames,
        "audio_tokens": plan.audio_frames,
        "text_tokens": text_tokens,
    }


# --------------------------------------------------------------------------- arguments


def sds(shape: tuple[int, ...], dtype: Any, names: tuple[str | None, ...], strategy: str, mesh: Mesh) -> Any:
    """An abstract input placed by its logical axes (dims the mesh axes do not divide stay whole)."""
    return jax.ShapeDtypeStruct(shape, dtype, sharding=input_sharding(names, strategy, mesh, shape))


def concrete(abstract: Any, seed: int, fill: Callable[[Any, Any], Any] | None = None) -> Any:
    """Random (or ``fill``-ed) host arrays placed like the ``ShapeDtypeStruct`` tree ``abstract``."""
    rng = np.random.default_rng(seed)

    def leaf(a: Any) -> Any:
        host = fill(a, rng) if fill is not None else rng.standard_normal(a.shape, np.float32).astype(a.dtype)
        return place(np.asarray(host, a.dtype), a.sharding)

    return jax.tree.map(leaf, abstract)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def replicated_like(tree: Any, mesh: Mesh) -> Any:
    """Abstract, replicated twins of concrete host values (schedules, guidance scales)."""
    rep = replicated(mesh)
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype, sharding=rep), tree)


def put(tree: Any, abstract: Any) -> Any:
    """Host values placed like their abstract twins."""
    return jax.tree.map(lambda x, a: place(x, a.sharding), tree, abstract)
