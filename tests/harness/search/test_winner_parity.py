"""The layouts the search found for v6e and v7x (the ``search-*`` variants of ``experiments/search-*.toml``)
keep the denoising step's numbers equal to the replicated ones at ``small`` on 8 simulated CPU devices,
on the winner's own mesh and attention kernel: the bar every strategy meets
(tests/ltx2/test_strategies.py). Slow: one ``small`` step compile per winner."""

from __future__ import annotations

from pathlib import Path

import jax
import pytest
from flax import nnx
from jax.sharding import Mesh

from harness.expansion import load_sweep
from harness.model import rules_of
from harness.plan.variants import Variant
from ltx2 import LTX2Transformer, sharding
from tests.ltx2 import test_strategies as ts

EXPERIMENTS = Path(__file__).resolve().parents[3] / "experiments"
WINNERS = [
    v
    for path in sorted(EXPERIMENTS.glob("search-*.toml"))
    for v in load_sweep(path).variants
    if v.name.startswith("search-")
]


def test_the_search_manifests_hold_their_winners() -> None:
    assert {v.target.topology for v in WINNERS} == {"v6e:2x4", "tpu7x:2x2x1"}


@pytest.mark.slow
@pytest.mark.parametrize("winner", WINNERS, ids=[f"{v.target.topology}-{v.name}" for v in WINNERS])
def test_a_winners_rules_keep_the_replicated_numbers(winner: Variant) -> None:
    strategy = sharding.register_overrides(
        winner.config_overrides["transformer.sharding"], rules_of(winner.config_overrides)
    )
    impl = winner.config_overrides.get("transformer.attention_impl", "xla")
    _check_step("small", strategy.name, sharding.build_mesh(winner.target.mesh_shape), impl)


def _check_step(preset: str, strategy: str, mesh: Mesh, attention_impl: str) -> None:
    """tests/ltx2/test_strategies.py's step check (same inputs, weights and tolerance), without its
    naive/context-only assertion on where the output tokens live."""
    cfg, grid = ts.PRESETS[preset](sharding=strategy, attention_impl=attention_impl), ts.GRIDS[preset]
    weights, *reference = ts._reference_step(preset)
    graphdef, state = ts._place(ts._build(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(0)), weights), strategy, mesh)
    inputs = {
        k: jax.device_put(v, sharding.input_sharding(ts._INPUT_AXES[k], strategy, mesh))
        for k, v in ts._step_inputs(cfg, grid).items()
    }
    with jax.set_mesh(mesh):
        out, _ = ts._compiled_and_run(ts._denoise_step(graphdef, grid), state, inputs)
    errors = [ts._error(ours, ref) for ours, ref in zip(out, reference, strict=True)]
    print(f"denoise step {preset} {strategy} ({attention_impl}): video {errors[0]:.2e}, audio {errors[1]:.2e}")
    assert max(errors) <= ts.TOL
