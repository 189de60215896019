"""LTX2Pipeline end to end against diffusers' ``LTX2Pipeline`` at the tiny preset (fp32).

One tiny diffusers pipeline with random weights (no text encoder: Gemma hidden states go in as
``prompt_embeds``), 2 steps with CFG + STG + modality guidance + rescale for video and audio,
is run against ours fed the converted weights and the same initial latents. Parity metric
(fixed): max|ours - diffusers| / max(1, max|diffusers|) <= 1e-4, the fp32 tolerance the
parity tests hold a block to, since the chain is transformer passes, Euler steps and two decoders in fp32.
Every combination of the guided step's knobs (``pipeline.guidance_batching``, ``stg_fork``,
``text_kv_cache``) is held to that bar. Also: scan and Python loops agree; new guidance scales
never recompile the loop (batched and sequential passes); the loop moves nothing between host and
device; joint and separate text encoding agree.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from typing import Any

import jax
import numpy as np
import pytest
from jax import monitoring

from ltx2 import config
from ltx2.convert import from_diffusers
from ltx2.convert.pipeline import diffusers_call_kwargs
from ltx2.denoise import Latents
from ltx2.guidance import GuidanceConfig
from ltx2.pipeline import LTX2Pipeline, adain_filter, tone_map_latents
from ltx2.pipeline_config import PipelineConfig

TOL = 1e-4  # FP32_MODULE (tests/tolerances.py): transformer passes, Euler steps and decoders in fp32
KNOBS = set(config.KNOBS)


def _kwargs(cfg: Any) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in KNOBS}


def _randomise(module: Any, gen: Any) -> None:
    """DiT parameters away from their zero/identity inits (tables, gates, norms)."""
    import torch

    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1 + 0.1 * noise)
            elif "table" in name or p.ndim == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p[0].numel() ** 0.5)


def diffusers_pipeline(cfg: PipelineConfig, seed: int = 0) -> Any:
    """diffusers ``LTX2Pipeline`` of ``cfg``'s sizes, random weights, random latent statistics."""
    import torch
    from diffusers import (
        AutoencoderKLLTX2Audio,
        AutoencoderKLLTX2Video,
        FlowMatchEulerDiscreteScheduler,
        LTX2VideoTransformer3DModel,
    )
    from diffusers import LTX2Pipeline as Reference
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    transformer = LTX2VideoTransformer3DModel(**_kwargs(cfg.transformer)).eval()
    _randomise(transformer, gen)
    vae = AutoencoderKLLTX2Video(**_kwargs(cfg.video_vae)).eval()
    audio_vae = AutoencoderKLLTX2Audio(**_kwargs(cfg.audio_vae)).eval()
    with torch.no_grad():
        for m in (vae, audio_vae):
            m.latents_mean.normal_(generator=gen)
            m.latents_std.uniform_(0.5, 2.0, generator=gen)
    return Reference(
        scheduler=FlowMatchEulerDiscreteScheduler(**dataclasses.asdict(cfg.scheduler)),
        vae=vae,
        audio_vae=audio_vae,
        text_encoder=None,
        tokenizer=None,
        connectors=LTX2TextConnectors(**_kwargs(cfg.connectors)).eval(),
        transformer=transformer,
        vocoder=LTX2Vocoder(**_kwargs(cfg.vocoder)).eval(),
    )


def converted(cfg: PipelineConfig, ref: Any, **extra: Any) -> LTX2Pipeline:
    return LTX2Pipeline(
        cfg,
        transformer=from_diffusers(ref.transformer),
        connectors=from_diffusers(ref.connectors),
        video_vae=from_diffusers(ref.vae),
        audio_vae=from_diffusers(ref.audio_vae),
        vocoder=from_diffusers(ref.vocoder),
        **extra,
    )


def _error(ours: Any, ref: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(ours) - ref)) / max(1.0, float(np.max(np.abs(ref)))))


@pytest.fixture(scope="module")
def case() -> dict[str, Any]:
    """Both pipelines, shared inputs, diffusers' outputs and ours (scan loop)."""
    import torch

    cfg = PipelineConfig.tiny()
    ref = diffusers_pipeline(cfg)
    ours = converted(cfg, ref)
    plan = ours.plan()
    rng = np.random.default_rng(0)
    s, d = cfg.text_encoder.max_sequence_length, cfg.connectors.text_encoder_dim
    pos, neg = (rng.standard_normal((1, s, d)).astype(np.float32) for _ in range(2))
    pos_mask, neg_mask = np.ones((1, s), np.int64), np.ones((1, s), np.int64)
    pos_mask[0, :5], neg_mask[0, :9] = 0, 0  # left padding
    video = rng.standard_normal((1, cfg.video_vae.latent_channels, plan.frames, plan.height, plan.width))
    audio = rng.standard_normal((1, cfg.audio_vae.latent_channels, plan.audio_frames, plan.latent_mel_bins))
    video, audio = video.astype(np.float32), audio.astype(np.float32)
    t = torch.from_numpy
    ref_video, ref_audio = ref(
        prompt_embeds=t(pos),
        prompt_attention_mask=t(pos_mask),
        negative_prompt_embeds=t(neg),
        negative_prompt_attention_mask=t(neg_mask),
        **diffusers_call_kwargs(cfg),
        latents=t(video),
        audio_latents=t(audio),
        output_type="np",
        return_dict=False,
    )
    text = ours.embed_text(pos, pos_mask, neg, neg_mask)
    x0 = ours.prepare_latents(plan, video=video, audio=audio)
    schedule, scales = ours.schedule(plan), ours.scales()
    out = ours.denoise(x0, text, schedule, scales, plan, loop="scan")
    return dict(
        cfg=cfg,
        ours=ours,
        plan=plan,
        text=text,
        x0=x0,
        schedule=schedule,
        scales=scales,
        out=out,
        ref_video=np.asarray(ref_video),
        ref_audio=ref_audio.float().numpy(),
        ref=ref,
    )


# The guided step's knobs (pipeline.guidance_batching, stg_fork, text_kv_cache): every combination.
STEP_KNOBS = list(itertools.product(("batched", "sequential"), (True, False), (True, False)))


def _knob_id(knobs: tuple[str, bool, bool]) -> str:
    batching, fork, kv = knobs
    return f"{batching}-{'fork' if fork else 'nofork'}-{'kv' if kv else 'nokv'}"


def with_knobs(case: dict[str, Any], knobs: tuple[str, bool, bool]) -> tuple[LTX2Pipeline, Any]:
    """The case's pipeline (same components) with the guided-step knobs set, and its plan."""
    batching, fork, kv = knobs
    cfg = case["cfg"]
    cfg = cfg.replace(pipeline=cfg.pipeline.replace(guidance_batching=batching, stg_fork=fork, text_kv_cache=kv))
    o = case["ours"]
    pipe = LTX2Pipeline(
        cfg,
        transformer=o.transformer,
        connectors=o.connectors,
        video_vae=o.video_vae,
        audio_vae=o.audio_vae,
        vocoder=o.vocoder,
    )
    return pipe, pipe.plan()


@pytest.mark.parametrize("knobs", STEP_KNOBS, ids=[_knob_id(k) for k in STEP_KNOBS])
def test_end_to_end_matches_diffusers(case: dict[str, Any], knobs: tuple[str, bool, bool]) -> None:
    ours, plan = with_knobs(case, knobs)
    assert (plan.guidance_batching, plan.stg_fork, plan.text_kv_cache) == knobs
    out = ours.denoise(case["x0"], case["text"], case["schedule"], case["scales"], plan, loop="scan")
    # Decoders do not read the knobs: the case's plan keeps their compiled programs.
    video, audio = ours.decode_video(out.video, case["plan"]), ours.decode_audio(out.audio, case["plan"])
    assert video.shape == case["ref_video"].shape == (1, 9, 64, 64, 3)
    assert audio.shape == case["ref_audio"].shape == (1, 2, 7920)
    video_err, audio_err = _error(video, case["ref_video"]), _error(audio, case["ref_audio"])
    print(f"end-to-end parity {_knob_id(knobs)}: video {video_err:.3g}, waveform {audio_err:.3g}")
    assert video_err <= TOL and audio_err <= TOL
    assert float(np.std(case["ref_audio"])) > 1e-3  # a silent waveform would pass trivially


@pytest.mark.slow
def test_python_loop_matches_scan(case: dict[str, Any]) -> None:
    ours = case["ours"]
    python = ours.denoise(case["x0"], case["text"], case["schedule"], case["scales"], case["plan"], loop="python")
    for a, b in zip(python, case["out"], strict=True):
        # The same step function compiled alone or inside the scan body: XLA may fuse differently
        # (FMA contraction, reduction order), FP32_ELEMENTWISE on latents of order 1.
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)


class _Compiles:
    """Backend compiles per function name (jax.monitoring), counted only while ``active``."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.active = False
        monitoring.register_event_duration_secs_listener(self._on)

    def _on(self, name: str, secs: float, **kw: Any) -> None:
        if self.active and name == "/jax/core/compile/backend_compile_duration":
            self.counts[str(kw.get("fun_name"))] += 1


LOOPS = ["scan", pytest.param("python", marks=pytest.mark.slow)]  # compiling the lone step costs ~25 s


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("batching", ["batched", "sequential"])
def test_new_guidance_scales_do_not_recompile(case: dict[str, Any], loop: str, batching: str) -> None:
    ours, plan = with_knobs(case, (batching, batching == "batched", batching == "batched"))
    args = (case["x0"], case["text"], case["schedule"])
    first = ours.denoise(*args, case["scales"], plan, loop=loop)  # compiled here (or earlier)
    # Every scale changes; each pass stays on (structure), rescale stays > 0.
    other = GuidanceConfig(2.0, 0.5, 2.0, 0.3, 5.0, 2.0, 1.5, 0.9)
    assert other.passes() == case["cfg"].guidance.passes()
    watch = _Compiles()
    watch.active = True
    out = jax.block_until_ready(ours.denoise(*args, ours.scales(other), plan, loop=loop))
    watch.active = False
    denoise = {k: v for k, v in watch.counts.items() if "denoise" in k}
    assert denoise == {}, f"recompiled: {denoise}"
    assert _error(out.video, np.asarray(first.video)) > 1e-3  # the new scales did act


@pytest.mark.parametrize("loop", LOOPS)
def test_no_host_device_transfer_inside_the_loop(case: dict[str, Any], loop: str) -> None:
    ours, plan = case["ours"], case["plan"]
    args = (case["x0"], case["text"], case["schedule"], case["scales"], plan)
    ours.denoise(*args, loop=loop)  # compiled outside the guard
    with jax.transfer_guard("disallow"):
        out = jax.block_until_ready(ours.denoise(*args, loop=loop))
    assert isinstance(out, Latents)


@pytest.mark.slow
def test_joint_and_separate_text_encoding_agree(case: dict[str, Any]) -> None:
    from ltx2.components import random_gemma

    cfg = case["cfg"]
    encoders = {
        b: random_gemma(cfg.replace(text_encoder=dataclasses.replace(cfg.text_encoder, batching=b)), 0)
        for b in ("joint", "separate")
    }
    rng = np.random.default_rng(1)
    s = cfg.text_encoder.max_sequence_length
    ids = rng.integers(1, cfg.gemma.vocab_size, size=(2, 2, s)).astype(np.int32)
    masks = np.ones((2, 2, s), np.int32)
    masks[0, 0, :3] = masks[1, 1, :6] = 0
    ids[masks == 0] = 0
    emb = {}
    for b, enc in encoders.items():
        pipe = LTX2Pipeline(
            cfg,
            transformer=case["ours"].transformer,
            connectors=case["ours"].connectors,
            video_vae=case["ours"].video_vae,
            audio_vae=case["ours"].audio_vae,
            vocoder=case["ours"].vocoder,
            text_encoder=enc,
        )
        emb[b] = pipe.encode_prompt(ids[0], masks[0], ids[1], masks[1])
    for joint, separate in zip(emb["joint"], emb["separate"], strict=True):
        assert joint.shape == separate.shape and joint.shape[0] == 4  # [negative; positive] x 2 prompts
        # FP32_KERNEL: one batch or two, the connectors' contractions may sum in another order.
        np.testing.assert_allclose(np.asarray(joint), np.asarray(separate), rtol=0, atol=1e-5)


def test_upsample_matches_diffusers_latent_upsample_pipeline() -> None:
    """Upsampler + AdaIN + tone map against ``LTX2LatentUpsamplePipeline``'s own methods."""
    import torch
    from diffusers.pipelines.ltx2 import LTX2LatentUpsamplePipeline
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel

    cfg = PipelineConfig.tiny()
    assert cfg.upsampler is not None
    torch.manual_seed(0)
    ref = LTX2LatentUpsamplerModel(**_kwargs(cfg.upsampler)).eval()
    pipe = LTX2Pipeline(cfg, **{**_tiny_components_stub(), "upsampler": from_diffusers(ref)})
    x = np.random.default_rng(0).standard_normal((1, 8, 2, 2, 3)).astype(np.float32)
    with torch.no_grad():
        up = ref(torch.from_numpy(x))
        expected = LTX2LatentUpsamplePipeline.tone_map_latents(
            None, LTX2LatentUpsamplePipeline.adain_filter_latent(None, up, torch.from_numpy(x), 0.6), 0.5
        ).numpy()
    got = pipe.upsample(x, adain_factor=0.6, tone_map_compression_ratio=0.5)
    assert got.shape == (1, 8, 2, 4, 6)
    assert _error(got, expected) <= 1e-5  # FP32_KERNEL: a small conv net plus AdaIN / tone-map statistics
    np.testing.assert_allclose(np.asarray(pipe.upsample(x)), up.numpy(), rtol=0, atol=1e-5)
    # The formulas alone are identities at factor / compression 0.
    np.testing.assert_array_equal(np.asarray(adain_filter(x, x * 2, 0.0)), x)
    np.testing.assert_array_equal(np.asarray(tone_map_latents(x, 0.0)), x)


def _tiny_components_stub() -> dict[str, Any]:
    """Abstract (shape-only) components: the upsample stage never touches them."""
    from flax import nnx

    from ltx2 import components as c

    cfg = PipelineConfig.tiny()
    return dict(
        transformer=nnx.eval_shape(lambda: c.LTX2Transformer(cfg.transformer, rngs=nnx.Rngs(0))),
        connectors=nnx.eval_shape(lambda: c.LTX2TextConnectors(cfg.connectors, rngs=nnx.Rngs(0))),
        video_vae=nnx.eval_shape(lambda: c.VideoVAE(cfg.video_vae, rngs=nnx.Rngs(0))),
        audio_vae=nnx.eval_shape(lambda: c.AutoencoderKLLTX2Audio(cfg.audio_vae, rngs=nnx.Rngs(0))),
        vocoder=nnx.eval_shape(lambda: c.LTX2Vocoder(cfg.vocoder, rngs=nnx.Rngs(0))),
    )


def _leaves(module: Any) -> dict[str, np.ndarray]:
    from flax import nnx

    return {".".join(map(str, p)): np.asarray(v) for p, v in nnx.to_flat_state(nnx.state(module))}


def test_load_pretrained_round_trips_save_pretrained(case: dict[str, Any], tmp_path: Any) -> None:
    from ltx2.convert import load_pretrained

    case["ref"].save_pretrained(tmp_path)
    loaded = load_pretrained(tmp_path)
    ours = case["ours"]
    assert loaded.cfg.transformer == case["cfg"].transformer
    assert loaded.cfg.scheduler == case["cfg"].scheduler
    assert loaded.text_encoder is None and loaded.upsampler is None  # none saved
    for name in ("transformer", "connectors", "video_vae", "audio_vae", "vocoder"):
        got, want = _leaves(getattr(loaded, name)), _leaves(getattr(ours, name))
        assert got.keys() == want.keys(), name
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{name}.{key}")


def test_load_pretrained_names_missing_and_corrupt_files(case: dict[str, Any], tmp_path: Any) -> None:
    import shutil

    from ltx2.convert import load_pretrained

    case["ref"].save_pretrained(tmp_path)
    shutil.rmtree(tmp_path / "audio_vae")
    with pytest.raises(FileNotFoundError, match=f"missing component folder {tmp_path / 'audio_vae'}"):
        load_pretrained(tmp_path)
    weights = tmp_path / "vae" / "diffusion_pytorch_model.safetensors"  # loaded before audio_vae
    weights.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match=f"corrupt safetensors file {weights}"):
        load_pretrained(tmp_path)
    (tmp_path / "model_index.json").unlink()
    with pytest.raises(FileNotFoundError, match=f"missing {tmp_path / 'model_index.json'}"):
        load_pretrained(tmp_path)
