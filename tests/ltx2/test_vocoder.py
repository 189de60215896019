"""Vocoders: parity with diffusers' ``LTX2Vocoder`` and ``LTX2VocoderWithBWE`` at tiny random
configs (fp32), conversion errors that name the key, config validation that names the field, and
the release presets' shapes against diffusers (meta device, no weights).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.convert.vocoder import load
from ltx2.vae.vocoder import LTX2Vocoder, LTX2VocoderWithBWE, VocoderConfig, VocoderWithBWEConfig
from tests.tolerances import FP32_MODULE

TOL = FP32_MODULE  # max|ours - ref| / max(1, max|ref|)
_OURS_ONLY = {"sharding", "dtype"}
# Plain snake (no beta), anti-aliased, clamped output, no final bias, two resnet kernels per stage.
SNAKE = VocoderConfig(
    in_channels=32,
    hidden_channels=32,
    upsample_kernel_sizes=(4, 4),
    upsample_factors=(2, 2),
    resnet_kernel_sizes=(3, 5),
    resnet_dilations=((1, 3), (1, 2)),
    act_fn="snake",
    antialias=True,
    final_act_fn="clamp",
    final_bias=False,
)


def _kwargs(cfg: Any) -> dict[str, Any]:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in _OURS_ONLY}


def _randomise(model: Any) -> Any:
    """Snake alpha/beta start at zero in diffusers: give them values so loading them is tested."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith((".alpha", ".beta")):
                p.copy_(0.3 * torch.randn_like(p))
    return model.eval()


def _fill_stft(model: Any, cfg: VocoderWithBWEConfig) -> None:
    """The STFT / mel buffers are zeros at init: a Hann-windowed DFT basis and a positive random
    filterbank make the bandwidth extender's input meaningful."""
    import torch

    n, f = cfg.filter_length, cfg.filter_length // 2 + 1
    t, k = np.arange(n), np.arange(f)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * t / n)
    basis = np.concatenate([np.cos(2 * np.pi * k * t / n) * window, -np.sin(2 * np.pi * k * t / n) * window])
    with torch.no_grad():
        model.mel_stft.stft_fn.forward_basis.copy_(torch.tensor(basis[:, None, :], dtype=torch.float32))
        model.mel_stft.mel_basis.uniform_(0.0, 2.0 / f)


def _torch_vocoder(cfg: VocoderConfig, seed: int) -> Any:
    import torch
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder as TorchVocoder

    torch.manual_seed(seed)
    return _randomise(TorchVocoder(**_kwargs(cfg)))


def _run(fn: Any, model: nnx.Module, *args: jax.Array) -> Any:
    """``fn(model, *args)`` as one compiled program. XLA:CPU's LLVM passes dominate compile time
    for these tiny nets on a busy 2-core machine, so they are turned down; the HLO and its fp32
    arithmetic are unchanged (parity holds at the default level too)."""
    graph, state = nnx.split(model)
    lowered = jax.jit(lambda s, *a: fn(nnx.merge(graph, s), *a)).lower(state, *args)
    return lowered.compile({"xla_backend_optimization_level": 0})(state, *args)


def _check(ref: Any, ours: nnx.Module, mel_shape: tuple[int, ...], out_shape: tuple[int, ...], label: str) -> None:
    import torch

    mel = torch.randn(*mel_shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expect = ref(mel).numpy()
    got = np.asarray(_run(lambda m, x: m(x), ours, jnp.asarray(mel.numpy())))
    assert got.shape == expect.shape == out_shape
    err = float(np.max(np.abs(got - expect)) / max(1.0, float(np.max(np.abs(expect)))))
    print(f"{label} parity error: {err:.2e}")
    assert err <= TOL


@pytest.fixture(scope="module")
def tiny_pair() -> tuple[Any, LTX2Vocoder]:
    from ltx2.convert import from_diffusers

    ref = _torch_vocoder(VocoderConfig.tiny(), 0)
    return ref, from_diffusers(ref)


@pytest.mark.parity
def test_tiny_vocoder_parity(tiny_pair: tuple[Any, LTX2Vocoder]) -> None:
    """``[B, 2, 33, 16] -> [B, 2, 33 * 240]``: leaky_relu(0.1) stages, final LeakyReLU(0.01), tanh."""
    ref, ours = tiny_pair
    _check(ref, ours, (2, 2, 33, 16), (2, 2, 33 * 240), "vocoder tiny")


@pytest.mark.parity
def test_sharded_vocoder_parity(tiny_pair: tuple[Any, LTX2Vocoder]) -> None:
    """Placed by a strategy on a mesh, activations constrained (batch over ``data``): same numbers."""
    from ltx2 import sharding

    ref, _ = tiny_pair
    cfg = dataclasses.replace(VocoderConfig.tiny(), sharding="ironwood")
    mesh = sharding.build_mesh({"data": 2, "tensor": 4})
    ours = sharding.shard_module(load(cfg, ref.state_dict()), cfg.sharding, mesh)
    with jax.set_mesh(mesh):
        _check(ref, ours, (2, 2, 9, 16), (2, 2, 9 * 240), "vocoder tiny sharded (ironwood)")


@pytest.mark.parity
def test_odd_halving_vocoder_parity() -> None:
    """hidden_channels 40 halves as diffusers does, by integer division: 20, 10, 5, 2, 1."""
    from ltx2.convert import from_diffusers

    ref = _torch_vocoder(dataclasses.replace(VocoderConfig.tiny(), hidden_channels=40), 5)
    assert [up.out_channels for up in ref.upsamplers] == [20, 10, 5, 2, 1]
    _check(ref, from_diffusers(ref), (1, 2, 9, 16), (1, 2, 9 * 240), "vocoder odd halving")


@pytest.mark.parametrize("hidden", [31, 32])
def test_accepts_what_diffusers_runs(hidden: int) -> None:
    """Five halvings: 32 channels end at 1 and run; 31 end at 0 channels, which diffusers builds
    but cannot run (its conv rejects an empty weight), so our config rejects it up front."""
    import torch
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder as TorchVocoder

    cfg = dict(_kwargs(VocoderConfig.tiny()), hidden_channels=hidden)
    ref = TorchVocoder(**cfg)
    runs = True
    try:
        with torch.no_grad():
            ref(torch.zeros(1, 2, 3, 16))
    except RuntimeError:
        runs = False
    assert runs == (hidden >= 32)
    if runs:
        assert VocoderConfig.from_diffusers(cfg).hidden_channels == hidden
    else:
        with pytest.raises(ValueError, match=f"VocoderConfig.hidden_channels={hidden}"):
            VocoderConfig.from_diffusers(cfg)


@pytest.mark.parity
def test_snake_antialias_vocoder_parity() -> None:
    from ltx2.convert import from_diffusers

    ref = _torch_vocoder(SNAKE, 3)
    _check(ref, from_diffusers(ref), (1, 2, 9, 16), (1, 2, 9 * 4), "vocoder snake+antialias")


# A 3-stage stage-1 generator (x120 per frame): an odd T is not a whole number of STFT hops (80).
ODD_HOPS = dataclasses.replace(
    VocoderWithBWEConfig.tiny(), hidden_channels=32, upsample_factors=(5, 3, 8), upsample_kernel_sizes=(11, 5, 16)
)


# Both generators with channels that do not halve cleanly: 72 -> 36, 18, 9, 4, 2, 1 and 36 -> 18, 9, 4, 2, 1.
ODD_HALVING = dataclasses.replace(VocoderWithBWEConfig.tiny(), hidden_channels=72, bwe_hidden_channels=36)


@pytest.mark.parity
@pytest.mark.parametrize(
    ("cfg", "frames", "samples"),
    [(VocoderWithBWEConfig.tiny(), 6, 6 * 480), (ODD_HOPS, 5, 5 * 360), (ODD_HALVING, 3, 3 * 480)],
    ids=["tiny", "padded-to-hops", "odd-halving"],
)
def test_bwe_vocoder_parity(cfg: VocoderWithBWEConfig, frames: int, samples: int) -> None:
    """LTX-2.3 layout: snakebeta generator -> causal log-mel -> BWE generator (x240) added to the x3
    Hann-resampled waveform, clamped: ``[B, 2, T, 16] -> [B, 2, T * prod(upsample_factors) * 3]``."""
    import torch
    from diffusers.pipelines.ltx2.vocoder import LTX2VocoderWithBWE as TorchBWE

    from ltx2.convert import from_diffusers

    torch.manual_seed(4)
    ref = _randomise(TorchBWE(**_kwargs(cfg)))
    _fill_stft(ref, cfg)
    ours = from_diffusers(ref)
    assert isinstance(ours, LTX2VocoderWithBWE)
    label = f"vocoder with BWE ({cfg.hidden_channels}/{cfg.bwe_hidden_channels} channels, {frames} frames)"
    _check(ref, ours, (1, 2, frames, 16), (1, 2, samples), label)


# ----------------------------------------------------------------------------- conversion


def test_conversion_rejects_unknown_key(tiny_pair: tuple[Any, LTX2Vocoder]) -> None:
    sd = dict(tiny_pair[0].state_dict())
    sd["resnets.0.convs3.0.weight"] = sd["resnets.0.convs1.0.weight"]
    with pytest.raises(KeyError, match=r"resnets\.0\.convs3\.0\.weight"):
        load(VocoderConfig.tiny(), sd)


def test_conversion_rejects_missing_key(tiny_pair: tuple[Any, LTX2Vocoder]) -> None:
    sd = dict(tiny_pair[0].state_dict())
    del sd["upsamplers.3.bias"]
    with pytest.raises(KeyError, match=r"upsamplers\.3\.bias"):
        load(VocoderConfig.tiny(), sd)


def test_conversion_rejects_wrong_shape(tiny_pair: tuple[Any, LTX2Vocoder]) -> None:
    sd = dict(tiny_pair[0].state_dict())
    sd["conv_out.weight"] = sd["conv_out.weight"][:1]
    with pytest.raises(ValueError, match=r"'conv_out\.weight'"):
        load(VocoderConfig.tiny(), sd)


def test_conversion_rejects_other_modules() -> None:
    from ltx2.convert.vocoder import from_diffusers

    with pytest.raises(TypeError, match="not object"):
        from_diffusers(object())


# ----------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("cls", "change", "field"),
    [
        (VocoderConfig, {"act_fn": "relu"}, "VocoderConfig.act_fn='relu'"),
        (VocoderConfig, {"upsample_factors": (6, 5)}, "VocoderConfig.upsample_kernel_sizes="),
        (VocoderConfig, {"hidden_channels": 16}, "VocoderConfig.hidden_channels=16"),
        (VocoderConfig, {"resnet_dilations": ()}, "VocoderConfig.resnet_dilations=()"),
        (VocoderConfig, {"antialias": True}, "VocoderConfig.antialias=True"),
        (VocoderConfig, {"final_act_fn": "sigmoid"}, "VocoderConfig.final_act_fn='sigmoid'"),
        (VocoderWithBWEConfig, {"bwe_hidden_channels": 16}, "VocoderWithBWEConfig.bwe_hidden_channels=16"),
        (VocoderWithBWEConfig, {"bwe_in_channels": 64}, "VocoderWithBWEConfig.bwe_in_channels=64"),
        (VocoderWithBWEConfig, {"output_sampling_rate": 44100}, "VocoderWithBWEConfig.output_sampling_rate"),
        (VocoderWithBWEConfig, {"hop_length": 112}, "VocoderWithBWEConfig.bwe_upsample_factors="),
        (VocoderWithBWEConfig, {"sharding": "nope"}, "VocoderWithBWEConfig.sharding='nope'"),
    ],
)
def test_config_validation_names_the_field(cls: Any, change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field.replace("(", r"\(").replace(")", r"\)")):
        dataclasses.replace(cls.tiny(), **change)


def test_from_diffusers_config_freezes_lists() -> None:
    config = {**_kwargs(VocoderConfig.tiny()), "resnet_dilations": [[1, 3, 5]], "_class_name": "LTX2Vocoder"}
    assert VocoderConfig.from_diffusers(config) == VocoderConfig.tiny()


# ----------------------------------------------------------------------------- release presets


@pytest.mark.parametrize("name", ["LTX2Vocoder", "LTX2VocoderWithBWE"])
def test_defaults_equal_diffusers(name: str) -> None:
    """Field names and defaults are diffusers' (so ``ltx2_3_22b()`` is the 2.3 release config)."""
    import inspect

    from diffusers.pipelines.ltx2 import vocoder as torch_vocoder

    ours: Any = VocoderConfig if name == "LTX2Vocoder" else VocoderWithBWEConfig
    params = inspect.signature(getattr(torch_vocoder, name).__init__).parameters
    defaults = {k: p.default for k, p in params.items() if k != "self"}
    assert set(defaults) == {f.name for f in dataclasses.fields(ours)} - _OURS_ONLY
    assert ours.from_diffusers(defaults) == ours()


def test_release_preset_matches_diffusers_shapes() -> None:
    """2.0's vocoder builds abstractly with diffusers' exact parameter count (55.6 M), and every
    parameter and buffer carries logical axis names."""
    import torch
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder as TorchVocoder

    cfg = VocoderConfig.ltx2_19b()
    with torch.device("meta"):
        ref = TorchVocoder(**_kwargs(cfg))
    model = nnx.eval_shape(lambda: LTX2Vocoder(cfg, rngs=nnx.Rngs(0)))
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert sum(int(np.prod(x.shape)) for x in leaves) == sum(p.numel() for p in ref.parameters())
    for path, var in nnx.iter_graph(model):
        if isinstance(var, nnx.Variable):
            names = var.get_metadata().get("logical_axes")
            assert names is not None and len(names) == var.ndim, path
