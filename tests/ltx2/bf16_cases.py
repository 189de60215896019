"""The components of the bfloat16 accuracy suite: each a seeded diffusers module, its inputs, and how
both sides run it, measured by :func:`measure` (see ``tests/accuracy.py`` for what "bf16" means and
the statistic).

Every seed draws fresh weights (the parity tests' builders, seeded) and fresh inputs. Ours is
converted from the diffusers module after its ``.to(torch.bfloat16)`` (the same rounded weights) with
``dtype`` (and ``param_dtype`` where the config has one) ``"bfloat16"``; one compiled program serves
every seed (the weights are its arguments).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tests.accuracy import Comparison, Deviation, compare, deviation

# LLVM's passes dominate compile time for tiny nets on a busy 2-core host; the HLO, and so where
# each bfloat16 rounding happens, is the same at any backend level.
COMPILE = {"xla_backend_optimization_level": 0}


@dataclasses.dataclass(frozen=True, eq=False)
class Component:
    """``build(seed)`` a diffusers module; ``inputs(seed)`` float32 arrays by name (``bf16`` names
    are given to both sides in bfloat16, the rest as they are); ``theirs(module, tensors)`` and
    ``ours(model, arrays)`` the outputs by name; ``knobs``: what ours is converted with."""

    name: str
    build: Callable[[int], Any]
    inputs: Callable[[int], dict[str, np.ndarray]]
    theirs: Callable[[Any, dict[str, Any]], dict[str, Any]]
    ours: Callable[[Any, dict[str, jax.Array]], dict[str, jax.Array]]
    bf16: tuple[str, ...]
    knobs: dict[str, Any] = dataclasses.field(default_factory=dict)

    origin: Component | None = None  # the variant's base component (the same diffusers side)

    @property
    def base(self) -> Component:
        return self.origin or self

    def with_knobs(self, name: str, **knobs: Any) -> Component:
        """The same diffusers side, ours converted with more ``knobs``."""
        return dataclasses.replace(self, name=f"{self.name} {name}", knobs={**self.knobs, **knobs}, origin=self.base)


def _torch_outputs(component: Component, module: Any, arrays: dict[str, np.ndarray], bf16: bool) -> dict:
    import torch

    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    if bf16:
        tensors = {k: t.to(torch.bfloat16) if k in component.bf16 else t for k, t in tensors.items()}
    with torch.no_grad():
        out = component.theirs(module, tensors)
    return {k: v.float().numpy() for k, v in out.items()}


@functools.cache
def _reference(component: Component, seed: int) -> tuple[dict, dict, dict, Any]:
    """One seed's float32 inputs, diffusers' float32 and bfloat16 outputs, and the module with its
    weights rounded to bfloat16 (float32 storage), cached: every knob variant reuses them."""
    import torch

    module = component.build(seed)
    arrays = component.inputs(seed)
    ref = _torch_outputs(component, module, arrays, bf16=False)
    theirs_module = module.to(torch.bfloat16)
    theirs = _torch_outputs(component, theirs_module, arrays, bf16=True)
    return arrays, ref, theirs, theirs_module.float()


def measure(
    component: Component,
    seeds: Sequence[int],
    convert: Callable[..., Any] | None = None,
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> list[Comparison]:
    """Per output, ours and diffusers' bfloat16 deviations from diffusers' float32, seed by seed.
    ``convert(rounded_torch_module, **knobs)`` builds ours (default ``ltx2.convert.from_diffusers``);
    ``context`` is entered around each call (a mesh for sharded variants)."""
    from ltx2.convert import from_diffusers

    convert = convert or from_diffusers
    fn = jax.jit(lambda s, a, g: component.ours(nnx.merge(g, s), a), static_argnums=2, compiler_options=COMPILE)
    ours_dev: dict[str, list[Deviation]] = {}
    theirs_dev: dict[str, list[Deviation]] = {}
    for seed in seeds:
        arrays, ref, theirs, rounded = _reference(component.base, seed)
        graph, state = nnx.split(convert(rounded, **component.knobs))
        args = {k: jnp.asarray(v, jnp.bfloat16 if k in component.bf16 else v.dtype) for k, v in arrays.items()}
        with context():
            out = fn(state, args, graph)
        for key, want in ref.items():
            ours_dev.setdefault(key, []).append(deviation(np.asarray(out[key], np.float32), want))
            theirs_dev.setdefault(key, []).append(deviation(theirs[key], want))
    return [compare(f"{component.name} {k}", ours_dev[k], theirs_dev[k]) for k in ref]


# ----------------------------------------------------------------------------- transformer


@functools.cache
def transformer(layers: int, config: str = "ltx2.0", case: str = "ltx2.0-split") -> Component:
    """The tiny DiT (tests/ltx2/test_transformer.py's configs) at ``layers`` blocks."""
    from tests.ltx2 import test_transformer as tt

    cfg = tt.CONFIGS[config].replace(num_layers=layers)
    the_case = tt.CASES[case]
    static = tt._static(the_case)

    def build(seed: int) -> Any:
        import torch
        from diffusers import LTX2VideoTransformer3DModel

        from ltx2.config import KNOBS

        torch.manual_seed(seed)
        kwargs = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in set(KNOBS)}
        model = LTX2VideoTransformer3DModel(**kwargs).eval()
        tt._randomise(model, seed)
        return model

    def inputs(seed: int) -> dict[str, np.ndarray]:
        arrays = tt._inputs(the_case, cfg)
        rng = np.random.default_rng(10_000 + seed)
        for key in ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "audio_encoder_hidden_states"):
            arrays[key] = rng.normal(size=arrays[key].shape).astype(np.float32)
        return arrays

    def theirs(module: Any, t: dict[str, Any]) -> dict[str, Any]:
        video, audio = module(**t, **static, return_dict=False)
        return {"video": video, "audio": audio}

    def ours(model: Any, a: dict[str, jax.Array]) -> dict[str, jax.Array]:
        video, audio = model(**a, **static)
        return {"video": video, "audio": audio}

    bf16 = ("hidden_states", "audio_hidden_states", "encoder_hidden_states", "audio_encoder_hidden_states")
    knobs = {"dtype": "bfloat16", "param_dtype": "bfloat16"}
    return Component(f"transformer x{layers} {case}", build, inputs, theirs, ours, bf16, knobs)


# ----------------------------------------------------------------------------- text connectors


@functools.cache
def connectors() -> Component:
    from ltx2.text.connectors import ConnectorsConfig
    from tests.ltx2 import test_connectors as tc

    cfg = ConnectorsConfig.tiny()

    def build(seed: int) -> Any:
        from diffusers.pipelines.ltx2 import LTX2TextConnectors

        return tc.build_reference(LTX2TextConnectors, cfg, seed)

    def inputs(seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(20_000 + seed)
        x = rng.normal(size=(2, 16, cfg.caption_channels, cfg.text_proj_in_factor)).astype(np.float32)
        x *= rng.uniform(0.5, 4.0, size=(1, 1, 1, cfg.text_proj_in_factor)).astype(np.float32)
        mask = np.ones((2, 16), np.int32)
        mask[0, :5], mask[1, :11] = 0, 0
        return {"x": x.reshape(2, 16, -1), "mask": mask}

    def theirs(module: Any, t: dict[str, Any]) -> dict[str, Any]:
        video, audio, _ = module(t["x"], t["mask"].long())
        return {"video": video, "audio": audio}

    def ours(model: Any, a: dict[str, jax.Array]) -> dict[str, jax.Array]:
        video, audio, _ = model(a["x"], a["mask"])
        return {"video": video, "audio": audio}

    return Component(
        "connectors", build, inputs, theirs, ours, ("x",), {"dtype": "bfloat16", "param_dtype": "bfloat16"}
    )


# ----------------------------------------------------------------------------- decoders, upsampler


def _normal(seed: int, offset: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(offset + seed).standard_normal(shape).astype(np.float32)


@functools.cache
def video_decode() -> Component:
    from ltx2.vae.video import VideoVAEConfig
    from tests.ltx2 import test_video_vae as tv

    cfg = VideoVAEConfig.tiny()
    return Component(
        "video VAE decode",
        lambda seed: tv._torch_vae(cfg, seed),
        lambda seed: {"z": _normal(seed, 30_000, (1, cfg.latent_channels, 2, 2, 2))},
        lambda m, t: {"video": m.decode(t["z"]).sample},
        lambda m, a: {"video": m.decode(a["z"], None, causal=None, key=None)},
        ("z",),
        {"dtype": "bfloat16"},
    )


@functools.cache
def audio_decode() -> Component:
    from ltx2.vae.audio import AudioVAEConfig
    from tests.ltx2 import test_audio_vae as ta

    cfg = AudioVAEConfig.tiny()
    return Component(
        "audio VAE decode",
        lambda seed: ta._torch_vae(cfg, seed),
        lambda seed: {"z": _normal(seed, 40_000, (2, cfg.latent_channels, 6, cfg.mel_bins // 4))},
        lambda m, t: {"mel": m.decode(t["z"]).sample},
        lambda m, a: {"mel": m.decode(a["z"])},
        ("z",),
        {"dtype": "bfloat16"},
    )


@functools.cache
def vocoder() -> Component:
    from ltx2.vae.vocoder_config import VocoderConfig
    from tests.ltx2 import test_vocoder as tv

    cfg = VocoderConfig.tiny()
    return Component(
        "vocoder",
        lambda seed: tv._torch_vocoder(cfg, seed),
        lambda seed: {"mel": _normal(seed, 50_000, (1, 2, 33, cfg.in_channels // 2))},
        lambda m, t: {"audio": m(t["mel"])},
        lambda m, a: {"audio": m(a["mel"])},
        ("mel",),
        {"dtype": "bfloat16"},
    )


@functools.cache
def upsampler() -> Component:
    from ltx2.vae.upsampler import LatentUpsamplerConfig
    from tests.ltx2 import test_upsampler as tu

    cfg = LatentUpsamplerConfig.tiny()
    return Component(
        "upsampler",
        lambda seed: tu._torch_upsampler(cfg, seed),
        lambda seed: {"x": _normal(seed, 60_000, (2, cfg.in_channels, 3, 4, 4))},
        lambda m, t: {"latents": m(t["x"])},
        lambda m, a: {"latents": m(a["x"])},
        ("x",),
        {"dtype": "bfloat16"},
    )


COMPONENTS: dict[str, Callable[[], Component]] = {
    "connectors": connectors,
    "video_decode": video_decode,
    "audio_decode": audio_decode,
    "vocoder": vocoder,
    "upsampler": upsampler,
}
