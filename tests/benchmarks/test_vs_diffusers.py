"""Our JAX modules against diffusers' PyTorch ones, same converted weights, same inputs, one run.

Cases (each at the ``tiny`` and ``small`` presets, float32 and bfloat16): one denoising step of
the transformer on a classifier-free-guidance batch (forward on [uncond, cond], guidance mix,
Euler update), the text connectors, the video VAE decode, the audio VAE decode + vocoder.
Compute-bound reference, float32: the step at the ``medium`` preset (92 GFLOP, same workload as
``small``) and a 2048x2048 matmul in both libraries, the machine's peak measured in the same run
(reports/bench.md gives each step's achieved GFLOP/s as a fraction of it).
Weights are random (speed does not depend on their values). Ours run as one jitted program with
``attention_impl="auto"``; diffusers runs eagerly under ``torch.inference_mode``.

The whole denoising loop (text connectors + every step with CFG, STG and modality guidance, scan
loop; diffusers ``LTX2Pipeline(output_type="latent")``) runs at float32 only: ``ltx2.pipeline``
jits its own stages, so its compile time is the first call's excess over the steady state.
One guided step (every guidance pass, guidance math and Euler step; diffusers: the pipeline's
three forwards) at ``small`` and ``medium``. The ``small`` loop and the ``medium`` guided step also
run with each of the guided step's knobs switched back (``+sequential``: one forward per pass,
``+no-fork``: STG rows from block 0, ``+no-text-kv``: text keys/values projected in every block,
``+old``: all three, the step as diffusers runs it), each paired with its own diffusers samples.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import pytest

from tests.benchmarks.cases import (
    DTYPES,
    KNOB_VARIANTS,
    MATMUL_N,
    PRESETS,
    Built,
    audio_case,
    connectors_case,
    guided_step_case,
    loop_case,
    matmul_case,
    step_case,
    video_vae_case,
)

# What torch raises for an op with no CPU kernel in bfloat16 (``"slow_conv3d_cpu" not implemented
# for 'BFloat16'``): the one error that skips a case; any other fails it.
MISSING_BFLOAT16_KERNEL = re.compile(r"not implemented for 'BFloat16'")


def missing_bfloat16_kernel(dtype: str, error: RuntimeError) -> bool:
    """Whether ``error`` says torch lacks a kernel for a bfloat16 case's op (and the case is bfloat16)."""
    return dtype == "bfloat16" and MISSING_BFLOAT16_KERNEL.search(str(error)) is not None


def test_only_a_missing_bfloat16_kernel_skips_a_case() -> None:
    missing = RuntimeError("\"slow_conv3d_cpu\" not implemented for 'BFloat16'")
    assert missing_bfloat16_kernel("bfloat16", missing)
    assert not missing_bfloat16_kernel("float32", missing)  # a float32 case has no such excuse
    assert not missing_bfloat16_kernel("bfloat16", RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


BUILDERS: dict[str, Callable[[str, str], Built]] = {
    "denoise_loop": loop_case,
    "transformer_step_cfg": step_case,
    "text_connectors": connectors_case,
    "video_vae_decode": video_vae_case,
    "audio_decode_vocoder": audio_case,
}


CASES = [(c, p, d) for c in BUILDERS for p in PRESETS for d in DTYPES]
CASES += [("transformer_step_cfg", "medium", "float32"), ("matmul", str(MATMUL_N), "float32")]
BUILDERS["matmul"] = matmul_case
# The guided step: the small guided loop and the medium guided step, defaults and each knob variant.
BUILDERS["guided_step"] = guided_step_case
CASES += [("guided_step", "small", "float32"), ("guided_step", "medium", "float32")]
for _name, _knobs in KNOB_VARIANTS.items():
    BUILDERS[f"denoise_loop+{_name}"] = partial(loop_case, knobs=_knobs)
    BUILDERS[f"guided_step+{_name}"] = partial(guided_step_case, knobs=_knobs)
    CASES += [(f"denoise_loop+{_name}", "small", "float32"), (f"guided_step+{_name}", "medium", "float32")]


@pytest.mark.parametrize(("component", "preset", "dtype"), CASES, ids=["-".join(c) for c in CASES])
def test_jax_vs_diffusers(
    compare: Callable[..., None], benchmark: Any, component: str, preset: str, dtype: str
) -> None:
    benchmark.group = f"{component}-{preset}-{dtype}"
    case = BUILDERS[component](preset, dtype)
    case.info.update(component=component, preset=preset, dtype=dtype)
    try:
        case.torch_fn()
    except RuntimeError as e:
        if not missing_bfloat16_kernel(dtype, e):
            raise
        pytest.skip(f"diffusers {component} does not run in {dtype} on {jax.default_backend()}: {e}")
    compare(case.jax_fn, case.jax_args, case.torch_fn, case.info, case.jit)
