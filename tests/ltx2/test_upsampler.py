"""Latent upsampler: parity with diffusers' ``LTX2LatentUpsamplerModel`` at tiny random configs
(fp32) for the rational (2.0) and pixel-shuffle (2.3) resamplers and the other layouts,
conversion errors that name the key, config validation that names the field, and the release
presets' shapes against diffusers (meta device, no weights).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.convert.upsampler import load
from ltx2.vae.upsampler import LatentUpsamplerConfig, LTX2LatentUpsamplerModel
from tests.tolerances import FP32_ELEMENTWISE, FP32_MODULE

TOL = FP32_MODULE  # max|ours - ref| / max(1, max|ref|)
_OURS_ONLY = {"sharding", "dtype"}
TINY = LatentUpsamplerConfig.tiny()
CASES = {
    "rational-2.0": TINY,
    "pixel-shuffle": dataclasses.replace(TINY, use_rational_resampler=False),
    "rational-1.5": dataclasses.replace(TINY, rational_spatial_scale=1.5),  # blur with stride 2
    "dims-2": dataclasses.replace(TINY, dims=2),
    "spatiotemporal": dataclasses.replace(TINY, temporal_upsample=True),
}


def _kwargs(cfg: LatentUpsamplerConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _OURS_ONLY}


def _torch_upsampler(cfg: LatentUpsamplerConfig, seed: int) -> Any:
    """diffusers' upsampler with non-trivial GroupNorm affines (they start at ones / zeros)."""
    import torch
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel as TorchUpsampler

    torch.manual_seed(seed)
    model = TorchUpsampler(**_kwargs(cfg)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _run(model: nnx.Module, x: jax.Array) -> Any:
    """``model(x)`` as one compiled program. XLA:CPU's LLVM passes dominate compile time for
    these tiny nets on a busy 2-core machine, so they are turned down; the HLO and its fp32
    arithmetic are unchanged (parity holds at the default level too)."""
    graph, state = nnx.split(model)
    lowered = jax.jit(lambda s, a: nnx.merge(graph, s)(a)).lower(state, x)
    return lowered.compile({"xla_backend_optimization_level": 0})(state, x)


@pytest.fixture(scope="module")
def tiny_ref() -> Any:
    return _torch_upsampler(TINY, 0)


@pytest.mark.parity
@pytest.mark.parametrize("case", list(CASES))
def test_parity(case: str) -> None:
    import torch

    from ltx2.convert import from_diffusers

    cfg = CASES[case]
    ref = _torch_upsampler(cfg, 1)
    x = torch.randn(2, cfg.in_channels, 3, 4, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expect = ref(x).numpy()
    got = np.asarray(_run(from_diffusers(ref), jnp.asarray(x.numpy())))
    frames, side = (5, 8) if cfg.temporal_upsample else (3, int(4 * cfg.spatial_scale))
    assert got.shape == expect.shape == (2, cfg.in_channels, frames, side, side)
    err = float(np.max(np.abs(got - expect)) / max(1.0, float(np.max(np.abs(expect)))))
    print(f"upsampler {case} parity error: {err:.2e}")
    assert err <= TOL


@pytest.mark.parity
def test_sharded_parity(tiny_ref: Any) -> None:
    """Placed by a strategy on a mesh, activations constrained (batch over ``data``): same numbers."""
    import torch

    from ltx2 import sharding

    cfg = dataclasses.replace(TINY, sharding="ironwood")
    mesh = sharding.build_mesh({"data": 2, "tensor": 4})
    ours = sharding.shard_module(load(cfg, tiny_ref.state_dict()), cfg.sharding, mesh)
    x = torch.randn(2, cfg.in_channels, 2, 4, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expect = tiny_ref(x).numpy()
    with jax.set_mesh(mesh):
        got = np.asarray(_run(ours, jnp.asarray(x.numpy())))
    err = float(np.max(np.abs(got - expect)) / max(1.0, float(np.max(np.abs(expect)))))
    print(f"upsampler sharded (ironwood) parity error: {err:.2e}")
    assert err <= TOL


def test_blur_kernel_buffer_loads(tiny_ref: Any) -> None:
    """The binomial blur is a checkpoint buffer ([1,4,6,4,1] outer product, normalised)."""
    ours = load(TINY, tiny_ref.state_dict())
    expect = tiny_ref.upsampler.blur_down.kernel.numpy()[0, 0]
    np.testing.assert_array_equal(np.asarray(ours.upsampler.blur_down.kernel[...]), expect)
    # k / 256 are exact in float32; FP32_ELEMENTWISE leaves room for a normalisation's rounding.
    np.testing.assert_allclose(expect, np.outer([1, 4, 6, 4, 1], [1, 4, 6, 4, 1]) / 256.0, rtol=FP32_ELEMENTWISE)


# ----------------------------------------------------------------------------- conversion


def test_conversion_rejects_unknown_key(tiny_ref: Any) -> None:
    sd = dict(tiny_ref.state_dict())
    sd["upsampler.1.weight"] = sd["upsampler.conv.weight"]
    with pytest.raises(KeyError, match=r"upsampler\.1\.weight"):
        load(TINY, sd)


def test_conversion_rejects_missing_key(tiny_ref: Any) -> None:
    sd = dict(tiny_ref.state_dict())
    del sd["upsampler.blur_down.kernel"]
    with pytest.raises(KeyError, match=r"upsampler\.blur_down\.kernel"):
        load(TINY, sd)


def test_conversion_rejects_wrong_shape(tiny_ref: Any) -> None:
    sd = dict(tiny_ref.state_dict())
    sd["res_blocks.0.norm2.weight"] = sd["res_blocks.0.norm2.weight"][:16]
    with pytest.raises(ValueError, match=r"'res_blocks\.0\.norm2\.weight'"):
        load(TINY, sd)


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"mid_channels": 48}, "mid_channels=48"),
        ({"dims": 1}, "dims=1"),
        ({"rational_spatial_scale": 3.0}, "rational_spatial_scale=3.0"),
        ({"spatial_upsample": False}, "spatial_upsample=False"),
        ({"dims": 2, "temporal_upsample": True}, "dims=2"),
        ({"num_blocks_per_stage": 0}, "num_blocks_per_stage=0"),
        ({"dtype": "float33"}, "dtype='float33'"),
    ],
)
def test_config_validation_names_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match="LatentUpsamplerConfig." + field):
        dataclasses.replace(TINY, **change)


# ----------------------------------------------------------------------------- release presets


def test_defaults_equal_diffusers() -> None:
    """Field names and defaults are diffusers' (the 2.0 release config)."""
    import inspect

    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel as TorchUpsampler

    params = inspect.signature(TorchUpsampler.__init__).parameters
    defaults = {k: p.default for k, p in params.items() if k != "self"}
    assert set(defaults) == {f.name for f in dataclasses.fields(LatentUpsamplerConfig)} - _OURS_ONLY
    assert LatentUpsamplerConfig.from_diffusers(defaults) == LatentUpsamplerConfig.ltx2_19b()


@pytest.mark.parametrize("preset", ["ltx2_19b", "ltx2_3_22b"])
def test_release_presets_match_diffusers_shapes(preset: str) -> None:
    """The 2.0 (rational, 497.9 M) and 2.3 (pixel-shuffle) upsamplers build abstractly with
    diffusers' exact parameter and state-dict entry counts; every variable has logical axes."""
    import torch
    from diffusers.pipelines.ltx2.latent_upsampler import LTX2LatentUpsamplerModel as TorchUpsampler

    cfg = getattr(LatentUpsamplerConfig, preset)()
    with torch.device("meta"):
        ref = TorchUpsampler(**_kwargs(cfg))
    model = nnx.eval_shape(lambda: LTX2LatentUpsamplerModel(cfg, rngs=nnx.Rngs(0)))
    leaves = jax.tree.leaves(nnx.state(model))
    assert len(leaves) == len(ref.state_dict())
    params = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert sum(int(np.prod(x.shape)) for x in params) == sum(p.numel() for p in ref.parameters())
    for path, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Variable):
            names = var.get_metadata().get("logical_axes")
            assert names is not None and len(names) == var.ndim, path
