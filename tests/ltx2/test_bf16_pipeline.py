"""The guided pipeline end to end in bfloat16 (issue 45): text connectors, 2 guided steps with CFG +
STG + modality guidance, both decoders and the vocoder, at the tiny preset, ours against diffusers'
``LTX2Pipeline`` in bfloat16, both against diffusers in float32 (``tests/accuracy.py``: what "bf16"
means, the per-seed ratio and the sign test). Per seed: fresh weights (``diffusers_pipeline(cfg,
seed)``), prompts and initial latents. The guided step's knobs (``pipeline.guidance_batching``, the
STG fork, the text K/V cache) are measured the same way: each changes where the bfloat16 passes
round, none may leave ours further from float32 than diffusers' bfloat16 beyond chance.

``test_pipeline_stages_no_worse_than_diffusers_bf16`` runs each stage alone from diffusers' float32
intermediate (``tests/ltx2/bf16_stages.py``), to say which stage an end-to-end excess comes from.

The sign tests here are ``slow`` (12 seeds of three pipelines take ~3 CPU minutes on 2 cores). The
fast suite has one seed end to end (``test_pipeline_bf16_within_a_bound_of_diffusers_bf16``): not a
sign test but a bound on one seed's ratio, derived from the measured spread of that ratio over seeds,
which catches a gross regression only (ours over 2.2x as far as diffusers' bfloat16).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from tests.accuracy import ALPHA, Comparison, Deviation, check, compare, deviation
from tests.ltx2 import test_pipeline as tp

SEEDS = range(12)  # 4 comparisons at 1e-3: fails at 12 of 12 worse (P = 2.4e-4)
MODULES = ("transformer", "connectors", "vae", "audio_vae", "vocoder")
KNOBS = {  # name -> (guidance_batching, stg_fork, text_kv_cache)
    "default": ("batched", True, True),
    "no-fork": ("batched", False, True),
    "sequential": ("sequential", False, False),
}


def _inputs(cfg: Any, plan: Any, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(70_000 + seed)
    s, d = cfg.text_encoder.max_sequence_length, cfg.connectors.text_encoder_dim
    pos, neg = (rng.standard_normal((1, s, d)).astype(np.float32) for _ in range(2))
    pos_mask, neg_mask = np.ones((1, s), np.int64), np.ones((1, s), np.int64)
    pos_mask[0, :5], neg_mask[0, :9] = 0, 0
    video = rng.standard_normal((1, cfg.video_vae.latent_channels, plan.frames, plan.height, plan.width))
    audio = rng.standard_normal((1, cfg.audio_vae.latent_channels, plan.audio_frames, plan.latent_mel_bins))
    return dict(
        pos=pos,
        pos_mask=pos_mask,
        neg=neg,
        neg_mask=neg_mask,
        video=video.astype(np.float32),
        audio=audio.astype(np.float32),
    )


def _call(pipe: Any, cfg: Any, x: dict[str, np.ndarray], bf16: bool, output_type: str) -> Any:
    """diffusers' pipeline on ``x``; in bfloat16 the prompt embeddings go in as bfloat16 (the initial
    latents stay float32: the pipeline makes them so)."""
    import torch

    from ltx2.convert.pipeline import diffusers_call_kwargs

    def t(a: np.ndarray) -> Any:
        return torch.from_numpy(a).to(torch.bfloat16) if bf16 and a.dtype == np.float32 else torch.from_numpy(a)

    return pipe(
        prompt_embeds=t(x["pos"]),
        prompt_attention_mask=t(x["pos_mask"]),
        negative_prompt_embeds=t(x["neg"]),
        negative_prompt_attention_mask=t(x["neg_mask"]),
        **diffusers_call_kwargs(cfg),
        latents=torch.from_numpy(x["video"]),
        audio_latents=torch.from_numpy(x["audio"]),
        output_type=output_type,
        return_dict=False,
    )


def _theirs(pipe: Any, cfg: Any, x: dict[str, np.ndarray], bf16: bool) -> dict[str, np.ndarray]:
    """diffusers' outputs (video frames and waveform)."""
    video, audio = _call(pipe, cfg, x, bf16, "np")
    return {"video": np.asarray(video, np.float32), "audio": audio.float().numpy()}


@functools.cache
def _reference(seed: int) -> tuple[Any, dict, dict, dict]:
    """One seed's diffusers pipeline (weights rounded to bfloat16, float32 storage), its inputs and
    its float32 and bfloat16 outputs; cached: every knob reuses them."""
    import torch

    from ltx2.latents import Plan
    from ltx2.pipeline_config import PipelineConfig

    cfg = PipelineConfig.tiny()
    pipe = tp.diffusers_pipeline(cfg, seed)
    x = _inputs(cfg, Plan.build(cfg), seed)  # LTX2Pipeline.plan()'s, without converting the weights
    ref = _theirs(pipe, cfg, x, bf16=False)
    for name in MODULES:
        getattr(pipe, name).to(torch.bfloat16)
    theirs = _theirs(pipe, cfg, x, bf16=True)
    for name in MODULES:
        getattr(pipe, name).float()
    return pipe, x, ref, theirs


def _pipeline(pipe: Any, knobs: tuple[str, bool, bool]) -> Any:
    """Ours in bfloat16 (every component), converted from the rounded weights, with the step's knobs."""
    from ltx2.convert import from_diffusers
    from ltx2.pipeline import LTX2Pipeline
    from ltx2.pipeline_config import PipelineConfig

    cfg = PipelineConfig.tiny()
    bf16, both = {"dtype": "bfloat16"}, {"dtype": "bfloat16", "param_dtype": "bfloat16"}
    batching, fork, kv = knobs
    cfg = cfg.replace(
        transformer=dataclasses.replace(cfg.transformer, **both),
        connectors=dataclasses.replace(cfg.connectors, **both),
        video_vae=dataclasses.replace(cfg.video_vae, **bf16),
        audio_vae=dataclasses.replace(cfg.audio_vae, **bf16),
        pipeline=cfg.pipeline.replace(guidance_batching=batching, stg_fork=fork, text_kv_cache=kv),
    )
    return LTX2Pipeline(
        cfg,
        transformer=from_diffusers(pipe.transformer, **both),
        connectors=from_diffusers(pipe.connectors, **both),
        video_vae=from_diffusers(pipe.vae, **bf16),
        audio_vae=from_diffusers(pipe.audio_vae, **bf16),
        vocoder=from_diffusers(pipe.vocoder, **bf16),
    )


def _ours(pipe: Any, x: dict[str, np.ndarray], knobs: tuple[str, bool, bool]) -> dict[str, np.ndarray]:
    """Ours in bfloat16 end to end (:func:`_pipeline`)."""
    ours = _pipeline(pipe, knobs)
    plan = ours.plan()
    text = ours.embed_text(x["pos"], x["pos_mask"], x["neg"], x["neg_mask"])
    x0 = ours.prepare_latents(plan, video=x["video"], audio=x["audio"])
    out = ours.denoise(x0, text, ours.schedule(plan), ours.scales(), plan, loop="scan")
    video, audio = ours.decode_video(out.video, plan), ours.decode_audio(out.audio, plan)
    return {"video": np.asarray(video, np.float32), "audio": np.asarray(audio, np.float32)}


def measure_pipeline(knob: str, seeds: Sequence[int]) -> list[Comparison]:
    """Per output (video frames, waveform), ours and diffusers' bfloat16 deviations from float32."""
    ours: dict[str, list[Deviation]] = {"video": [], "audio": []}
    theirs: dict[str, list[Deviation]] = {"video": [], "audio": []}
    for seed in seeds:
        pipe, x, ref, their = _reference(seed)
        mine = _ours(pipe, x, KNOBS[knob])
        for key in ours:
            ours[key].append(deviation(mine[key], ref[key]))
            theirs[key].append(deviation(their[key], ref[key]))
    return [compare(f"pipeline {knob} {k}", ours[k], theirs[k]) for k in ours]


@pytest.mark.slow
@pytest.mark.parametrize("knob", list(KNOBS))
def test_pipeline_no_worse_than_diffusers_bf16(knob: str) -> None:
    check(measure_pipeline(knob, SEEDS))


STAGE_SEEDS = range(16)  # 12 comparisons at 1e-3: fails at 16 of 16 worse (P = 1.5e-5)


@pytest.mark.slow
def test_pipeline_stages_no_worse_than_diffusers_bf16() -> None:
    """Each stage alone in bfloat16 from diffusers' float32 intermediate (``tests/ltx2/bf16_stages.py``):
    the connectors, the guided loop, the video decode, the audio decode."""
    from tests.ltx2 import bf16_stages

    check(bf16_stages.measure_stages(STAGE_SEEDS))


# The fast check: one seed, ours' relative L2 from float32 at most E2E_BOUND x diffusers' bfloat16
# one, both measured in the same run. The per-seed log(ours / theirs) of the relative L2 over seeds
# 0-95 (benchmarks/results/bf16-e2e-stages-2026-11-29.md) has a standard deviation of 0.166 (video;
# Shapiro-Wilk p = 0.73: a normal model) and 0.0179 (audio; p < 0.001, ties at 1: Cantelli's
# distribution-free one-sided bound instead), each taken at its 99.9 % upper confidence limit.
FAST_SEED = 1000  # not one of the 96 seeds the spread was measured on
SPREAD_SEEDS = 96
E2E_LOG_SD = {"video": 0.166, "audio": 0.0179}
E2E_BOUND = {"video": 2.2, "audio": 3.0}


def fast_false_failure_rate() -> float:
    """P(the fast check fails) when ours' median ratio is 1 (log ratio centred on 0)."""
    from scipy import stats

    up = math.sqrt((SPREAD_SEEDS - 1) / stats.chi2.ppf(1e-3, SPREAD_SEEDS - 1))
    video = stats.norm.sf(math.log(E2E_BOUND["video"]) / (E2E_LOG_SD["video"] * up))
    var, t = (E2E_LOG_SD["audio"] * up) ** 2, math.log(E2E_BOUND["audio"])
    return float(video + var / (var + t * t))


def test_pipeline_bf16_within_a_bound_of_diffusers_bf16() -> None:
    """One seed end to end (default knobs): ours no further from float32 than E2E_BOUND x diffusers'
    bfloat16, a false-failure rate of :func:`fast_false_failure_rate` (5.4e-4)."""
    assert fast_false_failure_rate() < ALPHA
    pipe, x, ref, theirs = _reference(FAST_SEED)
    mine = _ours(pipe, x, KNOBS["default"])
    for key, bound in E2E_BOUND.items():
        ours, their = deviation(mine[key], ref[key]).rel_l2, deviation(theirs[key], ref[key]).rel_l2
        print(f"pipeline {key} rel_l2 ours {ours:.3e} theirs {their:.3e} ratio {ours / their:.3f} (bound {bound})")
        assert 0 < their and ours <= bound * their, f"{key}: ours {ours:.3e} > {bound} x diffusers' bf16 {their:.3e}"
