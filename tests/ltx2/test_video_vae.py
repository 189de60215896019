"""Video VAE: parity with diffusers' ``AutoencoderKLLTX2Video`` at tiny random configs (fp32),
conversion errors that name the key, config validation that names the field.

Our models are only ever built by conversion (``nnx.eval_shape`` + load), never by random init:
eager random init compiles one kernel per parameter shape, which is slow on a busy 2-core CPU.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.convert.video_vae import load
from ltx2.vae.video import VideoVAE, VideoVAEConfig, mix_decode_noise
from tests.tolerances import FP32_ELEMENTWISE, FP32_KERNEL, FP32_MODULE

TOL = FP32_MODULE  # max|ours - ref| / max(1, max|ref|)

# Every down-/upsampling kind and the odd paths: a "conv" (strided) downsampler, a block without
# downsampling, a non-causal reflect-padded encoder, a causal zero-padded decoder with an
# upsample_factor=1 block whose conv_in resnet changes width (norm3 + conv_shortcut), spatial and
# temporal upsamplers, a non-residual upsampler, noise injection, 2 resnets in a block.
ODD = VideoVAEConfig(
    latent_channels=8,
    block_out_channels=(8, 16, 16, 32),
    decoder_block_out_channels=(16, 16, 32),
    layers_per_block=(1, 2, 1, 1, 1),
    decoder_layers_per_block=(1, 1, 2, 1),
    spatio_temporal_scaling=(True, True, False, True),
    decoder_inject_noise=(True, False, True, True),
    downsample_type=("conv", "spatial", "temporal", "spatiotemporal"),
    upsample_type=("spatiotemporal", "spatial", "temporal"),
    upsample_residual=(True, False, True),
    upsample_factor=(2, 1, 1),
    encoder_causal=False,
    decoder_causal=True,
    encoder_spatial_padding_mode="reflect",
    decoder_spatial_padding_mode="zeros",
    spatial_compression_ratio=32,
    temporal_compression_ratio=8,
)
TIMESTEP = dataclasses.replace(VideoVAEConfig.tiny(), timestep_conditioning=True)
_OURS_ONLY = {"sharding", "dtype"}


def _torch_vae(cfg: VideoVAEConfig, seed: int) -> Any:
    """diffusers' VAE for ``cfg`` with every parameter and buffer random (incl. the zero-initialised
    noise scales and the latents mean/std), so no path is tested against zeros or ones."""
    import torch
    from diffusers import AutoencoderKLLTX2Video

    torch.manual_seed(seed)
    kwargs = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _OURS_ONLY}
    model = AutoencoderKLLTX2Video(**kwargs).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "per_channel_scale" in name:
                p.normal_()
        model.latents_mean.normal_()
        model.latents_std.uniform_(0.5, 2.0)
    return model


@pytest.fixture(scope="module")
def tiny_pair() -> tuple[Any, VideoVAE]:
    from ltx2.convert import from_diffusers

    ref = _torch_vae(VideoVAEConfig.tiny(), 0)
    return ref, from_diffusers(ref)


@pytest.fixture(scope="module")
def odd_pair() -> tuple[Any, VideoVAE]:
    from ltx2.convert import from_diffusers

    ref = _torch_vae(ODD, 1)
    return ref, from_diffusers(ref)


@pytest.fixture(scope="module")
def timestep_pair() -> tuple[Any, VideoVAE]:
    from ltx2.convert import from_diffusers

    ref = _torch_vae(TIMESTEP, 2)
    return ref, from_diffusers(ref)


@functools.partial(nnx.jit, static_argnames="causal")
def _encode(model: VideoVAE, x: jax.Array, causal: bool | None = None) -> jax.Array:
    return model.encode(x, causal=causal)


@functools.partial(nnx.jit, static_argnames="causal")
def _decode(model: VideoVAE, z: jax.Array, temb=None, key=None, causal: bool | None = None) -> jax.Array:
    return model.decode(z, temb, causal=causal, key=key)


def _err(case: str, ours: jax.Array, ref: Any) -> float:
    ref = ref.detach().numpy()
    assert np.asarray(ours).shape == ref.shape, case
    err = float(np.max(np.abs(np.asarray(ours) - ref)) / max(1.0, float(np.max(np.abs(ref)))))
    print(f"video VAE parity {case}: {err:.3e}")
    return err


def _randn(*shape: int, seed: int = 0) -> Any:
    import torch

    return torch.from_numpy(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# ----------------------------------------------------------------------------- parity


@pytest.mark.parity
def test_encode_tiny(tiny_pair) -> None:
    ref_model, ours = tiny_pair
    x = _randn(1, 3, 9, 64, 64)
    ref = ref_model.encode(x).latent_dist.mode()
    assert _err("encode tiny (causal)", _encode(ours, jnp.asarray(x.numpy())), ref) <= TOL


@pytest.mark.parity
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_decode_tiny(tiny_pair, causal: bool) -> None:
    # tiny has decoder_causal=False; diffusers' `causal or is_causal` still honours causal=True.
    ref_model, ours = tiny_pair
    z = _randn(1, 8, 2, 2, 2, seed=1)
    ref = ref_model.decode(z, causal=causal).sample
    out = _decode(ours, jnp.asarray(z.numpy()), causal=causal)
    assert _err(f"decode tiny ({'causal' if causal else 'non-causal'})", out, ref) <= TOL


@pytest.mark.parity
def test_decode_timestep_conditioned(timestep_pair) -> None:
    # The VAE decode is deterministic given (z, temb): the pipeline's decode_noise_scale mixing
    # happens before decode (``mix_decode_noise``), so per-batch timesteps are compared directly.
    ref_model, ours = timestep_pair
    z, temb = _randn(2, 8, 2, 2, 2, seed=2), np.array([0.05, 0.3], np.float32)
    import torch

    ref = ref_model.decode(z, torch.from_numpy(temb)).sample
    out = _decode(ours, jnp.asarray(z.numpy()), jnp.asarray(temb))
    assert _err("decode timestep-conditioned (B=2)", out, ref) <= TOL


@pytest.mark.parity
def test_encode_odd(odd_pair) -> None:
    ref_model, ours = odd_pair
    x = _randn(1, 3, 9, 64, 64, seed=3)
    ref = ref_model.encode(x).latent_dist.mode()
    assert ref.shape == (1, 8, 3, 2, 2)
    assert (
        _err("encode odd (non-causal, reflect, conv/none downsampling)", _encode(ours, jnp.asarray(x.numpy())), ref)
        <= TOL
    )


@pytest.mark.parity
def test_decode_odd_with_injected_noise(odd_pair, monkeypatch) -> None:
    # diffusers draws the injected noise with torch.randn from torch's global RNG, which JAX cannot
    # reproduce; both sides get the same deterministic [H, W] map instead, so the test covers where
    # and how noise is scaled and added (per channel, broadcast over batch and frames).
    import torch

    import ltx2.vae.video as video

    def pattern(shape: tuple[int, ...]) -> np.ndarray:
        h, w = shape
        return np.sin(0.7 * np.arange(h * w, dtype=np.float32) + h).reshape(h, w)

    ref_model, ours = odd_pair
    z = _randn(1, 8, 3, 2, 2, seed=4)
    monkeypatch.setattr(torch, "randn", lambda shape, **kw: torch.from_numpy(pattern(tuple(shape))))
    ref = ref_model.decode(z).sample
    monkeypatch.setattr(video, "spatial_noise", lambda key, shape, dtype: jnp.asarray(pattern(shape), dtype))
    out = nnx.jit(lambda m, z, k: m.decode(z, key=k))(ours, jnp.asarray(z.numpy()), jax.random.key(0))
    assert _err("decode odd (causal, zeros, conv_in resnet, injected noise)", out, ref) <= TOL


def test_decode_noise_needs_and_uses_key(odd_pair) -> None:
    _, ours = odd_pair
    z = jnp.asarray(np.random.default_rng(5).standard_normal((1, 8, 3, 2, 2)), jnp.float32)
    with pytest.raises(ValueError, match="key"):
        _decode(ours, z)  # raised while tracing, before anything compiles
    a, b = (_decode(ours, z, key=jax.random.key(k)) for k in (0, 1))
    assert np.asarray(a).shape == (1, 3, 9, 32, 32)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(_decode(ours, z, key=jax.random.key(0))))
    assert not np.allclose(np.asarray(a), np.asarray(b))


# ----------------------------------------------------------------------------- latents helpers


def test_latent_normalization_matches_pipeline_formula(tiny_pair) -> None:
    ref_model, ours = tiny_pair
    z = np.random.default_rng(6).standard_normal((2, 8, 2, 3, 3)).astype(np.float32)
    mean = ref_model.latents_mean.numpy().reshape(1, -1, 1, 1, 1)
    std = ref_model.latents_std.numpy().reshape(1, -1, 1, 1, 1)
    scaling = ref_model.config.scaling_factor
    norm = ours.normalize_latents(jnp.asarray(z))
    tol = FP32_ELEMENTWISE  # three float32 ops per element, ours and numpy's
    np.testing.assert_allclose(np.asarray(norm), (z - mean) * scaling / std, rtol=tol, atol=tol)
    # Round trip: six roundings of values up to ~10 (|z - mean| / std, std >= 0.5): 6 * 10 * EPS32 / 2 = 3.6e-6.
    np.testing.assert_allclose(np.asarray(ours.denormalize_latents(norm)), z, rtol=1e-5, atol=1e-5)
    noise, s = np.ones_like(z), np.array([0.0, 0.25], np.float32)
    mixed = np.asarray(mix_decode_noise(jnp.asarray(z), jnp.asarray(noise), jnp.asarray(s)))
    # Two products and a sum; XLA may fuse an FMA where numpy rounds twice, so not bit-equal.
    expect = (1 - s[:, None, None, None, None]) * z + s[:, None, None, None, None] * noise
    np.testing.assert_allclose(mixed, expect, rtol=FP32_ELEMENTWISE, atol=FP32_ELEMENTWISE)


# ----------------------------------------------------------------------------- conversion errors


def _state_dict(cfg: VideoVAEConfig) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in _torch_vae(cfg, 0).state_dict().items()}


@pytest.fixture(scope="module")
def tiny_state_dict() -> dict[str, np.ndarray]:
    return _state_dict(VideoVAEConfig.tiny())


@pytest.mark.parametrize("cfg", [VideoVAEConfig.tiny(), ODD, TIMESTEP], ids=["tiny", "odd", "timestep"])
def test_conversion_maps_every_key(cfg: VideoVAEConfig) -> None:
    sd = _state_dict(cfg)
    model = load(cfg, sd)  # raises on any unmapped key or unfilled parameter
    np.testing.assert_array_equal(np.asarray(model.latents_std[...]), sd["latents_std"])
    w = sd["decoder.conv_out.conv.weight"]  # torch [O, I, kd, kh, kw] -> ours [kd, kh, kw, I, O]
    np.testing.assert_array_equal(np.asarray(model.decoder.conv_out.conv.kernel[...]), w.transpose(2, 3, 4, 1, 0))


def test_conversion_unknown_key_is_named(tiny_state_dict) -> None:
    sd = {**tiny_state_dict, "decoder.up_blocks.0.bogus.weight": np.zeros(3, np.float32)}
    with pytest.raises(KeyError, match=r"decoder\.up_blocks\.0\.bogus\.weight"):
        load(VideoVAEConfig.tiny(), sd)


def test_conversion_missing_key_is_named(tiny_state_dict) -> None:
    sd = {k: v for k, v in tiny_state_dict.items() if k != "decoder.conv_out.conv.bias"}
    with pytest.raises(KeyError, match=r"decoder\.conv_out\.conv\.bias"):
        load(VideoVAEConfig.tiny(), sd)


def test_conversion_wrong_shape_is_named(tiny_state_dict) -> None:
    key = "encoder.down_blocks.1.resnets.0.conv1.conv.weight"
    sd = {**tiny_state_dict, key: np.zeros((16, 16, 3, 3, 1), np.float32)}
    with pytest.raises(ValueError, match=re.escape(key) + ".*shape"):
        load(VideoVAEConfig.tiny(), sd)


def test_conversion_rejects_unknown_config_field() -> None:
    cfg = {f.name: getattr(VideoVAEConfig.tiny(), f.name) for f in dataclasses.fields(VideoVAEConfig)}
    with pytest.raises(ValueError, match="frobnicate"):
        VideoVAEConfig.from_diffusers({**cfg, "frobnicate": 1, "_class_name": "AutoencoderKLLTX2Video"})


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("downsample_type", ("spatial", "sideways", "spatiotemporal", "spatiotemporal")),
        ("upsample_type", ("spatiotemporal", "spatiotemporal")),
        ("layers_per_block", (1, 1, 1, 1)),
        ("patch_size_t", 2),
        ("decoder_spatial_padding_mode", "mirror"),
        ("down_block_types", ("LTX2VideoDownBlock3D",) * 3 + ("Other",)),
        ("block_out_channels", (8, 16, 30, 32)),  # a 2x2x2 space-to-depth cannot make 30 channels
        ("decoder_block_out_channels", (8, 16, 48)),
        ("upsample_factor", (2, 2, 3)),
        ("resnet_norm_eps", 0.0),
        ("dtype", "float64"),
    ],
)
def test_config_errors_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(VideoVAEConfig.tiny(), **{field: value})


def test_conditioning_a_conv_in_resnet_is_rejected() -> None:
    # diffusers hands the raw timestep to an up block's conv_in resnet and fails in forward.
    with pytest.raises(ValueError, match="timestep_conditioning"):
        dataclasses.replace(ODD, decoder_inject_noise=False, timestep_conditioning=True)


def test_presets_and_derived_numbers() -> None:
    big = VideoVAEConfig.ltx2_19b()
    assert (big.decoder_causal, big.spatial_compression, big.temporal_compression) == (False, 32, 8)
    assert big.latent_shape(121, 512, 768) == (128, 16, 16, 24)
    assert VideoVAEConfig(decoder_spatio_temporal_scaling=True).decoder_spatio_temporal_scaling == (True,) * 3
    assert VideoVAEConfig().spatial_compression == 64  # diffusers' (wrong for 2.0) default formula
    for cfg in (VideoVAEConfig.tiny(), VideoVAEConfig.small(), big):
        shapes = nnx.eval_shape(lambda cfg=cfg: VideoVAE(cfg, rngs=nnx.Rngs(0)))
        assert shapes.encoder.conv_out.conv.kernel.shape[-1] == cfg.latent_channels + 1
    with pytest.raises(TypeError, match="VideoVAEConfig"):
        VideoVAE({"latent_channels": 8}, rngs=nnx.Rngs(0))  # type: ignore[arg-type]


def test_params_carry_logical_axes() -> None:
    from ltx2.sharding import logical_axes

    model = nnx.eval_shape(lambda: VideoVAE(TIMESTEP, rngs=nnx.Rngs(0)))
    for path, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Variable) and var.ndim:
            assert var.get_metadata().get("logical_axes") is not None, path
    assert logical_axes(model.encoder.conv_in.conv.kernel) == (None, None, None, "conv_in", "conv_out")


@pytest.mark.parametrize(
    ("stride", "dilation", "groups"),
    [((1, 1, 1), (1, 1, 1), 1), ((2, 1, 2), (1, 1, 1), 1), ((1, 2, 1), (2, 1, 1), 2), ((3, 1, 1), (2, 2, 1), 1)],
)
def test_conv3d_by_time_taps_equals_the_3d_convolution(stride, dilation, groups) -> None:
    """CPU runs 3-D convolutions as a sum of 2-D ones over time taps; strides, dilations and groups
    must land on the same frames as XLA's 3-D op (and as diffusers', which the decode tests check)."""
    from ltx2.vae.conv import _conv, _conv3d_by_time_taps

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(2, 9, 7, 8, 4)).astype(np.float32))
    w = jnp.asarray(rng.normal(size=(3, 3, 2, 4 // groups, 6)).astype(np.float32))
    kw = dict(stride=stride, dilation=dilation, groups=groups)
    want, got = _conv(x, w, **kw), _conv3d_by_time_taps(x, w, **kw)
    assert got.shape == want.shape
    # The same sums of 36 or 72 float32 terms in another order: FP32_KERNEL on the outputs' scale
    # (|want| up to 33; measured 9.5e-6 absolute, 2.9e-7 scaled, the same with XLA held to AVX2).
    scale = max(1.0, float(np.abs(np.asarray(want)).max()))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=FP32_KERNEL * scale)


def test_conv3d_lowers_per_platform() -> None:
    """The time-tap form is CPU-only: lowered for CPU, a 3x3x3 Conv is three 2-D convolutions;
    lowered for another platform (cross-platform lowering, no device needed) it stays one 3-D op."""
    from ltx2.vae.conv import Conv

    conv = Conv(4, 6, (3, 3, 3), rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(conv)
    x = jnp.zeros((1, 5, 8, 8, 4))
    lowered = {
        platform: jax.jit(lambda s, x: nnx.merge(graphdef, s)(x)).trace(state, x).lower(lowering_platforms=(platform,))
        for platform in ("cpu", "tpu")
    }
    texts = {p: low.as_text() for p, low in lowered.items()}
    assert texts["cpu"].count("stablehlo.convolution") == 3 and "[b, 0, 1, 2, f]" not in texts["cpu"]
    assert texts["tpu"].count("stablehlo.convolution") == 1 and "[b, 0, 1, 2, f]" in texts["tpu"]
