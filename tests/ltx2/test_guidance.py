"""x0-space guidance: parity with ``LTX2Pipeline``'s guidance math (diffusers' own
``rescale_noise_cfg``), and changing scales never recompiles."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ltx2.guidance import GuidanceConfig, GuidancePasses, GuidanceScales, guided_velocity, split_cfg_batch
from tests.tolerances import FP32_ELEMENTWISE, FP32_KERNEL

TOL = FP32_KERNEL  # elementwise combination, plus the rescale's std over tokens (a reduction)
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
SHAPES = {"video": (2, 16, 8), "audio": (2, 8, 4)}
CASES = {
    "all-passes-rescaled": (GuidanceConfig(), ("uncond", "perturbed", "isolated")),
    "cfg-only": (GuidanceConfig.cfg_only(4.0, 6.0), ("uncond",)),
    "stg-rescaled": (GuidanceConfig(guidance_scale=1.0, audio_guidance_scale=1.0), ("perturbed",)),
    "modality-only": (GuidanceConfig(guidance_rescale=0.0, audio_guidance_rescale=0.0), ("isolated",)),
}


@pytest.fixture(scope="module")
def rescale_noise_cfg() -> Any:
    from diffusers.pipelines.ltx2.pipeline_ltx2 import rescale_noise_cfg

    return rescale_noise_cfg


def reference_velocity(rescale_noise_cfg: Any, latents: Any, sigma: Any, preds: dict[str, Any], s: dict) -> Any:
    """``LTX2Pipeline.__call__``'s guidance lines for one modality, in torch."""
    x0 = {k: latents - v.float() * sigma for k, v in preds.items()}  # convert_velocity_to_x0
    cond = x0["cond"]
    cfg_delta = (s["cfg"] - 1) * (cond - x0["uncond"]) if "uncond" in x0 else 0
    stg_delta = s["stg"] * (cond - x0["perturbed"]) if "perturbed" in x0 else 0
    modality_delta = (s["modality"] - 1) * (cond - x0["isolated"]) if "isolated" in x0 else 0
    guided = cond + cfg_delta + stg_delta + modality_delta
    if s["rescale"] > 0:
        guided = rescale_noise_cfg(guided, cond, guidance_rescale=s["rescale"])
    return (latents - guided) / sigma  # convert_x0_to_velocity


def modality_scales(cfg: GuidanceConfig, modality: str) -> dict[str, float]:
    prefix = "audio_" if modality == "audio" else ""
    return {
        "cfg": getattr(cfg, f"{prefix}guidance_scale"),
        "stg": getattr(cfg, f"{prefix}stg_scale"),
        "modality": getattr(cfg, f"{prefix}modality_scale"),
        "rescale": getattr(cfg, f"{prefix}guidance_rescale"),
    }


guided_velocity_jit = jax.jit(guided_velocity)


@pytest.mark.parity
@pytest.mark.parametrize("case", list(CASES))
def test_matches_pipeline_math(rescale_noise_cfg: Any, case: str) -> None:
    import torch

    cfg, extra = CASES[case]
    rng = np.random.default_rng(0)
    sigma = np.float32(0.37)
    for modality, shape in SHAPES.items():
        latents = rng.normal(size=shape).astype(np.float32)
        preds = {k: rng.normal(size=shape).astype(np.float32) for k in ("cond", *extra)}
        ref = reference_velocity(
            rescale_noise_cfg,
            torch.from_numpy(latents),
            torch.tensor(sigma),
            {k: torch.from_numpy(v) for k, v in preds.items()},
            modality_scales(cfg, modality),
        ).numpy()
        ours = guided_velocity_jit(
            jnp.asarray(latents),
            jnp.asarray(sigma),
            jnp.asarray(preds["cond"]),
            getattr(cfg.scales(), modality),
            **{f"v_{k}": jnp.asarray(v) for k, v in preds.items() if k != "cond"},
        )
        err = float(np.max(np.abs(np.asarray(ours) - ref)) / max(1.0, np.max(np.abs(ref))))
        print(f"guidance {case} {modality}: max|ours-ref|/max(1,|ref|) = {err:.3g}")
        assert err <= TOL


@pytest.fixture
def backend_compiles() -> Iterator[list[str]]:
    """Names of the functions XLA compiles while the test runs."""
    names: list[str] = []

    def listener(event: str, duration: float, **kwargs: Any) -> None:
        if event == COMPILE_EVENT:
            names.append(str(kwargs.get("fun_name", "")))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield names
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)


def test_changing_scales_does_not_recompile(backend_compiles: list[str]) -> None:
    def guide_both(x: jax.Array, sigma: jax.Array, preds: dict[str, jax.Array], scales: GuidanceScales) -> jax.Array:
        return guided_velocity(x, sigma, preds["cond"], scales, v_uncond=preds["uncond"], v_perturbed=preds["stg"])

    fn = jax.jit(guide_both)
    x = jnp.ones((2, 16, 8))
    preds = {k: jnp.full((2, 16, 8), i, jnp.float32) for i, k in enumerate(("cond", "uncond", "stg"))}
    configs = [
        GuidanceConfig(),
        GuidanceConfig(guidance_scale=5.0, stg_scale=0.0, guidance_rescale=0.0),  # rescale off
        GuidanceConfig(guidance_scale=1.5, stg_scale=2.0, guidance_rescale=0.3),  # rescale back on
        GuidanceConfig.cfg_only(7.0),
    ]
    outputs = []
    for i, cfg in enumerate(configs):
        outputs.append(np.asarray(fn(x, jnp.float32(0.5), preds, cfg.scales().video)))
        compiled = [n for n in backend_compiles if n == "jit(guide_both)"]
        print(f"after call {i}: {len(compiled)} compilation(s) of guide_both")
        assert len(compiled) == 1
    assert not np.allclose(outputs[0], outputs[1])  # the scales really reached the program


def test_identity_scales_return_conditional_velocity() -> None:
    scales = GuidanceConfig.cfg_only(1.0).scales().audio
    x, v = jnp.linspace(-1, 1, 24).reshape(2, 3, 4), jnp.linspace(2, -3, 24).reshape(2, 3, 4)
    out = guided_velocity(x, jnp.float32(0.8), v, scales, v_uncond=v[::-1])
    np.testing.assert_allclose(np.asarray(out), np.asarray(v), atol=FP32_ELEMENTWISE)


def test_passes_follow_pipeline_rules() -> None:
    assert GuidanceConfig().passes() == GuidancePasses(cfg=True, stg=True, modality=True)
    assert GuidanceConfig.cfg_only(3.0).passes() == GuidancePasses(cfg=True, stg=False, modality=False)
    only_audio = GuidanceConfig.cfg_only(1.0, audio_guidance_scale=5.0).replace(audio_stg_scale=0.5)
    assert only_audio.passes() == GuidancePasses(cfg=True, stg=True, modality=False)
    with pytest.raises(ValueError, match="guidance_rescale"):
        GuidanceConfig(guidance_rescale=1.5)


def test_split_cfg_batch_is_negative_first() -> None:
    uncond, cond = split_cfg_batch(jnp.arange(4.0))
    np.testing.assert_array_equal(np.asarray(uncond), [0.0, 1.0])
    np.testing.assert_array_equal(np.asarray(cond), [2.0, 3.0])
