"""Audio VAE: parity with diffusers' ``AutoencoderKLLTX2Audio`` at tiny random configs (fp32),
conversion errors that name the key, config validation that names the field, the packed-latent
normalisation, and the release preset's shapes against diffusers (meta device, no weights).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.convert.audio_vae import load
from ltx2.vae.audio import AudioVAEConfig, AutoencoderKLLTX2Audio, pack_latents, unpack_latents
from tests.tolerances import FP32_ELEMENTWISE, FP32_MODULE

TOL = FP32_MODULE  # max|ours - ref| / max(1, max|ref|)
_OURS_ONLY = {"sharding", "dtype"}

# The non-default paths, kept small: width-causal convs, and GroupNorm + attention in the levels
# and the mid blocks (non-causal, as diffusers requires for GroupNorm).
WIDTH = dataclasses.replace(AudioVAEConfig.tiny(), ch_mult=(1, 2), num_res_blocks=1, causality_axis="width")
GROUP_ATTN = dataclasses.replace(
    AudioVAEConfig.tiny(),
    base_channels=32,
    ch_mult=(1, 2),
    num_res_blocks=1,
    norm_type="group",
    causality_axis="none",
    attn_resolutions=(8,),
    mid_block_add_attention=True,
)


def _kwargs(cfg: AudioVAEConfig) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _OURS_ONLY}


def _torch_vae(cfg: AudioVAEConfig, seed: int) -> Any:
    """diffusers' audio VAE with random latents mean/std and non-trivial GroupNorm affines."""
    import torch
    from diffusers import AutoencoderKLLTX2Audio as TorchAudioVAE

    torch.manual_seed(seed)
    model = TorchAudioVAE(**_kwargs(cfg)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".norm" in name:
                p.add_(0.1 * torch.randn_like(p))
        model.latents_mean.normal_()
        model.latents_std.uniform_(0.5, 2.0)
    return model


def _run(fn: Any, model: nnx.Module, *args: jax.Array) -> Any:
    """``fn(model, *args)`` as one compiled program. XLA:CPU's LLVM passes dominate compile time
    for these tiny nets on a busy 2-core machine, so they are turned down; the HLO and its fp32
    arithmetic are unchanged (parity holds at the default level too)."""
    graph, state = nnx.split(model)
    lowered = jax.jit(lambda s, *a: fn(nnx.merge(graph, s), *a)).lower(state, *args)
    return lowered.compile({"xla_backend_optimization_level": 0})(state, *args)


def _err(ours: Any, ref: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(ours) - ref)) / max(1.0, float(np.max(np.abs(ref)))))


@pytest.fixture(scope="module")
def tiny_pair() -> tuple[Any, AutoencoderKLLTX2Audio]:
    from ltx2.convert import from_diffusers

    ref = _torch_vae(AudioVAEConfig.tiny(), 0)
    return ref, from_diffusers(ref)


def _round_trip(model: AutoencoderKLLTX2Audio, mel: jax.Array, z: jax.Array) -> tuple[jax.Array, ...]:
    mean, logvar = model.encode_distribution(mel)
    return mean, logvar, model.decode(z)


def _check_parity(ref: Any, ours: AutoencoderKLLTX2Audio, cfg: AudioVAEConfig, label: str) -> None:
    import torch

    gen = torch.Generator().manual_seed(1)
    mel = torch.randn(2, cfg.in_channels, 33, cfg.mel_bins, generator=gen)
    z = torch.randn(2, cfg.latent_channels, 6, cfg.mel_bins // 4, generator=gen)
    with torch.no_grad():
        dist = ref.encode(mel).latent_dist
        ref_mean, ref_logvar = dist.mode().numpy(), dist.logvar.numpy()
        ref_dec = ref.decode(z).sample.numpy()
    mean, logvar, dec = _run(_round_trip, ours, jnp.asarray(mel.numpy()), jnp.asarray(z.numpy()))
    assert mean.shape == ref_mean.shape and dec.shape == ref_dec.shape
    if cfg == AudioVAEConfig.tiny():  # 33 mel frames -> 9 latent frames; 6 latent frames -> 21 mel frames
        assert mean.shape == (2, 4, 9, 4) and dec.shape == (2, 2, 21, 16)
    errs = {"encode": _err(mean, ref_mean), "logvar": _err(logvar, ref_logvar), "decode": _err(dec, ref_dec)}
    print(f"audio VAE {label} parity errors: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items()))
    assert max(errs.values()) <= TOL, errs


@pytest.mark.parity
def test_tiny_encode_decode_parity(tiny_pair: tuple[Any, AutoencoderKLLTX2Audio]) -> None:
    ref, ours = tiny_pair
    _check_parity(ref, ours, AudioVAEConfig.tiny(), "tiny")


@pytest.mark.parity
@pytest.mark.parametrize("cfg", [WIDTH, GROUP_ATTN], ids=["width-causal", "group-norm+attention"])
def test_variant_parity(cfg: AudioVAEConfig) -> None:
    from ltx2.convert import from_diffusers

    ref = _torch_vae(cfg, 2)
    _check_parity(ref, from_diffusers(ref), cfg, cfg.causality_axis + "/" + cfg.norm_type)


@pytest.mark.parity
def test_sharded_parity(tiny_pair: tuple[Any, AutoencoderKLLTX2Audio]) -> None:
    """Under a mesh, with parameters placed by a strategy and activations constrained (batch over
    ``data``), the numbers do not change."""
    from ltx2 import sharding

    ref, _ = tiny_pair
    cfg = dataclasses.replace(AudioVAEConfig.tiny(), sharding="ironwood")
    mesh = sharding.build_mesh({"data": 2, "tensor": 4})
    ours = sharding.shard_module(load(cfg, ref.state_dict()), cfg.sharding, mesh)
    with jax.set_mesh(mesh):
        _check_parity(ref, ours, cfg, "tiny sharded (ironwood, data=2 x tensor=4)")


def test_buffers_and_packed_normalisation(tiny_pair: tuple[Any, AutoencoderKLLTX2Audio]) -> None:
    """latents_mean/std load, and (de)normalise *packed* latents per feature like the pipeline."""
    ref, ours = tiny_pair
    mean, std = ref.latents_mean.numpy(), ref.latents_std.numpy()
    np.testing.assert_array_equal(np.asarray(ours.latents_mean[...]), mean)
    z = np.random.default_rng(0).normal(size=(2, 4, 5, 4)).astype(np.float32)
    packed = pack_latents(jnp.asarray(z))
    expect = np.transpose(z, (0, 2, 1, 3)).reshape(2, 5, 16)  # [B, C, A, M'] -> [B, A, C*M']
    np.testing.assert_array_equal(np.asarray(packed), expect)
    normalized = ours.normalize_packed(packed)  # two float32 ops per element, ours and numpy's
    np.testing.assert_allclose(np.asarray(normalized), (expect - mean) / std, rtol=FP32_ELEMENTWISE)
    back = unpack_latents(ours.denormalize_packed(normalized), 4)
    # Round trip: four roundings of values up to ~10 (|z - mean| / std, std >= 0.5): 4 * 10 * EPS32 / 2 = 2.4e-6.
    np.testing.assert_allclose(np.asarray(back), z, rtol=1e-5, atol=1e-5)


def test_packed_normalisation_needs_matching_base_channels() -> None:
    cfg = dataclasses.replace(AudioVAEConfig.tiny(), base_channels=32)
    model = nnx.eval_shape(lambda: AutoencoderKLLTX2Audio(cfg, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match=r"base_channels=32 must equal latent_channels\*mel_bins/4=16"):
        model.normalize_packed(jnp.zeros((1, 3, 16)))


# ----------------------------------------------------------------------------- conversion


def test_conversion_rejects_unknown_key(tiny_pair: tuple[Any, AutoencoderKLLTX2Audio]) -> None:
    sd = dict(tiny_pair[0].state_dict())
    sd["encoder.down.0.block.0.temb_proj.weight"] = sd["encoder.conv_in.conv.bias"]
    with pytest.raises(KeyError, match=r"encoder\.down\.0\.block\.0\.temb_proj\.weight"):
        load(AudioVAEConfig.tiny(), sd)


def test_conversion_rejects_missing_key(tiny_pair: tuple[Any, AutoencoderKLLTX2Audio]) -> None:
    sd = dict(tiny_pair[0].state_dict())
    del sd["decoder.up.1.block.0.nin_shortcut.conv.bias"]
    with pytest.raises(KeyError, match=r"decoder\.up\.1\.block\.0\.nin_shortcut\.conv\.bias"):
        load(AudioVAEConfig.tiny(), sd)


def test_conversion_rejects_wrong_shape(tiny_pair: tuple[Any, AutoencoderKLLTX2Audio]) -> None:
    sd = dict(tiny_pair[0].state_dict())
    sd["latents_std"] = sd["latents_std"][:8]
    with pytest.raises(ValueError, match=r"'latents_std'.*\(8,\)"):
        load(AudioVAEConfig.tiny(), sd)


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"norm_type": "batch"}, "norm_type='batch'"),
        ({"causality_axis": "time"}, "causality_axis='time'"),
        ({"norm_type": "group", "base_channels": 32}, "causality_axis='height'"),
        ({"mel_bins": 18}, "mel_bins=18"),
        ({"ch_mult": ()}, "ch_mult=()"),
        ({"latent_channels": 0}, "latent_channels=0"),
        ({"sharding": "nope"}, "sharding='nope'"),
        ({"dtype": "int8"}, "dtype='int8'"),
    ],
)
def test_config_validation_names_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match="AudioVAEConfig." + field.replace("(", r"\(").replace(")", r"\)")):
        dataclasses.replace(AudioVAEConfig.tiny(), **change)


def test_from_diffusers_config_rejects_unknown_keys() -> None:
    config = {**_kwargs(AudioVAEConfig.tiny()), "_class_name": "AutoencoderKLLTX2Audio", "hop": 3}
    with pytest.raises(ValueError, match=r"unknown diffusers config keys \['hop'\]"):
        AudioVAEConfig.from_diffusers(config)


def test_constructor_rejects_other_configs() -> None:
    with pytest.raises(TypeError, match="AudioVAEConfig"):
        AutoencoderKLLTX2Audio(object(), rngs=nnx.Rngs(0))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- release preset


def test_defaults_equal_diffusers() -> None:
    """Field names and defaults are diffusers' (the release config for 2.0, 2.3 and 2.5)."""
    import inspect

    from diffusers import AutoencoderKLLTX2Audio as TorchAudioVAE

    params = inspect.signature(TorchAudioVAE.__init__).parameters
    defaults = {k: p.default for k, p in params.items() if k != "self"}
    assert set(defaults) == {f.name for f in dataclasses.fields(AudioVAEConfig)} - _OURS_ONLY
    assert AudioVAEConfig.from_diffusers(defaults) == AudioVAEConfig.ltx2_19b()


def test_release_preset_matches_diffusers_shapes() -> None:
    """``ltx2_19b()`` builds abstractly, tags every parameter with logical axes, and has exactly
    diffusers' parameter count (53.2 M) and state-dict entry count."""
    import torch
    from diffusers import AutoencoderKLLTX2Audio as TorchAudioVAE

    cfg = AudioVAEConfig.ltx2_19b()
    with torch.device("meta"):
        ref = TorchAudioVAE(**_kwargs(cfg))
    model = nnx.eval_shape(lambda: AutoencoderKLLTX2Audio(cfg, rngs=nnx.Rngs(0)))
    params = nnx.state(model, nnx.Param)
    leaves = jax.tree.leaves(params)
    assert sum(int(np.prod(x.shape)) for x in leaves) == sum(p.numel() for p in ref.parameters())
    assert len(leaves) + 2 == len(ref.state_dict())  # + latents_mean/std buffers
    for path, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Variable):
            names = var.get_metadata().get("logical_axes")
            assert names is not None and len(names) == var.ndim, path
