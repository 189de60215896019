"""The guided step's passes (``ltx2.passes.predict``) against diffusers' three forwards.

Reference: the pipeline's passes as ``LTX2Pipeline.__call__`` runs them, through our
``LTX2Transformer.__call__`` (itself held to diffusers at 1e-4 in test_transformer.py): the CFG
pair on ``[negative; positive]`` rows, the STG pass on the positive rows with
``spatio_temporal_guidance_blocks``, the isolated pass with ``isolate_modalities``. Every
combination of ``guidance_batching`` x ``stg_fork`` x ``text_kv_cache`` must give each pass's
velocity within TOL = 1e-5 of it (fp32: the same math with rows batched differently and the text
keys/values projected once; measured differences are ~1e-6). Cases: LTX-2.0 and LTX-2.3 (gated
attention, prompt AdaLN: text keys/values change every step), two videos with padded prompts,
STG in the middle block, in block 0, in several blocks, and STG inert (``perturbed_attn`` off).

Also: the static FLOP counts of one compiled step move as the knobs say they should.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ltx2.config import TransformerConfig
from ltx2.denoise import Latents, TextEmbeddings, denoise_step, text_kv_once
from ltx2.guidance import GuidanceConfig, GuidancePasses
from ltx2.latents import Plan
from ltx2.passes import fork_block, needs_text_kv, predict
from ltx2.transformer import LTX2Transformer

TOL = 1e-5
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
F, H, W, A, S = 2, 4, 4, 8, 16
LAYERS = 3
T = jnp.float32(640.0)  # the step's timestep
CONFIGS = {
    "ltx2.0": TransformerConfig.tiny(num_layers=LAYERS, perturbed_attn=True),
    "ltx2.3": TransformerConfig.tiny(
        num_layers=LAYERS,
        gated_attn=True,
        audio_gated_attn=True,
        cross_attn_mod=True,
        audio_cross_attn_mod=True,
        use_prompt_embeddings=False,
        perturbed_attn=True,
    ),
    "ltx2.0-no-perturbed-attn": TransformerConfig.tiny(num_layers=LAYERS),
}
CONFIGS["ltx2.3-trillium"] = CONFIGS["ltx2.3"].replace(sharding="trillium")
CONFIGS["ltx2.3-bf16"] = CONFIGS["ltx2.3"].replace(dtype="bfloat16", param_dtype="bfloat16")
# bfloat16 (8 significant bits): the bound test_transformer.py states for the bf16 forward against
# float32 (5e-2, a reduced-precision bound, not a parity tolerance), here for every guidance pass.
TOL_BF16 = 5e-2


def _knob_id(knobs: tuple[str, bool, bool]) -> str:
    return f"{knobs[0]}-{'fork' if knobs[1] else 'nofork'}-{'kv' if knobs[2] else 'nokv'}"


ALL = tuple(itertools.product(("batched", "sequential"), (True, False), (True, False)))
DEFAULT, OLD = ("batched", True, True), ("sequential", False, False)


@dataclasses.dataclass(frozen=True)
class Case:
    config: str
    videos: int = 1
    stg_blocks: tuple[int, ...] = (1,)
    passes: GuidancePasses = GuidancePasses(True, True, True)
    knobs: tuple[tuple[str, bool, bool], ...] = (DEFAULT, ("sequential", True, True))


# LTX-2.0 with every knob combination is the end-to-end test's (test_pipeline.py, against diffusers).
CASES = {
    "ltx2.3": Case("ltx2.3", knobs=ALL),
    "ltx2.3-two-videos": Case(
        "ltx2.3", videos=2, stg_blocks=(2,), knobs=(DEFAULT, ("sequential", True, False), ("batched", False, False))
    ),
    "stg-block-0": Case("ltx2.3", stg_blocks=(0,)),
    "stg-blocks-1-2": Case("ltx2.0", stg_blocks=(2, 1), knobs=(DEFAULT, ("sequential", True, False))),
    "stg-inert": Case(
        "ltx2.0-no-perturbed-attn", knobs=(DEFAULT, ("sequential", True, False), ("batched", False, True))
    ),
    "no-cfg": Case("ltx2.3", passes=GuidancePasses(False, True, True)),
    "cfg-and-stg": Case("ltx2.0", videos=2, passes=GuidancePasses(True, True, False)),
}
# The normal run: every case with the defaults, LTX-2.3 also with the old path and each knob off
# alone; the rest of the matrix is marked slow (each item compiles a step, ~2-5 s on 2 busy cores).
CORE = {("ltx2.3", k) for k in (OLD, ("sequential", True, True), ("batched", False, True), ("batched", True, False))}
PARAMS = [
    pytest.param(
        name,
        knobs,
        id=f"{name}-{_knob_id(knobs)}",
        marks=() if knobs == DEFAULT or (name, knobs) in CORE else pytest.mark.slow,
    )
    for name, case in CASES.items()
    for knobs in case.knobs
]


def _plan(case: Case, knobs: tuple[str, bool, bool]) -> Plan:
    batching, fork, kv = knobs
    return Plan(
        batch=case.videos,
        frames=F,
        height=H,
        width=W,
        audio_frames=A,
        latent_mel_bins=4,
        fps=24.0,
        passes=case.passes,
        stg_blocks=case.stg_blocks,
        use_cross_timestep=True,
        patch_size=1,
        patch_size_t=1,
        guidance_batching=batching,
        stg_fork=fork,
        text_kv_cache=kv,
    )


def _model(name: str) -> LTX2Transformer:
    return noisy(LTX2Transformer(CONFIGS[name], rngs=nnx.Rngs(0)))


def noisy(model: LTX2Transformer) -> LTX2Transformer:
    """``model`` with noise on every parameter, in place."""
    rng = np.random.default_rng(1)  # AdaLN-zero tables and zero biases away from 0 (host noise: no compiles)
    state = nnx.state(model, nnx.Param)
    noisy = jax.tree.map(lambda v: jnp.asarray(np.asarray(v) + 0.1 * rng.standard_normal(v.shape), v.dtype), state)
    nnx.update(model, noisy)
    return model


def _inputs(case: Case) -> tuple[Latents, TextEmbeddings]:
    cfg, rng, B = CONFIGS[case.config], np.random.default_rng(0), case.videos
    rows = 2 * B if case.passes.cfg else B
    dv, da = (cfg.caption_channels,) * 2 if cfg.use_prompt_embeddings else (cfg.inner_dim, cfg.audio_inner_dim)
    f32 = lambda *shape: jnp.asarray(rng.standard_normal(shape), jnp.float32)  # noqa: E731
    mask = np.ones((rows, S), np.int32)
    mask[0, :5] = mask[-1, :3] = 0  # left-padded prompts of different lengths
    x = Latents(f32(B, F * H * W, cfg.in_channels), f32(B, A, cfg.audio_in_channels))
    return x, TextEmbeddings(f32(rows, S, dv), f32(rows, S, da), jnp.asarray(mask))


def reference(model: LTX2Transformer, plan: Plan, x: Latents, text: TextEmbeddings, t: jax.Array) -> dict[str, Any]:
    """diffusers' passes, one ``__call__`` each (the pipeline before the knobs existed), jitted."""

    def forward(rows: slice, copies: int, **kw: Any) -> tuple[jax.Array, jax.Array]:
        n = x.video.shape[0] * copies
        t_b = jnp.broadcast_to(t, (n,))
        return model(
            jnp.tile(x.video, (copies, 1, 1)),
            jnp.tile(x.audio, (copies, 1, 1)),
            text.video[rows],
            text.audio[rows],
            t_b,
            sigma=t_b,
            encoder_attention_mask=text.mask[rows],
            audio_encoder_attention_mask=text.mask[rows],
            num_frames=F,
            height=H,
            width=W,
            fps=plan.fps,
            audio_num_frames=A,
            use_cross_timestep=plan.use_cross_timestep,
            **kw,
        )

    B, out = x.video.shape[0], {}
    pos = slice(B, 2 * B) if plan.passes.cfg else slice(0, B)
    if plan.passes.cfg:
        v, a = forward(slice(0, 2 * B), 2)
        out["uncond"], out["cond"] = (v[:B], a[:B]), (v[B:], a[B:])
    else:
        out["cond"] = forward(pos, 1)
    if plan.passes.stg:
        out["perturbed"] = forward(pos, 1, spatio_temporal_guidance_blocks=plan.stg_blocks)
    if plan.passes.modality:
        out["isolated"] = forward(pos, 1, isolate_modalities=True)
    return out


def reference_jit(model: LTX2Transformer, plan: Plan, x: Latents, text: TextEmbeddings, t: jax.Array) -> dict[str, Any]:
    """``reference`` as one compiled program (FAST_COMPILE): op by op it compiles each op of every
    forward on first use, ~40 s for LTX-2.3 on 2 busy cores against ~5 s."""
    graphdef, state = nnx.split(model)
    run = jax.jit(lambda st, x, text, t: reference(nnx.merge(graphdef, st), plan, x, text, t))
    return run.lower(state, x, text, t).compile(FAST_COMPILE)(state, x, text, t)


class _Models(dict):
    """Models built on first use (building one costs seconds)."""

    def __missing__(self, name: str) -> LTX2Transformer:
        self[name] = _model(name)
        return self[name]


@pytest.fixture(scope="module")
def models() -> dict[str, LTX2Transformer]:
    return _Models()


def _run(model: LTX2Transformer, plan: Plan, x: Latents, text: TextEmbeddings, t: jax.Array, kv: Any) -> dict[str, Any]:
    graphdef, state = nnx.split(model)

    @jax.jit
    def go(state: nnx.State, x: Latents, text: TextEmbeddings, t: jax.Array, kv: Any) -> dict[str, Any]:
        return predict(nnx.merge(graphdef, state), plan, x, text, t, kv)

    return go.lower(state, x, text, t, kv).compile(FAST_COMPILE)(state, x, text, t, kv)


@pytest.fixture(scope="module")
def expected(models: dict[str, LTX2Transformer]) -> Callable[[str], dict[str, Any]]:
    """The reference predictions of a case, computed once."""
    cache: dict[str, dict[str, Any]] = {}

    def get(name: str) -> dict[str, Any]:
        if name not in cache:
            case = CASES[name]
            model, (x, text) = models[case.config], _inputs(case)
            cache[name] = reference_jit(model, _plan(case, OLD), x, text, T)
        return cache[name]

    return get


@pytest.mark.parametrize(("case_name", "knobs"), PARAMS)
def test_knobs_match_the_three_forwards(
    models: dict, expected: Callable, case_name: str, knobs: tuple[str, bool, bool]
) -> None:
    case = CASES[case_name]
    model, (x, text), plan, want = models[case.config], _inputs(case), _plan(case, knobs), expected(case_name)
    assert set(want) == {g for g, on in zip(("uncond", "perturbed", "isolated"), case.passes, strict=True) if on} | {
        "cond"
    }
    graphdef, state = nnx.split(model)
    kv = text_kv_once(graphdef, state, text, plan=plan)
    assert (kv is not None) == (knobs[2] and case.config != "ltx2.3")  # 2.3's prompt AdaLN: per step
    got = _run(model, plan, x, text, T, kv)
    assert set(got) == set(want)
    for group, (v_ref, a_ref) in want.items():
        for ours, ref in ((got[group][0], v_ref), (got[group][1], a_ref)):
            err = float(jnp.max(jnp.abs(ours - ref))) / max(1.0, float(jnp.max(jnp.abs(ref))))
            assert err <= TOL, f"{group}: {err:.3g}"
    # The passes differ from each other (a mask that did nothing would pass the comparison above).
    for group in set(want) - {"cond"}:
        if not (group == "perturbed" and case.config == "ltx2.0-no-perturbed-attn"):
            assert float(jnp.max(jnp.abs(want[group][0] - want["cond"][0]))) > 1e-3, group


@pytest.mark.slow  # ~45 s on 2 cores; the float32 parity of every knob combination stays in the fast suite
def test_knobs_in_bfloat16(models: dict) -> None:
    """bf16 weights and activations (float32 accumulation) against the float32 three forwards with the
    same weights: each knob combination stays within the bf16 bound (measured: old and sequential
    1.5e-2, batched 2.3e-2: other GEMM shapes round differently)."""
    case, ref_case = Case("ltx2.3-bf16"), Case("ltx2.3")
    model32, (x, text) = models["ltx2.3"], _inputs(ref_case)
    model = nnx.eval_shape(lambda: LTX2Transformer(CONFIGS[case.config], rngs=nnx.Rngs(0)))
    like = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda v, w: jnp.asarray(v, w.dtype), nnx.state(model32, nnx.Param), like))
    want = reference_jit(model32, _plan(ref_case, OLD), x, text, T)
    text = TextEmbeddings(text.video.astype(jnp.bfloat16), text.audio.astype(jnp.bfloat16), text.mask)
    graphdef, state = nnx.split(model)
    errors = {}
    for knobs in (OLD, DEFAULT, ("sequential", True, True)):
        plan = _plan(case, knobs)
        got = _run(model, plan, x, text, T, text_kv_once(graphdef, state, text, plan=plan))
        for group, pair in want.items():
            for ours, ref in zip(got[group], pair, strict=True):
                assert ours.dtype == jnp.float32  # velocities leave the model as float32, like the pipeline's
                err = float(jnp.max(jnp.abs(ours - ref))) / max(1.0, float(jnp.max(jnp.abs(ref))))
                errors[knobs] = max(errors.get(knobs, 0.0), err)
    print(f"bf16 vs fp32: {errors}")
    assert all(err <= TOL_BF16 for err in errors.values()), errors


def test_fork_block_and_text_kv_follow_the_config(models: dict) -> None:
    plan = _plan(Case("ltx2.0"), DEFAULT)
    assert fork_block(plan, models["ltx2.0"]) == 1
    assert fork_block(dataclasses.replace(plan, stg_blocks=(2, 1)), models["ltx2.0"]) == 1
    assert fork_block(dataclasses.replace(plan, stg_fork=False), models["ltx2.0"]) is None
    assert fork_block(plan, models["ltx2.0-no-perturbed-attn"]) == LAYERS  # nothing perturbed: reuse cond
    assert needs_text_kv(plan, models["ltx2.0"]) and not needs_text_kv(plan, models["ltx2.3"])
    assert not needs_text_kv(dataclasses.replace(plan, text_kv_cache=False), models["ltx2.0"])


def _step_matmul_flops(model: LTX2Transformer, plan: Plan, x: Latents, text: TextEmbeddings) -> int:
    """Matmul FLOPs of one compiled step (the harness's HLO count: 2 x m x n x k per dot)."""
    from harness.metrics.hlo import matmul_flops, parse

    graphdef, state = nnx.split(model)
    kv = text_kv_once(graphdef, state, text, plan=plan)
    scalars = [jnp.float32(v) for v in (0.8, 0.7, 800.0)]
    lowered = denoise_step.lower(graphdef, state, x, text, *scalars, GuidanceConfig().scales(), kv, plan=plan)
    return matmul_flops(parse(lowered.compile(FAST_COMPILE).as_text()))


def test_each_knob_removes_the_work_it_names(models: dict) -> None:
    """Exact matmul FLOPs of one step (LTX-2.0, 3 blocks, STG at block 1, one video, 4 row groups).
    Fork: the perturbed row skips block 0. Text cache: no text projection left in the step (K/V of
    4 rows x 3 layers, caption projections of 4 rows). Batching: the same work as the passes apart
    (the isolated row skips a2v/v2a as a row range: no mesh splits the rows here)."""
    case, model, cfg = Case("ltx2.0"), models["ltx2.0"], CONFIGS["ltx2.0"]
    x, text = _inputs(case)
    knobs = [
        ("sequential", False, True),
        ("sequential", True, True),
        ("batched", False, True),
        ("batched", True, True),
        ("batched", False, False),
    ]
    flops = {k: _step_matmul_flops(model, _plan(case, k), x, text) for k in knobs}
    L, D, Da, Dc = F * H * W, cfg.inner_dim, cfg.audio_inner_dim, cfg.caption_channels
    text_kv = 2 * S * 2 * (D * D + Da * Da)  # K and V of one row in one layer, both streams
    block = cfg.forward_flops(L, A, S) - cfg.replace(num_layers=LAYERS - 1).forward_flops(L, A, S) - text_kv
    caption = 2 * S * (D * (Dc + D) + Da * (Dc + Da))
    # a2v, v2a each: q/out projections over the long side, k/v over the short one, scores and values
    cross = 2 * 4 * (L * D * Da + A * Da * Da + L * A * Da)  # what a masked isolated row would add per layer
    assert flops[("sequential", False, True)] - flops[("sequential", True, True)] == block
    assert flops[("batched", False, True)] - flops[("batched", True, True)] == block
    assert flops[("batched", False, False)] - flops[("batched", False, True)] == 4 * (LAYERS * text_kv + caption)
    # Unsplit rows: the isolated row skips a2v/v2a in the batched forward too (a mask would cost them).
    assert flops[("batched", False, True)] == flops[("sequential", False, True)], LAYERS * cross


def test_batched_fork_only_where_it_shortens_the_rows_per_device() -> None:
    """One video's 3 pre-fork rows on a 2-way batch split are 2 per device, as the 4 after the fork."""
    from ltx2.passes import _fork_pays, batch_shards
    from ltx2.sharding import build_mesh

    assert batch_shards("trillium") == 1 and _fork_pays(3, 1, "trillium")  # no mesh: rows are not split
    with jax.set_mesh(build_mesh({"fsdp": 2, "context": 2, "tensor": 2})):
        assert batch_shards("trillium") == 2  # activation_batch -> (data, fsdp); data is not in this mesh
        assert batch_shards("context") == 1 and _fork_pays(3, 1, "context")
        assert not _fork_pays(3, 1, "trillium")  # ceil(3/2) == ceil(4/2)
        assert _fork_pays(3, 2, "trillium") and _fork_pays(2, 1, "trillium")  # 6 -> 8 rows: 3 vs 4; 2 -> 3: 1 vs 2


@pytest.mark.parametrize("videos", [1, 2])
def test_batched_rows_split_over_a_mesh(models: dict, videos: int) -> None:
    """Under a mesh that splits the batch (trillium: fsdp=2), isolation is a row mask and the fork runs
    only for two videos (6 -> 8 rows); every prediction still matches the three forwards."""
    from ltx2.sharding import build_mesh

    case = Case("ltx2.3-trillium", videos=videos)
    model, (x, text) = models[case.config], _inputs(case)
    with jax.set_mesh(build_mesh({"fsdp": 2, "context": 2, "tensor": 2})):
        got = _run(model, _plan(case, DEFAULT), x, text, T, None)
    want = reference_jit(model, _plan(case, OLD), x, text, T)
    for group, pair in want.items():
        for ours, ref in zip(got[group], pair, strict=True):
            err = float(jnp.max(jnp.abs(ours - ref))) / max(1.0, float(jnp.max(jnp.abs(ref))))
            assert err <= TOL, f"{group}: {err:.3g}"
