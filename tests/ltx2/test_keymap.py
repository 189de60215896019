"""The key-table converter: every key mapped or ignored, layers stacked, errors name the key."""

from __future__ import annotations

import numpy as np
import pytest
from flax import nnx

from ltx2.convert.keymap import Rule, ignore, linear, load_state_dict
from ltx2.layers import Linear, stack_layers


class Toy(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.proj = Linear(3, 4, axes=("embed", "mlp"), rngs=rngs)
        self.blocks = stack_layers(lambda r: Linear(4, 4, axes=("embed", "mlp"), rngs=r), 2, rngs)


RULES = [*linear("proj", "proj"), *linear("blocks.{layer}.lin", "blocks"), *ignore("rope.freqs")]


def _state_dict(rng: np.random.Generator) -> dict[str, np.ndarray]:
    sd = {"proj.weight": rng.normal(size=(4, 3)), "proj.bias": rng.normal(size=(4,)), "rope.freqs": np.ones(2)}
    for i in range(2):
        sd[f"blocks.{i}.lin.weight"] = rng.normal(size=(4, 4))
        sd[f"blocks.{i}.lin.bias"] = rng.normal(size=(4,))
    return sd


def test_load_transposes_and_stacks() -> None:
    sd = _state_dict(np.random.default_rng(0))
    model = load_state_dict(Toy(nnx.Rngs(0)), sd, RULES)
    np.testing.assert_array_equal(np.asarray(model.proj.kernel[...]), sd["proj.weight"].T.astype(np.float32))
    assert model.blocks.kernel.shape == (2, 4, 4)
    np.testing.assert_array_equal(
        np.asarray(model.blocks.kernel[...][1]), sd["blocks.1.lin.weight"].T.astype(np.float32)
    )
    np.testing.assert_array_equal(np.asarray(model.blocks.bias[...][0]), sd["blocks.0.lin.bias"].astype(np.float32))


def test_unknown_key_is_named() -> None:
    sd = _state_dict(np.random.default_rng(0)) | {"proj.extra": np.ones(1)}
    with pytest.raises(KeyError, match=r"'proj\.extra'"):
        load_state_dict(Toy(nnx.Rngs(0)), sd, RULES)


def test_missing_key_is_named() -> None:
    sd = _state_dict(np.random.default_rng(0))
    del sd["proj.bias"]
    with pytest.raises(KeyError, match=r"proj\.bias"):
        load_state_dict(Toy(nnx.Rngs(0)), sd, RULES)


def test_wrong_shape_is_named() -> None:
    sd = _state_dict(np.random.default_rng(0)) | {"proj.weight": np.ones((5, 3))}
    with pytest.raises(ValueError, match=r"'proj\.weight': shape \(3, 5\)"):
        load_state_dict(Toy(nnx.Rngs(0)), sd, RULES)


def test_rule_placeholders_carry_over() -> None:
    rule = Rule("down.{i}.conv.weight", "down.{i}.kernel")
    assert rule.regex().match("down.12.conv.weight").groupdict() == {"i": "12"}
    assert rule.regex().match("down.x.conv.weight") is None
