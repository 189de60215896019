"""The pipeline's stages as compilable programs: the surface a profiling harness measures.

One builder per stage, each ``(PipelineConfig, Workload, Mesh) -> StageProgram``: the jitted
function, its abstract sharded arguments (ahead-of-time compilation at any model size, nothing
allocated), ``make_args(seed)`` for concrete random inputs, analytic FLOPs, calls per video and
notes. Every component is laid out by its config's ``sharding`` strategy on ``mesh``. Built
from :class:`~ltx2.latents.Plan` and the functions of :mod:`ltx2.denoise` and
:mod:`ltx2.pipeline`: the stages compute what ``LTX2Pipeline`` computes.

    program = build_stage("denoise_step", PipelineConfig.small(), workload, mesh)
    compiled = program.fn.lower(*program.abstract_args).compile()
    program.run(*program.make_args(0))
"""

from __future__ import annotations

from collections.abc import Callable

from jax.sharding import Mesh

from ltx2.pipeline_config import PipelineConfig
from ltx2.stages.decode import audio_decode, upsample, video_decode
from ltx2.stages.denoise import denoise_loop, denoise_step, guided_step
from ltx2.stages.program import (
    TRANSFORMER_STAGES,
    StageProgram,
    StageUnavailable,
    Workload,
    WorkloadError,
    check_workload,
)
from ltx2.stages.text import text_encode

Builder = Callable[[PipelineConfig, Workload, Mesh], StageProgram]

BUILDERS: dict[str, Builder] = {
    "text_encode": text_encode,
    "denoise_step": denoise_step,
    "guided_step": guided_step,
    "denoise_loop": denoise_loop,
    "video_decode": video_decode,
    "audio_decode": audio_decode,
    "upsample": upsample,
}
STAGES: tuple[str, ...] = tuple(BUILDERS)


def build_stage(name: str, cfg: PipelineConfig, workload: Workload, mesh: Mesh) -> StageProgram:
    """The stage ``name`` of ``cfg`` for ``workload`` on ``mesh``; :class:`StageUnavailable` if the
    model cannot build it (the message says why)."""
    if name not in BUILDERS:
        raise StageUnavailable(f"no stage named {name!r} (known: {', '.join(STAGES)})")
    return BUILDERS[name](cfg, workload, mesh)


__all__ = [
    "BUILDERS",
    "STAGES",
    "TRANSFORMER_STAGES",
    "StageProgram",
    "StageUnavailable",
    "Workload",
    "WorkloadError",
    "audio_decode",
    "build_stage",
    "check_workload",
    "denoise_loop",
    "denoise_step",
    "guided_step",
    "text_encode",
    "upsample",
    "video_decode",
]
