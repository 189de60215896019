"""LTX-2 audio+video diffusion in JAX (Flax NNX).

The public API (``__all__``): the model and pipeline with their configs and presets, the
sharding vocabulary, the named scopes of :mod:`ltx2.scopes` (what a profile attributes time to),
and :mod:`ltx2.stages`, the pipeline's stages as compilable programs (what a profiling harness
measures). Everything else is internal to the package.
"""

from ltx2 import scopes, stages
from ltx2.components import abstract_state, random_state
from ltx2.config import KNOBS, TransformerConfig
from ltx2.latents import Plan
from ltx2.pipeline import LTX2Pipeline
from ltx2.pipeline_config import PRESETS, PipelineConfig
from ltx2.sharding import MESH_AXES, build_mesh, get_strategy, strategy_names, with_overrides
from ltx2.stages import STAGES, StageProgram, StageUnavailable, Workload, WorkloadError, build_stage, check_workload
from ltx2.transformer import LTX2Transformer

__all__ = [
    "KNOBS",
    "MESH_AXES",
    "PRESETS",
    "STAGES",
    "LTX2Pipeline",
    "LTX2Transformer",
    "PipelineConfig",
    "Plan",
    "StageProgram",
    "StageUnavailable",
    "TransformerConfig",
    "Workload",
    "WorkloadError",
    "abstract_state",
    "build_mesh",
    "build_stage",
    "check_workload",
    "get_strategy",
    "random_state",
    "scopes",
    "stages",
    "strategy_names",
    "with_overrides",
]
