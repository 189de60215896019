"""Every sharding strategy on 8 simulated devices (mesh fsdp=2 x context=2 x tensor=2): the
denoising step and the decoders compile, run and give the ``replicated`` numbers; the compiled
HLO of one transformer block shows what each layout costs in collectives.

Equality metric: ``max|sharded - replicated| / max(1, max|replicated|)`` in float32
(``tests/tolerances.py``). The math is identical; a sharded contraction only changes the order of
fp32 partial sums (error ~ sqrt(K) * 6e-8 for K-term sums, K <= 2^12 here: ~4e-6 worst case).
The denoising step reorders only its sharded contractions: FP32_KERNEL (9.5e-8 seen). The
decoders are whole conv stacks whose every layer may reorder its sums under a layout: FP32_MODULE
(2.2e-6 seen with XLA held to AVX2, 1.7e-6 at AVX-512).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh

from harness.metrics.hlo import collective_stats, parse
from ltx2 import sharding
from ltx2.config import TransformerConfig
from ltx2.rope import av_rope, prepare_audio_coords, prepare_video_coords
from ltx2.scheduler import step
from ltx2.transformer import ACTIVATION, Block, BlockInputs, LTX2Transformer, StreamInputs
from ltx2.vae import AudioVAEConfig, AutoencoderKLLTX2Audio, LTX2Vocoder, VideoVAE, VideoVAEConfig, VocoderConfig
from tests.tolerances import FP32_KERNEL, FP32_MODULE

TOL = FP32_KERNEL  # the denoising step (module docstring)
STRATEGIES = ("replicated", "naive", "context", "trillium", "ironwood")
MESH = {"fsdp": 2, "context": 2, "tensor": 2}
# Same HLO, less LLVM work (as in test_transformer): the layouts and collectives are what we test.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
TEXT = ("activation_batch", "activation_text_length", "activation_embed")


def _error(ours: Any, ref: Any) -> float:
    ours, ref = np.asarray(ours, np.float32), np.asarray(ref, np.float32)
    assert ours.shape == ref.shape
    return float(np.abs(ours - ref).max() / max(1.0, np.abs(ref).max()))


@pytest.fixture(scope="module")
def mesh() -> Mesh:
    return sharding.build_mesh(MESH)


def _compile_and_run(fn: Callable[..., Any], *args: Any) -> Any:
    return _compiled_and_run(fn, *args)[0]


def _compiled_and_run(fn: Callable[..., Any], *args: Any) -> tuple[Any, str]:
    """``fn(*args)`` and the optimised HLO text of the program that computed it."""
    compiled = jax.jit(fn).lower(*args).compile(FAST_COMPILE)
    return compiled(*args), compiled.as_text()


def _build(make: Callable[[], nnx.Module], weights: nnx.State | None = None) -> nnx.Module:
    """The module ``make`` builds, with ``weights`` if given, else its own init run as one
    FAST_COMPILE program (eager construction compiles an RNG kernel per parameter shape: ~100 s
    for the tiny video VAE on 2 busy cores). Strategies only change static config, so every
    strategy reuses the replicated module's weights."""
    graphdef, _ = nnx.split(nnx.eval_shape(make))
    if weights is None:
        weights = jax.jit(lambda: nnx.state(make())).lower().compile(FAST_COMPILE)()
    return nnx.merge(graphdef, jax.tree.map(lambda a: a, weights))


def _place(module: nnx.Module, strategy: str, mesh: Mesh | None) -> tuple[nnx.GraphDef, nnx.State]:
    if mesh is not None:
        sharding.shard_module(module, strategy, mesh)
    return nnx.split(module)


# ----------------------------------------------------------------------------- denoising step

# Latent grid, audio latent frames, text tokens per preset: every sharded dim divides its shards
# (video / audio tokens over context x fsdp = 4, batch over fsdp = 2).
GRIDS: dict[str, dict[str, int]] = {
    "tiny": dict(batch=2, frames=2, height=4, width=4, audio=8, text=16),
    "small": dict(batch=2, frames=2, height=8, width=8, audio=32, text=32),
}
PRESETS: dict[str, Callable[..., TransformerConfig]] = {
    "tiny": TransformerConfig.tiny,
    "small": TransformerConfig.small,
}


def _step_inputs(cfg: TransformerConfig, grid: dict[str, int]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    b, tokens = grid["batch"], grid["frames"] * grid["height"] * grid["width"]

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    return {
        "x": normal(b, tokens, cfg.in_channels),
        "a": normal(b, grid["audio"], cfg.audio_in_channels),
        "text": normal(b, grid["text"], cfg.caption_channels),
        "audio_text": normal(b, grid["text"], cfg.caption_channels),
        "sigma": np.asarray([0.7, 0.4], np.float32)[:b],
        "sigma_next": np.asarray([0.5, 0.2], np.float32)[:b],
    }


_INPUT_AXES: dict[str, sharding.LogicalAxes] = {
    "x": ACTIVATION,
    "a": ACTIVATION,
    "text": TEXT,
    "audio_text": TEXT,
    "sigma": ("activation_batch",),
    "sigma_next": ("activation_batch",),
}


def _denoise_step(graphdef: nnx.GraphDef, grid: dict[str, int]) -> Callable[..., tuple[jax.Array, jax.Array]]:
    """Transformer forward + Euler update of both latents, ``(state, inputs) -> (x', a')``."""

    def run(state: nnx.State, inp: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        model = nnx.merge(graphdef, state)
        v, va = model(
            inp["x"],
            inp["a"],
            inp["text"],
            inp["audio_text"],
            inp["sigma"] * 1000.0,
            num_frames=grid["frames"],
            height=grid["height"],
            width=grid["width"],
            audio_num_frames=grid["audio"],
        )
        sig, nxt = inp["sigma"][:, None, None], inp["sigma_next"][:, None, None]
        return step(inp["x"], v, sig, nxt), step(inp["a"], va, sig, nxt)

    return run


@functools.cache
def _reference_step(preset: str) -> tuple[nnx.State, np.ndarray, np.ndarray]:
    """Weights and the ``replicated`` step without any mesh: the numbers every strategy must give."""
    cfg, grid = PRESETS[preset](), GRIDS[preset]
    graphdef, state = _place(_build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0))), "replicated", None)
    out = _compile_and_run(_denoise_step(graphdef, grid), state, _step_inputs(cfg, grid))
    return state, np.asarray(out[0]), np.asarray(out[1])


def sharded_tiny_step(strategy: str, mesh: Mesh, **overrides: Any) -> tuple[tuple[jax.Array, jax.Array], str]:
    """The tiny step under ``strategy`` (and config ``overrides``) on ``mesh``, with the replicated
    reference's weights: ``((x', a'), compiled HLO text)``."""
    cfg, grid = PRESETS["tiny"](sharding=strategy, **overrides), GRIDS["tiny"]
    weights, *_ = _reference_step("tiny")
    graphdef, state = _place(_build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights), strategy, mesh)
    inputs = {
        k: jax.device_put(v, sharding.input_sharding(_INPUT_AXES[k], strategy, mesh))
        for k, v in _step_inputs(cfg, grid).items()
    }
    with jax.set_mesh(mesh):
        return _compiled_and_run(_denoise_step(graphdef, grid), state, inputs)


def _check_step(preset: str, strategy: str, mesh: Mesh, attention_impl: str = "xla") -> str:
    """The step under ``strategy`` gives the replicated numbers; returns its compiled HLO."""
    cfg, grid = PRESETS[preset](sharding=strategy, attention_impl=attention_impl), GRIDS[preset]
    weights, *reference = _reference_step(preset)
    graphdef, state = _place(_build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights), strategy, mesh)
    host = _step_inputs(cfg, grid)
    inputs = {k: jax.device_put(v, sharding.input_sharding(_INPUT_AXES[k], strategy, mesh)) for k, v in host.items()}
    with jax.set_mesh(mesh):
        (x, a), hlo = _compiled_and_run(_denoise_step(graphdef, grid), state, inputs)
    errors = [_error(ours, ref) for ours, ref in zip((x, a), reference, strict=True)]
    print(f"denoise step {preset} {strategy}: video {errors[0]:.2e}, audio {errors[1]:.2e}, x' {x.sharding.spec}")
    assert max(errors) <= TOL
    if strategy.partition("+")[0] in ("naive", "context"):  # tokens stay sequence-sharded through the step
        assert x.sharding.spec[1] == ("context", "fsdp")
    return hlo


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_denoise_step_tiny_equals_replicated(strategy: str, mesh: Mesh) -> None:
    _check_step("tiny", strategy, mesh)


@pytest.mark.parametrize("strategy", ["trillium", "context"])
def test_splash_attention_under_shard_map_equals_replicated(strategy: str, mesh: Mesh) -> None:
    """The TPU kernel (Pallas interpreter on CPU) per shard: trillium splits batch and heads,
    context gathers the sequence-sharded q/k/v into whole sequences first."""
    _check_step("tiny", strategy, mesh, attention_impl="splash")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_denoise_step_small_equals_replicated(strategy: str, mesh: Mesh) -> None:
    _check_step("small", strategy, mesh)


# ----------------------------------------------------------------------------- the layout ladder

# MaxDiffusion's LTX-2 fixes in order (experiments/v6e.toml, v7x.toml): naive, then the FFN
# kernels whole on their contracted dim and split on their hidden dim over tensor, then the Q/K/V
# kernels likewise (heads over tensor).
FFN_FIXED = {"mlp_in": [], "mlp": ["tensor"]}
FFN_QKV_FIXED = {**FFN_FIXED, "qkv_in": [], "heads": ["tensor"]}
LADDER = ("naive", "naive+mlp=tensor+mlp_in=-", "naive+heads=tensor+mlp=tensor+mlp_in=-+qkv_in=-")


@pytest.fixture(scope="module")
def ladder() -> tuple[str, ...]:
    names = tuple(sharding.register_overrides("naive", o).name for o in ({}, FFN_FIXED, FFN_QKV_FIXED))
    assert names == LADDER
    return LADDER


@pytest.mark.parametrize("step", [1, 2])
def test_ladder_step_tiny_equals_replicated(step: int, ladder: tuple[str, ...], mesh: Mesh) -> None:
    _check_step("tiny", ladder[step], mesh)


@pytest.mark.slow
def test_ladder_small_equals_replicated_and_each_fix_gathers_fewer_bytes(ladder: tuple[str, ...], mesh: Mesh) -> None:
    """The whole ``small`` denoising step of each ladder step: replicated numbers, and all-gather
    bytes (what arrives per device) strictly down at each fix."""
    gathered = [collective_stats(parse(_check_step("small", s, mesh)))["all-gather"].result_bytes for s in ladder]
    print("all-gather bytes per step (small):", dict(zip(ladder, gathered, strict=True)))
    assert gathered[0] > gathered[1] > gathered[2]


def test_ladder_block_collectives(ladder: tuple[str, ...], mesh: Mesh) -> None:
    """One ``small`` block: fixing the FFN input kernel, then Q/K/V, each removes all-gathered bytes."""
    stats = {s: collective_stats(parse(_block_hlo("small", s, mesh))) for s in ladder}
    for name, st in stats.items():
        print(f"{name:<26} all-gather {st['all-gather'].count} / {st['all-gather'].result_bytes:,} B")
    gathered = [stats[s]["all-gather"].result_bytes for s in ladder]
    assert gathered[0] > gathered[1] > gathered[2]


# ----------------------------------------------------------------------------- decoders

# At ``small`` the audio VAE and vocoder have no preset of their own yet: sizes of the pipeline's
# small CPU workload (128 base channels, 64 mel bins, one res block per level).
DECODERS: dict[str, tuple[VideoVAEConfig, AudioVAEConfig, VocoderConfig]] = {
    "tiny": (VideoVAEConfig.tiny(), AudioVAEConfig.tiny(), VocoderConfig.tiny()),
    "small": (
        VideoVAEConfig.small(),
        AudioVAEConfig(base_channels=128, num_res_blocks=1),
        VocoderConfig(in_channels=128, hidden_channels=128, resnet_kernel_sizes=(3,), resnet_dilations=((1, 3, 5),)),
    ),
}
# Batch 2; 4 latent frames split over 2 or 4 frame shards (8-way frame layouts keep the inputs
# whole, and XLA pads the uneven decoder activations).
LATENTS: dict[str, dict[str, int]] = {
    "tiny": dict(frames=4, size=2, audio=8),
    "small": dict(frames=4, size=4, audio=16),
}


def _decoder_inputs(preset: str) -> dict[str, np.ndarray]:
    video, audio, _ = DECODERS[preset]
    grid, rng = LATENTS[preset], np.random.default_rng(1)
    z = rng.standard_normal((2, video.latent_channels, grid["frames"], grid["size"], grid["size"]))
    za = rng.standard_normal((2, audio.latent_channels, grid["audio"], audio.latent_mel_bins or 1))
    return {"z": z.astype(np.float32), "za": za.astype(np.float32)}


def _decoders(preset: str, strategy: str, weights: nnx.State | None = None) -> nnx.Module:
    video, audio, vocoder = (dataclasses.replace(c, sharding=strategy) for c in DECODERS[preset])

    def make() -> nnx.Module:
        rngs = nnx.Rngs(0)
        return nnx.List(
            [VideoVAE(video, rngs=rngs), AutoencoderKLLTX2Audio(audio, rngs=rngs), LTX2Vocoder(vocoder, rngs=rngs)]
        )

    return _build(make, weights)


def _decode(graphdef: nnx.GraphDef) -> Callable[..., tuple[jax.Array, jax.Array, jax.Array]]:
    """Video VAE decode; audio VAE decode then vocoder: ``(state, {z, za}) -> (video, mel, wave)``."""

    def run(state: nnx.State, inp: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
        video_vae, audio_vae, vocoder = nnx.merge(graphdef, state)
        mel = audio_vae.decode(inp["za"])
        return video_vae.decode(inp["z"]), mel, vocoder(mel)

    return run


@functools.cache
def _reference_decode(preset: str) -> tuple[nnx.State, tuple[np.ndarray, ...]]:
    graphdef, state = _place(_decoders(preset, "replicated"), "replicated", None)
    return state, tuple(np.asarray(o) for o in _compile_and_run(_decode(graphdef), state, _decoder_inputs(preset)))


# One VAE layout per model strategy in the quick tier (both vae_replication values covered);
# every (strategy, vae_replication) pair in the slow tier.
QUICK_VAE_LAYOUTS = [("replicated", True), ("naive", False), ("context", True), ("trillium", False), ("ironwood", True)]
ALL_VAE_LAYOUTS = [("replicated", True)] + [(s, r) for s in STRATEGIES[1:] for r in (True, False)]


def _check_decode(preset: str, strategy: str, replicate: bool, mesh: Mesh) -> None:
    vae = sharding.vae_strategy(strategy, replicate)
    weights, reference = _reference_decode(preset)
    graphdef, state = _place(_decoders(preset, vae.name, weights), vae.name, mesh)
    names = {
        "z": ("activation_batch", None, "activation_frames", None, None),
        "za": ("activation_batch", None, "activation_frames", None),
    }
    host = _decoder_inputs(preset)
    inputs = {k: jax.device_put(v, sharding.input_sharding(names[k], vae, mesh, v.shape)) for k, v in host.items()}
    with jax.set_mesh(mesh):
        outs = _compile_and_run(_decode(graphdef), state, inputs)
    errors = [_error(o, r) for o, r in zip(outs, reference, strict=True)]
    print(f"decoders {preset} {vae.name}: video {errors[0]:.2e}, mel {errors[1]:.2e}, wave {errors[2]:.2e}")
    assert max(errors) <= FP32_MODULE


@pytest.mark.parametrize(("strategy", "replicate"), QUICK_VAE_LAYOUTS)
def test_decoders_tiny_equal_replicated(strategy: str, replicate: bool, mesh: Mesh) -> None:
    _check_decode("tiny", strategy, replicate, mesh)


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "replicate"), [p for p in ALL_VAE_LAYOUTS if p not in QUICK_VAE_LAYOUTS])
def test_decoders_tiny_other_vae_layouts_equal_replicated(strategy: str, replicate: bool, mesh: Mesh) -> None:
    _check_decode("tiny", strategy, replicate, mesh)


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "replicate"), ALL_VAE_LAYOUTS)
def test_decoders_small_equal_replicated(strategy: str, replicate: bool, mesh: Mesh) -> None:
    _check_decode("small", strategy, replicate, mesh)


# ----------------------------------------------------------------------------- collectives per block


def _block_inputs(cfg: TransformerConfig, grid: dict[str, int]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """Abstract (x, a, BlockInputs) of one block at ``grid`` and their logical names (None: replicated,
    like the RoPE tables that the model computes from host constants)."""
    b, s, tokens = grid["batch"], grid["text"], grid["frames"] * grid["height"] * grid["width"]
    video_coords = prepare_video_coords(
        b,
        grid["frames"],
        grid["height"],
        grid["width"],
        patch_size=cfg.patch_size,
        patch_size_t=cfg.patch_size_t,
        scale_factors=cfg.vae_scale_factors,
        causal_offset=cfg.causal_offset,
    )
    audio_coords = prepare_audio_coords(
        b,
        grid["audio"],
        patch_size_t=cfg.audio_patch_size_t,
        scale_factor=cfg.audio_scale_factor,
        causal_offset=cfg.causal_offset,
        hop_length=cfg.audio_hop_length,
        sampling_rate=cfg.audio_sampling_rate,
    )
    rope = av_rope(cfg, video_coords, audio_coords)
    temb = ("activation_batch", None, None)

    def stream(width: int, mods: int, self_rope: Any, cross_rope: Any) -> tuple[StreamInputs, StreamInputs]:
        sds = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.float32)  # noqa: E731
        values = StreamInputs(
            sds(b, s, width),
            None,
            sds(b, 1, mods * width),
            sds(b, 1, 4 * width),
            sds(b, 1, width),
            None,
            self_rope,
            cross_rope,
        )
        names = StreamInputs(
            TEXT,
            None,
            temb,
            temb,
            temb,
            None,
            jax.tree.map(lambda _: None, self_rope),
            jax.tree.map(lambda _: None, cross_rope),
        )
        return values, names

    video, video_names = stream(cfg.inner_dim, cfg.video_mod_params, rope.video, rope.cross_video)
    audio, audio_names = stream(cfg.audio_inner_dim, cfg.audio_mod_params, rope.audio, rope.cross_audio)
    x = jax.ShapeDtypeStruct((b, tokens, cfg.inner_dim), jnp.float32)
    a = jax.ShapeDtypeStruct((b, grid["audio"], cfg.audio_inner_dim), jnp.float32)
    names = (ACTIVATION, ACTIVATION, BlockInputs(video_names, audio_names, None))
    return (x, a, BlockInputs(video, audio, None)), names


def _block_hlo(preset: str, strategy: str, mesh: Mesh) -> str:
    """Optimised, partitioned HLO of one transformer block (parameters placed by ``strategy``,
    the residual streams constrained at the block boundary as the model's layer loop does)."""
    cfg = PRESETS[preset](sharding=strategy)
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Block(cfg, rngs=nnx.Rngs(0))))
    shardings = sharding.param_shardings(abstract, strategy, mesh)

    def sds(sh: Any, var: Any) -> Any:  # the shardings tree is a prefix of the state tree
        return jax.tree.map(lambda v: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=sh), var)

    state = jax.tree.map(sds, shardings, abstract)
    args, names = _block_inputs(cfg, GRIDS[preset])

    def place(value: Any, logical: Any) -> Any:
        spec = sharding.input_sharding((None,) * len(value.shape) if logical is None else logical, strategy, mesh)
        return jax.ShapeDtypeStruct(value.shape, value.dtype, sharding=spec)

    is_names = lambda n: n is None or (isinstance(n, tuple) and all(isinstance(e, str | None) for e in n))  # noqa: E731
    args = jax.tree.map(lambda n, v: jax.tree.map(lambda leaf: place(leaf, n), v), names, args, is_leaf=is_names)

    def run(state: nnx.State, x: jax.Array, a: jax.Array, inputs: BlockInputs) -> tuple[jax.Array, jax.Array]:
        x, a = nnx.merge(graphdef, state)(x, a, inputs, None, isolate=False)
        return sharding.constrain(x, ACTIVATION, strategy), sharding.constrain(a, ACTIVATION, strategy)

    with jax.set_mesh(mesh):
        return jax.jit(run).lower(state, *args).compile(FAST_COMPILE).as_text()


TABLE_KINDS = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute")


def test_block_collectives_per_strategy(mesh: Mesh) -> None:
    """``small``, batch 2, 128 video / 32 audio / 32 text tokens, fsdp=2 x context=2 x tensor=2.
    Bytes are per device per block: all-gather result bytes (what arrives), others operand bytes."""
    stats = {s: collective_stats(parse(_block_hlo("small", s, mesh))) for s in STRATEGIES}
    header = f"{'strategy':<11}" + "".join(f"{k + ' n/bytes':>28}" for k in TABLE_KINDS)
    print("\ncollectives per transformer block (small, fsdp=2 context=2 tensor=2)\n" + header)
    for name, st in stats.items():
        cells = [(st[k].count, st[k].result_bytes if k == "all-gather" else st[k].operand_bytes) for k in TABLE_KINDS]
        print(f"{name:<11}" + "".join(f"{f'{n} / {nbytes:,}':>28}" for n, nbytes in cells))
    assert stats["replicated"].total_count == 0
    gathered = {s: st["all-gather"].result_bytes for s, st in stats.items()}
    assert gathered["naive"] > gathered["context"] and gathered["naive"] > gathered["trillium"]
    assert all(not st.unknown_trip_count_loops for st in stats.values())


# ----------------------------------------------------------------------------- errors before compiling


def test_bad_names_and_meshes_fail_before_compiling() -> None:
    """Unknown strategies, unknown logical names in an override, meshes that do not fit the devices,
    and a VAE layout XLA would miscompile: ValueErrors naming the culprit, raised before any compile."""
    from harness.metrics.measured.recompile import CompileWatcher

    with CompileWatcher(explain=False) as watch:
        with pytest.raises(ValueError, match="unknown sharding strategy 'zigzag'"):
            sharding.component_strategies("zigzag", vae_replication=True)
        with pytest.raises(ValueError, match="unknown sharding strategy 'zigzag'"):
            TransformerConfig.tiny(sharding="zigzag")
        with pytest.raises(ValueError, match="unknown logical axis 'activation_lenght'"):
            sharding.with_overrides("context", {"activation_lenght": ["context"]})
        with pytest.raises(ValueError, match="multiply to 16, but 8 devices are present"):
            sharding.build_mesh({"fsdp": 4, "context": 2, "tensor": 2})
        with pytest.raises(ValueError, match="not divisible by the fixed axes' product 3"):
            sharding.build_mesh({"fsdp": 3, "tensor": -1})
        with pytest.raises(ValueError, match=r"conv_in \('fsdp',\) and activation_frames \('context',\)"):
            trillium_vae = sharding.vae_strategy("trillium", replicate=False)
            sharding.with_overrides(trillium_vae, {"activation_frames": "context"})
    assert watch.total == 0
