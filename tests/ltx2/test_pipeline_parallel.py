"""The interleaved pipeline (``pipeline_stages``): the tiny denoising step with the blocks as two
stages over the fsdp axis (tokens over context x tensor within each stage) gives the replicated
step's numbers (test_strategies' tolerance), the weights stored stage-major; the order and the
refusals have known answers."""

from __future__ import annotations

from unittest import mock

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.sharding import Mesh

from harness.metrics.hlo import collective_stats, parse
from harness.vocabulary import Collective
from ltx2 import pipeline_parallel, sharding
from ltx2.config import TransformerConfig
from ltx2.transformer import LTX2Transformer, TextKV
from tests.ltx2 import test_passes as tp
from tests.ltx2 import test_strategies as ts

STAGES = {"layers": ["fsdp"], "activation_length": ["context", "tensor"]}
TEXT = ("text", "audio_text")


@pytest.fixture(scope="module")
def mesh() -> Mesh:
    return sharding.build_mesh(ts.MESH)


def test_stored_order_is_stage_major() -> None:
    assert pipeline_parallel.stored_order(8, 2).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert pipeline_parallel.stored_order(6, 3).tolist() == [0, 3, 1, 4, 2, 5]
    assert pipeline_parallel.stored_order(4, 1).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="3 pipeline stages do not divide 4 layers"):
        pipeline_parallel.stored_order(4, 3)
    with pytest.raises(ValueError, match=r"TransformerConfig.pipeline_stages=3: must divide num_layers \(2\)"):
        TransformerConfig.tiny(pipeline_stages=3)


def _pipelined_step(mesh: Mesh, strategy: str, stages: int) -> tuple[tuple[jax.Array, jax.Array], str]:
    grid = ts.GRIDS["tiny"]
    cfg = TransformerConfig.tiny(sharding=strategy, pipeline_stages=stages)
    weights, *_ = ts._reference_step("tiny")
    model = ts._build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights)
    pipeline_parallel.store_stage_major(model.transformer_blocks, stages)
    graphdef, state = ts._place(model, strategy, mesh)
    inputs = {
        k: jax.device_put(v, sharding.input_sharding(ts._INPUT_AXES[k], strategy, mesh))
        for k, v in ts._step_inputs(cfg, grid).items()
    }
    with jax.set_mesh(mesh), mock.patch.object(pipeline_parallel, "run", wraps=pipeline_parallel.run) as spy:
        out, hlo = ts._compiled_and_run(ts._denoise_step(graphdef, grid), state, inputs)
    assert spy.call_count == 1  # the blocks ran as the pipeline
    return out, hlo


@pytest.mark.parametrize("audio", [None, []], ids=["audio-as-video", "audio-whole"])
def test_two_stages_give_the_replicated_step(audio: list[str] | None, mesh: Mesh) -> None:
    """tiny has 2 layers: stage 0 runs layer 0, stage 1 layer 1, the two CFG rows one after the other;
    the audio tokens split like the video's, or (activation_audio_length = []) whole in each stage."""
    rules = STAGES if audio is None else {**STAGES, "activation_audio_length": audio}
    strategy = sharding.register_overrides("replicated", rules).name
    _, x_ref, a_ref = ts._reference_step("tiny")
    (x, a), hlo = _pipelined_step(mesh, strategy, 2)
    errors = ts._error(x, x_ref), ts._error(a, a_ref)
    permutes = collective_stats(parse(hlo))[Collective.COLLECTIVE_PERMUTE].count
    print(f"tiny step, 2 pipeline stages over fsdp: video {errors[0]:.2e}, audio {errors[1]:.2e}; {permutes} permutes")
    assert max(errors) <= ts.TOL
    assert permutes >= 2  # the stages hand both streams on


def test_a_layers_rule_that_is_not_the_stages_is_refused(mesh: Mesh) -> None:
    wrong = sharding.register_overrides("replicated", {"layers": ["fsdp", "context"]}).name
    with pytest.raises(
        ValueError, match=r"pipeline_stages=2: the strategy's 'layers' rule \('fsdp', 'context'\) spans 4"
    ):
        _pipelined_step(mesh, wrong, 2)


def test_audio_names_follow_an_audio_rule_only_where_the_strategy_has_one() -> None:
    names = ("activation_batch", "activation_residual_length", "activation_embed")
    assert sharding.audio_names(names, "context") == names
    apart = sharding.register_overrides("context", {"activation_audio_length": ["context"]})
    assert sharding.audio_names(names, apart) == ("activation_batch", "activation_audio_length", "activation_embed")
    assert apart.mesh_axes("activation_audio_length") == ("context",)
    assert sharding.get_strategy("context").mesh_axes("activation_audio_length") == sharding.get_strategy(
        "context"
    ).mesh_axes("activation_length")  # unnamed: as the video's tokens


def test_what_the_pipeline_cannot_run_is_refused_by_name() -> None:
    cfg = TransformerConfig.tiny(pipeline_stages=2)
    x = jax.numpy.zeros((2, 4, 8))
    with pytest.raises(ValueError, match=r"runs every layer on every row: got layers \(0, 1\), cross_from 0"):
        pipeline_parallel.run_blocks(cfg, None, None, x, x, None, None, False, (0, 1), None, None, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"got layers \(0, 2\), cross_from 1"):
        pipeline_parallel.run_blocks(cfg, None, None, x, x, None, None, False, (0, 2), None, None, 1)  # type: ignore[arg-type]
    odd = jax.numpy.zeros((3, 4, 8))
    with pytest.raises(ValueError, match=r"pipeline_stages=2 must divide the batch \(3 rows\)"):
        pipeline_parallel.run(
            None,
            {"w": jax.numpy.zeros((2, 1))},
            odd,
            odd,
            None,
            None,
            None,
            stages=2,
            strategy="replicated",
            residual=(),
        )  # type: ignore[arg-type]


def _blocks_with_text_kv(graphdef: nnx.GraphDef, grid: dict[str, int]):  # type: ignore[no-untyped-def]
    """The blocks over precomputed text K/V (the loop's path), prompt rows swapped by ``text_rows``."""

    def run(state: nnx.State, inp: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
        model = nnx.merge(graphdef, state)
        coords = model._video_coords(1, grid["frames"], grid["height"], grid["width"], 24.0)
        audio_coords = model._audio_coords(1, grid["audio"])
        cond = model.conditioning(
            inp["sigma"] * 1000.0, None, None, None, coords, audio_coords, use_cross_timestep=False
        )
        kv = model.text_kv(*model.project_text(inp["text"], inp["audio_text"]))
        x, a = model.project_in(inp["x"], inp["a"])
        inputs = model.block_inputs(cond, None, None, None, None)
        return model.run_blocks(x, a, inputs, None, isolate=False, kv=kv, text_rows=(1, 0))

    return run


def test_two_stages_over_precomputed_text_kv_give_the_unpipelined_numbers(mesh: Mesh) -> None:
    """The loop's path: text K/V computed once (in stored order by the pipelined model), gathered to
    the batch rows through text_rows, the same numbers as the unpipelined blocks without a mesh."""
    grid = ts.GRIDS["tiny"]
    weights, *_ = ts._reference_step("tiny")
    host = ts._step_inputs(TransformerConfig.tiny(), grid)
    ref_graphdef, ref_state = ts._place(
        ts._build(lambda: LTX2Transformer(TransformerConfig.tiny(), rngs=nnx.Rngs(0)), weights), "replicated", None
    )
    expected = ts._compile_and_run(_blocks_with_text_kv(ref_graphdef, grid), ref_state, host)
    strategy = sharding.register_overrides("replicated", STAGES).name
    cfg = TransformerConfig.tiny(sharding=strategy, pipeline_stages=2)
    model = ts._build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights)
    pipeline_parallel.store_stage_major(model.transformer_blocks, 2)
    graphdef, state = ts._place(model, strategy, mesh)
    inputs = {k: jax.device_put(v, sharding.input_sharding(ts._INPUT_AXES[k], strategy, mesh)) for k, v in host.items()}
    with jax.set_mesh(mesh):
        x, a = ts._compile_and_run(_blocks_with_text_kv(graphdef, grid), state, inputs)
    errors = ts._error(x, expected[0]), ts._error(a, expected[1])
    print(f"tiny blocks over text K/V, 2 pipeline stages: video {errors[0]:.2e}, audio {errors[1]:.2e}")
    assert max(errors) <= ts.TOL


def test_text_kv_is_computed_where_each_stage_keeps_its_layers(mesh: Mesh) -> None:
    """Each stage projects the text K/V of its own layers (map_layers): no stacked weight is gathered,
    and the [L, ...] result stays split over the stage axis, as the pipeline reads it. A plain
    lax.map over the stage-split stack all-gathered the stack at every layer (v6e 19B loop)."""
    strategy = sharding.register_overrides("replicated", STAGES).name
    cfg = TransformerConfig.tiny(sharding=strategy, pipeline_stages=2)
    weights, *_ = ts._reference_step("tiny")
    model = ts._build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights)
    pipeline_parallel.store_stage_major(model.transformer_blocks, 2)
    graphdef, state = ts._place(model, strategy, mesh)
    host = ts._step_inputs(cfg, ts.GRIDS["tiny"])
    text = {k: jax.device_put(host[k], sharding.input_sharding(ts._INPUT_AXES[k], strategy, mesh)) for k in TEXT}

    def text_kv(state: nnx.State, inp: dict[str, jax.Array]) -> TextKV:
        model = nnx.merge(graphdef, state)
        return model.text_kv(*model.project_text(inp["text"], inp["audio_text"]))

    with jax.set_mesh(mesh):
        kv, hlo = ts._compiled_and_run(text_kv, state, text)
    gathers = collective_stats(parse(hlo))[Collective.ALL_GATHER].count
    assert gathers == 0, f"{gathers} all-gathers in the stage-local text K/V"
    for leaf in kv:
        assert leaf.shape[0] == cfg.num_layers
        assert leaf.sharding.spec[0] in ("fsdp", ("fsdp",)), leaf.sharding


def _init(cfg: TransformerConfig) -> LTX2Transformer:
    """``LTX2Transformer(cfg, rngs=nnx.Rngs(0))`` initialised by one compiled program: op by op, each
    new parameter shape compiles its own initialiser (~40 s for 4 layers of LTX-2.3 on 2 busy cores,
    against ~14 s). The values agree with the op-by-op ones to float32 rounding."""
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0))))
    init = jax.jit(lambda: nnx.split(LTX2Transformer(cfg, rngs=nnx.Rngs(0)))[1])
    return nnx.merge(graphdef, init.lower().compile(tp.FAST_COMPILE)())


def test_the_guided_step_through_the_pipeline_matches_the_three_forwards(mesh: Mesh) -> None:
    """LTX-2.3 (prompt AdaLN: the text K/V per step, map_layers), 4 layers as 2 stages, every guidance
    pass batched without the STG fork (4 rows: 2 microbatches): isolation is a row mask (a row slice
    would cut across the microbatches), the STG block in stored order; each pass's velocity matches
    diffusers' three forwards on the unpipelined model within test_passes' tolerance. Each block
    projects the text here (kv None): before the text was gathered to the batch rows, every
    microbatch read the two prompt rows as its own two rows (uncond, cond, isolated off by 0.4-0.8)."""
    case = tp.Case("ltx2.3", stg_blocks=(2,))
    cfg = tp.CONFIGS["ltx2.3"].replace(num_layers=4)
    model = tp.noisy(_init(cfg))  # AdaLN-zero tables and zero biases away from 0
    noisy = nnx.state(model, nnx.Param)
    strategy = sharding.register_overrides("replicated", STAGES).name
    # Every variable is a Param: the noisy weights are the whole state, nothing left to initialise.
    piped = nnx.eval_shape(lambda: LTX2Transformer(cfg.replace(sharding=strategy, pipeline_stages=2), rngs=nnx.Rngs(0)))
    assert not jax.tree.leaves(nnx.state(piped, nnx.Not(nnx.Param)))
    nnx.update(piped, noisy)
    pipeline_parallel.store_stage_major(piped.transformer_blocks, 2)
    x, text = tp._inputs(case)
    with jax.set_mesh(mesh), mock.patch.object(pipeline_parallel, "run", wraps=pipeline_parallel.run) as spy:
        got = tp._run(piped, tp._plan(case, ("batched", False, True)), x, text, tp.T, None)
    assert spy.call_count == 1  # one batched forward, all four passes through the pipeline
    want = tp.reference_jit(model, tp._plan(case, tp.OLD), x, text, tp.T)
    assert set(got) == set(want) == {"uncond", "cond", "perturbed", "isolated"}
    errs = {}
    for group, pair in want.items():
        for k, (ours, ref) in enumerate(zip(got[group], pair, strict=True)):
            errs[group, k] = float(jnp.max(jnp.abs(ours - ref))) / max(1.0, float(jnp.max(jnp.abs(ref))))
    print(errs)
    assert max(errs.values()) <= tp.TOL, errs
