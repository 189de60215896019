"""The stage API: what each builder derives from the config and Plan, the workload checks, and the
bare denoising step computed against the transformer called directly."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2 import (
    STAGES,
    LTX2Transformer,
    PipelineConfig,
    Plan,
    StageUnavailable,
    Workload,
    WorkloadError,
    build_mesh,
    build_stage,
    check_workload,
)

# 64x64 px, 65 frames at 24 fps -> a 9x2x2 latent grid (36 video tokens), 68 audio latent frames.
WL = Workload(height=64, width=64, num_frames=65, frame_rate=24.0, batch=2, steps=2, text_tokens=16)
MESH = {"fsdp": 2, "context": 2, "tensor": 2}


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    return build_mesh(MESH, devices=jax.devices()[:8])


def test_stage_names() -> None:
    assert STAGES == (
        "text_encode",
        "denoise_step",
        "guided_step",
        "denoise_loop",
        "video_decode",
        "audio_decode",
        "upsample",
    )


def test_denoise_step_takes_its_token_counts_from_the_plan(mesh: jax.sharding.Mesh) -> None:
    cfg = PipelineConfig.tiny().replace(transformer=PipelineConfig.tiny().transformer.replace(sharding="context"))
    program = build_stage("denoise_step", cfg, WL, mesh)
    plan = Plan.build(cfg, batch=2, height=64, width=64, num_frames=65, frame_rate=24.0)
    assert (plan.frames, plan.height, plan.width, plan.video_tokens, plan.audio_frames) == (9, 2, 2, 36, 68)
    assert program.extra["tokens"] == {
        "latent_frames": 9,
        "latent_height": 2,
        "latent_width": 2,
        "video_tokens": 36,
        "audio_frames": 68,
        "audio_tokens": 68,
        "text_tokens": 16,
    }
    _, x, a, text, _, mask, t, sigma, dsigma = program.abstract_args
    t_cfg = cfg.transformer
    assert (x.shape, a.shape, text.shape, mask.shape) == ((2, 36, 8), (2, 68, 8), (2, 16, 24), (2, 16))
    assert (t.shape, sigma.shape, dsigma.shape) == ((2,), (2,), ())
    assert program.analytic_flops == t_cfg.forward_flops(36, 68, 16, 2) and program.calls_per_video == 2
    assert x.sharding.spec == jax.sharding.PartitionSpec(None, ("context", "fsdp"), None)  # context: L split


def test_guided_step_is_the_loop_step_with_every_pass(mesh: jax.sharding.Mesh) -> None:
    cfg = PipelineConfig.tiny()
    step = build_stage("guided_step", cfg, WL, mesh)
    python = build_stage("denoise_loop", cfg.replace(pipeline=cfg.pipeline.replace(diffusion_loop="python")), WL, mesh)
    scan = build_stage("denoise_loop", cfg, WL, mesh)
    # One video with CFG: 2 rows for the CFG pair, 1 each for STG and modality isolation.
    assert step.extra == {
        "steps": 2,
        "videos": 1,
        "rows_per_step": 4,
        "guidance_passes": {"cfg": True, "stg": True, "modality": True},
    }
    assert step.analytic_flops == cfg.transformer.forward_flops(36, 68, 16, 4) and step.calls_per_video == 2
    # The Python loop's static program is the guided step, run per step by a host loop; the scan is one program.
    assert python.calls_per_video == 2 and python.host_run is not None and step.host_run is None
    assert [a.shape for a in python.abstract_args[3:6]] == [(), (), ()]
    assert scan.calls_per_video == 1 and scan.analytic_flops == 2 * step.analytic_flops and scan.host_run is None


def test_guided_step_takes_the_videos_text_kv_as_an_input(mesh: jax.sharding.Mesh) -> None:
    """With text_kv_cache the Python loop's step reads the text keys/values made once per video, so
    the guided_step stage's program (its static metrics) holds no text projection; without, it does."""
    cfg = PipelineConfig.tiny()
    on = build_stage("guided_step", cfg, WL, mesh)
    off = build_stage("guided_step", cfg.replace(pipeline=cfg.pipeline.replace(text_kv_cache=False)), WL, mesh)
    kv, t = on.abstract_args[-1], cfg.transformer
    assert off.abstract_args[-1] is None
    # [layers, prompt rows (negative, positive), S, D] per stream
    assert kv.video_k.shape == (t.num_layers, 2, WL.text_tokens, t.num_attention_heads * t.attention_head_dim)
    assert any("made once per video" in n for n in on.notes) and not any("once per video" in n for n in off.notes)

    def dots(program: Any) -> int:
        with jax.set_mesh(mesh):
            return program.fn.lower(*program.abstract_args).as_text().count("dot_general")

    # The K/V projections of attn2 and audio_attn2 leave the step (tests/ltx2/test_passes.py counts
    # their exact FLOPs); here: the program built for the stage is the one without them.
    assert dots(on) < dots(off)


def test_python_loop_runs_its_own_step_program_and_matches_the_pipelines_loop() -> None:
    """The stage's host loop calls the program its static metrics describe (so a trace finds that
    module), and gives exactly what ltx2.denoise.denoise_python gives: the same step, in order."""
    from ltx2.denoise import denoise_python
    from ltx2.stages.program import setup

    one = build_mesh({"data": 1}, devices=jax.devices()[:1])
    cfg = PipelineConfig.tiny()
    cfg = cfg.replace(pipeline=cfg.pipeline.replace(diffusion_loop="python"))
    program = build_stage("denoise_loop", cfg, WL, one)
    args = program.make_args(0)
    graphdef = nnx.graphdef(nnx.eval_shape(lambda: LTX2Transformer(cfg.transformer, rngs=nnx.Rngs(0))))
    with jax.set_mesh(one):
        assert program.fn._cache_size() == 0
        ours = jax.block_until_ready(program.run(*args))
        assert program.fn._cache_size() > 0  # the loop ran the stage's own jitted step
        theirs = denoise_python(graphdef, *args, plan=setup(cfg, WL).plan)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_odd_batch_with_cfg_is_refused(mesh: jax.sharding.Mesh) -> None:
    with pytest.raises(ValueError, match="workload.batch=3 counts rows of the CFG pass"):
        build_stage("denoise_loop", PipelineConfig.tiny(), Workload(**{**WL.__dict__, "batch": 3}), mesh)


def test_unknown_stage_and_missing_upsampler_are_unavailable(mesh: jax.sharding.Mesh) -> None:
    with pytest.raises(StageUnavailable, match="no stage named 'decode'"):
        build_stage("decode", PipelineConfig.tiny(), WL, mesh)
    with pytest.raises(StageUnavailable, match="no latent upsampler"):
        build_stage("upsample", PipelineConfig.tiny().replace(upsampler=None), WL, mesh)


@pytest.mark.parametrize(
    ("wl", "strategy", "message", "fields", "sharded"),
    [
        (
            {"height": 100},
            "replicated",
            "workload 64x100x65 does not fit the latent grid: width and height must be "
            "multiples of 32, frames of the form 8k \\+ 1",
            ("height",),
            False,
        ),
        ({"width": 48, "num_frames": 64}, "replicated", "frames of the form 8k", ("width", "num_frames"), False),
        (
            {"batch": 3},
            "trillium",
            r"batch \(3\) do not divide into 2 shards \(activation_batch over fsdp",
            ("batch",),
            True,
        ),
        (
            {"height": 96},
            "context",
            r"video tokens \(54\) do not divide into 4 shards \(activation_length over "
            r"context x fsdp under strategy 'context'\)",
            ("height", "width", "num_frames"),
            True,
        ),
    ],
)
def test_check_workload_names_the_dimension(
    wl: dict, strategy: str, message: str, fields: tuple[str, ...], sharded: bool
) -> None:
    cfg = PipelineConfig.tiny()
    cfg = cfg.replace(transformer=cfg.transformer.replace(sharding=strategy))
    with pytest.raises(WorkloadError, match=message) as info:
        check_workload(cfg, Workload(**{**WL.__dict__, **wl}), MESH, ["denoise_step"])
    assert (info.value.fields, info.value.sharded) == (fields, sharded)  # which setting to blame
    check_workload(cfg, Workload(**{**WL.__dict__, **wl}), MESH, ["video_decode"])  # decoders place by shape


def test_check_workload_accepts_the_divisible_layouts() -> None:
    cfg = PipelineConfig.tiny()
    for strategy in ("replicated", "naive", "context", "trillium", "ironwood"):
        check_workload(cfg.replace(transformer=cfg.transformer.replace(sharding=strategy)), WL, MESH, ["denoise_step"])


def test_denoise_step_is_one_forward_and_an_euler_update() -> None:
    """Run on one device against the transformer called directly: x + dsigma * v for both latents."""
    one = build_mesh({"data": 1}, devices=jax.devices()[:1])
    program = build_stage("denoise_step", PipelineConfig.tiny(), WL, one)
    args = program.make_args(0)
    state, x, a, text, audio_text, mask, t, sigma, dsigma = args
    graphdef = nnx.graphdef(
        nnx.eval_shape(lambda: LTX2Transformer(PipelineConfig.tiny().transformer, rngs=nnx.Rngs(0)))
    )

    @jax.jit
    def velocities(state, x, a, text, audio_text, mask, t, sigma):  # type: ignore[no-untyped-def]
        return nnx.merge(graphdef, state)(
            x,
            a,
            text,
            audio_text,
            t,
            sigma=sigma,
            encoder_attention_mask=mask,
            audio_encoder_attention_mask=mask,
            num_frames=9,
            height=2,
            width=2,
            fps=24.0,
            audio_num_frames=68,
        )

    with jax.set_mesh(one):
        out_x, out_a = program.run(*args)
        v, va = velocities(state, x, a, text, audio_text, mask, t, sigma)
    assert float(dsigma) == pytest.approx(-0.1) and float(jnp.abs(v).max()) > 0
    # fp32 throughout; the only difference is jit fusion around one multiply-add (a few ulp).
    np.testing.assert_allclose(np.asarray(out_x), np.asarray(x + dsigma * v), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out_a), np.asarray(a + dsigma * va), rtol=1e-6, atol=1e-6)


def test_workload_config_applies_the_size_and_lays_out_the_vaes() -> None:
    from ltx2.stages.program import workload_config

    tiny = PipelineConfig.tiny()
    ctx = tiny.replace(transformer=tiny.transformer.replace(sharding="context"))
    cfg = workload_config(ctx, WL)
    assert (cfg.pipeline.height, cfg.pipeline.num_frames, cfg.pipeline.num_inference_steps) == (64, 65, 2)
    # vae_replication (default on): VAE weights whole, batch and frames split over the mesh
    assert cfg.video_vae.sharding == cfg.vocoder.sharding == cfg.upsampler.sharding == "context+vae-replicated"
    off = workload_config(ctx.replace(pipeline=ctx.pipeline.replace(vae_replication=False)), WL)
    assert off.audio_vae.sharding == "context+vae-sharded"
    assert workload_config(tiny, WL).video_vae.sharding == "replicated"


def test_full_size_text_encode_is_compile_only(mesh: jax.sharding.Mesh) -> None:
    """Gemma-3 12B is traced without weights: the program's Gemma arguments are shapes (48 GB of
    float32), and running it is refused with the reason."""
    cfg = PipelineConfig.ltx2_19b()
    program = build_stage("text_encode", cfg, Workload(**{**WL.__dict__, "text_tokens": 128}), mesh)
    gemma = program.abstract_args[0]
    params = sum(int(np.prod(s.shape)) for k, s in gemma.items() if k.endswith("weight"))
    assert 11.5e9 < params < 12.5e9 and all(s.dtype == np.float32 for s in gemma.values() if s.ndim == 2)
    assert any("without weights" in n for n in program.notes)
    with pytest.raises(StageUnavailable, match="running text_encode at full size"):
        program.make_args(0)
