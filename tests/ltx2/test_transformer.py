"""LTX2Transformer against diffusers' ``LTX2VideoTransformer3DModel`` at tiny random configs.

Parity metric (fixed, never loosened): max|ours - diffusers| / max(1, max|diffusers|) <= 1e-4,
for video and audio outputs, through both the scanned and the Python-loop block paths.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.config import KNOBS, TransformerConfig
from ltx2.convert.keymap import load_state_dict
from ltx2.convert.transformer import from_diffusers, transformer_rules
from ltx2.transformer import LTX2Transformer
from tests.tolerances import BF16_MODULE, FP32_MODULE

TOL = FP32_MODULE
# Same HLO, less LLVM work: a tiny model compiles in ~0.7 s instead of ~5 s on 2 cores; the
# outputs move by ~1e-6, far inside TOL (the parity bar is the math, not LLVM's schedule).
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
F, H, W, A, S = 2, 4, 4, 8, 16  # latent grid, audio frames, text tokens
L = F * H * W

CONFIGS: dict[str, TransformerConfig] = {
    "ltx2.0": TransformerConfig.tiny(),
    "ltx2.0-interleaved": TransformerConfig.tiny(rope_type="interleaved"),
    "ltx2.3": TransformerConfig.tiny(
        gated_attn=True,
        audio_gated_attn=True,
        cross_attn_mod=True,
        audio_cross_attn_mod=True,
        use_prompt_embeddings=False,
        perturbed_attn=True,
    ),
}


@dataclasses.dataclass(frozen=True)
class Case:
    config: str
    batch: int = 1
    padded_text: bool = False
    per_token_timesteps: bool = False
    stg_blocks: tuple[int, ...] = ()
    perturbation_mask: tuple[float, ...] | None = None
    isolate: bool = False
    cross_timestep: bool = False
    fps: float = 24.0


CASES: dict[str, Case] = {
    "ltx2.0-split": Case("ltx2.0"),
    "ltx2.0-interleaved": Case("ltx2.0-interleaved", fps=25.0),
    "ltx2.3": Case("ltx2.3", cross_timestep=True),
    "batch2-padded-text": Case("ltx2.0", batch=2, padded_text=True),
    "per-token-timesteps": Case("ltx2.3", batch=2, per_token_timesteps=True),
    "stg-rows": Case("ltx2.3", batch=2, padded_text=True, stg_blocks=(1,), perturbation_mask=(1.0, 0.0)),
    "stg-all-perturbed": Case("ltx2.3", stg_blocks=(0,)),
    "isolate-modalities": Case("ltx2.3", isolate=True),
}


def _randomise(module: Any, seed: int = 0) -> None:
    """Every parameter away from its default init (norm weights ~1, tables ~0.1, Linear ~1/sqrt(in))."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1 + 0.1 * noise)
            elif "table" in name or p.ndim == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p.shape[1] ** 0.5)


@pytest.fixture(scope="module")
def torch_model() -> Callable[[str], Any]:
    """Factory of randomised diffusers models, built once per config name."""
    from diffusers import LTX2VideoTransformer3DModel

    knobs = set(KNOBS)
    cache: dict[str, Any] = {}

    def get(name: str) -> Any:
        if name not in cache:
            cfg = CONFIGS[name]
            kwargs = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name not in knobs}
            model = LTX2VideoTransformer3DModel(**kwargs).eval()
            _randomise(model)
            cache[name] = model
        return cache[name]

    return get


def _inputs(case: Case, cfg: TransformerConfig | None = None) -> dict[str, np.ndarray]:
    cfg, rng, B = cfg or CONFIGS[case.config], np.random.default_rng(1), case.batch
    text_dim = cfg.caption_channels if cfg.use_prompt_embeddings else cfg.cross_attention_dim
    audio_text_dim = cfg.caption_channels if cfg.use_prompt_embeddings else cfg.audio_cross_attention_dim
    f32 = lambda *shape: rng.normal(size=shape).astype(np.float32)  # noqa: E731
    mask = np.ones((B, S), np.float32)
    if case.padded_text:
        mask[-1, : S // 3] = 0.0  # left padding, as the Gemma tokenizer does
    t_shape = ((B, L), (B, A)) if case.per_token_timesteps else ((B,), (B,))
    inputs = {
        "hidden_states": f32(B, L, cfg.in_channels),
        "audio_hidden_states": f32(B, A, cfg.audio_in_channels),
        "encoder_hidden_states": f32(B, S, text_dim),
        "audio_encoder_hidden_states": f32(B, S, audio_text_dim),
        "timestep": rng.uniform(0, 1000, t_shape[0]).astype(np.float32),
        "audio_timestep": rng.uniform(0, 1000, t_shape[1]).astype(np.float32),
        "encoder_attention_mask": mask,
        "audio_encoder_attention_mask": mask.copy(),
    }
    if cfg.prompt_modulation or case.cross_timestep:
        inputs["sigma"] = rng.uniform(0, 1000, (B,)).astype(np.float32)
        inputs["audio_sigma"] = rng.uniform(0, 1000, (B,)).astype(np.float32)
    if case.perturbation_mask is not None:
        inputs["perturbation_mask"] = np.asarray(case.perturbation_mask, np.float32)
    return inputs


def _static(case: Case) -> dict[str, Any]:
    return dict(
        num_frames=F,
        height=H,
        width=W,
        fps=case.fps,
        audio_num_frames=A,
        isolate_modalities=case.isolate,
        spatio_temporal_guidance_blocks=list(case.stg_blocks) or None,
        use_cross_timestep=case.cross_timestep,
    )


@pytest.fixture(scope="module")
def reference(torch_model: Callable[[str], Any]) -> Callable[[str], tuple[np.ndarray, np.ndarray]]:
    import torch

    cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def get(case_name: str) -> tuple[np.ndarray, np.ndarray]:
        if case_name not in cache:
            case = CASES[case_name]
            arrays = {k: torch.from_numpy(v) for k, v in _inputs(case).items()}
            with torch.no_grad():
                video, audio = torch_model(case.config)(**arrays, **_static(case), return_dict=False)
            cache[case_name] = (video.numpy(), audio.numpy())
        return cache[case_name]

    return get


def _forward(model: LTX2Transformer, case: Case) -> tuple[Callable, nnx.State, dict[str, jax.Array]]:
    graphdef, state = nnx.split(model)
    static = _static(case)
    arrays = {k: jnp.asarray(v) for k, v in _inputs(case).items()}
    return (lambda state, arrays: nnx.merge(graphdef, state)(**arrays, **static)), state, arrays


def _run(model: LTX2Transformer, case: Case) -> tuple[np.ndarray, np.ndarray]:
    forward, state, arrays = _forward(model, case)
    compiled = jax.jit(forward).lower(state, arrays).compile(FAST_COMPILE)
    out = compiled(state, arrays)
    return np.asarray(out[0], np.float32), np.asarray(out[1], np.float32)


def _error(ours: np.ndarray, ref: np.ndarray) -> float:
    assert ours.shape == ref.shape
    return float(np.abs(ours - ref).max() / max(1.0, np.abs(ref).max()))


@pytest.mark.parity
@pytest.mark.parametrize("scan_layers", [True, False], ids=["scan", "loop"])
@pytest.mark.parametrize("case_name", list(CASES))
def test_parity_with_diffusers(torch_model: Callable, reference: Callable, case_name: str, scan_layers: bool) -> None:
    case = CASES[case_name]
    model = from_diffusers(torch_model(case.config), scan_layers=scan_layers)
    ref_video, ref_audio = reference(case_name)
    video, audio = _run(model, case)
    err_video, err_audio = _error(video, ref_video), _error(audio, ref_audio)
    print(f"\nparity {case_name:22s} {'scan' if scan_layers else 'loop'}: video {err_video:.2e}  audio {err_audio:.2e}")
    assert err_video <= TOL and err_audio <= TOL


# blocked: 12-token tiles make every attention of the tiny grid (32 video, 8 audio, 16 text tokens)
# multi-tile with ragged, padded edges. splash: the Pallas TPU kernel (its interpreter on CPU),
# sequences padded to 128-token tiles, head dims to 128 lanes, text masks as segment ids.
ATTENTION_CASES = [("blocked", c) for c in ("ltx2.0-split", "stg-rows", "per-token-timesteps")]
ATTENTION_CASES += [("splash", c) for c in ("ltx2.0-split", "batch2-padded-text", "stg-rows")]


@pytest.mark.parity
@pytest.mark.parametrize(("impl", "case_name"), ATTENTION_CASES)
def test_parity_attention_kernels(
    torch_model: Callable, reference: Callable, impl: str, case_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """attention_impl="blocked" / "splash" at the same fixed tolerance as the XLA path."""
    import functools

    import ltx2.attention
    from ltx2.blocked_attention import blocked_attention

    small_tiles = functools.partial(blocked_attention, block_q=12, block_kv=12, tile_elements=2 * 12 * 12)
    monkeypatch.setattr(ltx2.attention, "blocked_attention", small_tiles)
    case = CASES[case_name]
    model = from_diffusers(torch_model(case.config), attention_impl=impl)
    video, audio = _run(model, case)
    err_video, err_audio = (_error(o, r) for o, r in zip((video, audio), reference(case_name), strict=True))
    print(f"\n{impl} parity {case_name:22s}: video {err_video:.2e}  audio {err_audio:.2e}")
    assert err_video <= TOL and err_audio <= TOL


@pytest.mark.parity
@pytest.mark.parametrize("case_name", ["ltx2.0-split", "per-token-timesteps", "isolate-modalities"])
def test_parity_fused_rope_form(torch_model: Callable, reference: Callable, case_name: str) -> None:
    """rope_form="fused" (heads-major tables, one elementwise rotation) at the same fixed tolerance."""
    case = CASES[case_name]
    model = from_diffusers(torch_model(case.config), rope_form="fused")
    video, audio = _run(model, case)
    err_video, err_audio = (_error(o, r) for o, r in zip((video, audio), reference(case_name), strict=True))
    print(f"\nfused rope parity {case_name:22s}: video {err_video:.2e}  audio {err_audio:.2e}")
    assert err_video <= TOL and err_audio <= TOL


TOKEN_CHUNK_CASES = [("ltx2.0-split", "concat"), ("per-token-timesteps", "concat"), ("stg-rows", "concat")]
TOKEN_CHUNK_CASES += [("per-token-timesteps", "fused")]  # per-token modulations, heads-major RoPE chunks


@pytest.mark.parity
@pytest.mark.parametrize(("case_name", "rope_form"), TOKEN_CHUNK_CASES)
def test_parity_token_chunks(torch_model: Callable, reference: Callable, case_name: str, rope_form: str) -> None:
    """token_chunks=2: the video stream's attn1 output projection, text cross-attention, a2v and FFN
    on two strided token chunks."""
    case = CASES[case_name]
    model = from_diffusers(torch_model(case.config), token_chunks=2, rope_form=rope_form)
    video, audio = _run(model, case)
    err_video, err_audio = (_error(o, r) for o, r in zip((video, audio), reference(case_name), strict=True))
    print(f"\n2 token chunks {rope_form} parity {case_name:22s}: video {err_video:.2e}  audio {err_audio:.2e}")
    assert err_video <= TOL and err_audio <= TOL


def test_stg_is_inert_without_perturbed_attn() -> None:
    # diffusers only perturbs in LTX2PerturbedAttnProcessor (perturbed_attn=True): 2.0 ignores STG.
    model = _abstract(TransformerConfig.tiny())
    plain, stg = CASES["ltx2.0-split"], dataclasses.replace(CASES["ltx2.0-split"], stg_blocks=(0, 1))
    assert str(jax.make_jaxpr(_forward(model, plain)[0])(*_forward(model, plain)[1:])) == str(
        jax.make_jaxpr(_forward(model, stg)[0])(*_forward(model, stg)[1:])
    )


def _abstract(cfg: TransformerConfig) -> LTX2Transformer:
    return nnx.eval_shape(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)))


def test_load_rejects_unknown_missing_and_misshapen_keys(torch_model: Callable) -> None:
    torch_module = torch_model("ltx2.0")
    cfg = TransformerConfig.from_diffusers_config(dict(torch_module.config))
    good = {k: v.numpy() for k, v in torch_module.state_dict().items()}
    rules = transformer_rules()
    load_state_dict(_abstract(cfg), good, rules)  # sanity: the full state dict loads

    with pytest.raises(KeyError, match=r"transformer_blocks\.1\.attn1\.to_r\.weight"):
        load_state_dict(_abstract(cfg), good | {"transformer_blocks.1.attn1.to_r.weight": np.zeros((2, 2))}, rules)
    with pytest.raises(KeyError, match=r"'mystery\.weight'"):
        load_state_dict(_abstract(cfg), good | {"mystery.weight": np.zeros(2)}, rules)
    missing = {k: v for k, v in good.items() if k != "audio_proj_out.bias"}
    with pytest.raises(KeyError, match=r"audio_proj_out\.bias"):
        load_state_dict(_abstract(cfg), missing, rules)
    wrong = good | {"time_embed.linear.weight": np.zeros((7, 32), np.float32)}
    with pytest.raises(ValueError, match=r"'time_embed\.linear\.weight'"):
        load_state_dict(_abstract(cfg), wrong, rules)
    one_layer_short = {k: v for k, v in good.items() if not k.startswith("transformer_blocks.1.")}
    with pytest.raises(ValueError, match=r"transformer_blocks\.\{layer\}"):
        load_state_dict(_abstract(cfg), one_layer_short, rules)


@pytest.mark.parametrize(("preset", "millions"), [("ltx2_19b", 18_876), ("ltx2_3_22b", 18_989)])
def test_full_size_parameter_count_without_allocating(preset: str, millions: int) -> None:
    model = _abstract(getattr(TransformerConfig, preset)())
    leaves = jax.tree.leaves(nnx.state(model, nnx.Param))
    assert all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    count = sum(x.size for x in leaves)
    print(f"\n{preset}: {count:,} parameters")
    assert round(count / 1e6) == millions  # an integer count, quoted in millions


def test_stacked_params_carry_layer_axis() -> None:
    from ltx2.sharding import logical_axes

    model = _abstract(TransformerConfig.tiny())
    kernel = model.transformer_blocks.attn1.to_q.kernel
    assert kernel.shape == (2, 32, 32)
    assert logical_axes(kernel) == ("layers", "qkv_in", "heads")


@pytest.mark.parametrize("partials", ["float32", "activation"])
def test_bfloat16_compute_runs_close_to_float32(torch_model: Callable, reference: Callable, partials: str) -> None:
    """Also with the projections rounding their products before the bias (``linear_partials``): one
    more bfloat16 rounding per projection, inside the same smoke bound."""
    model = from_diffusers(torch_model("ltx2.0"), dtype="bfloat16", linear_partials=partials)
    forward, state, arrays = _forward(model, CASES["ltx2.0-split"])
    out = jax.jit(forward).lower(state, arrays).compile(FAST_COMPILE)(state, arrays)
    assert out[0].dtype == jnp.bfloat16 and out[1].dtype == jnp.bfloat16
    for got, want in zip(out, reference("ltx2.0-split"), strict=True):
        # A smoke bound for reduced precision, not a parity tolerance.
        assert _error(np.asarray(got, np.float32), want) < BF16_MODULE
