"""One mechanism for loading diffusers state dicts: a table of rules per component.

A :class:`Rule` maps a diffusers key pattern to our state path. Placeholders in braces
(``{i}``, ``{j}``) carry over from source to target; ``{layer}`` is special: the keys of all
layers are stacked on a leading axis, the layout our scanned blocks use. A rule whose target
is ``None`` names a key we ignore on purpose. Loading fails on any key no rule names, any
parameter no key fills, and any shape mismatch, always naming the key.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

Transform = Callable[[np.ndarray], np.ndarray]


def identity(w: np.ndarray) -> np.ndarray:
    return w


def transpose(w: np.ndarray) -> np.ndarray:
    """torch Linear ``[out, in]`` -> Flax kernel ``[in, out]``."""
    return w.T


@dataclass(frozen=True)
class Rule:
    source: str
    target: str | None
    transform: Transform = identity

    def regex(self) -> re.Pattern[str]:
        parts = re.split(r"(\{\w+\})", self.source)
        pattern = "".join(f"(?P<{p[1:-1]}>\\d+)" if p.startswith("{") else re.escape(p) for p in parts if p)
        return re.compile(pattern + r"\Z")


def linear(source: str, target: str, *, bias: bool = True) -> list[Rule]:
    """Rules for a torch ``nn.Linear`` at ``source`` loaded into a :class:`ltx2.layers.Linear`."""
    rules = [Rule(f"{source}.weight", f"{target}.kernel", transpose)]
    if bias:
        rules.append(Rule(f"{source}.bias", f"{target}.bias"))
    return rules


def ignore(*sources: str) -> list[Rule]:
    return [Rule(s, None) for s in sources]


def to_numpy(state_dict: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """torch tensors (any dtype, incl. bf16) or arrays -> float/int numpy arrays."""
    out: dict[str, np.ndarray] = {}
    for key, value in state_dict.items():
        if hasattr(value, "detach"):
            value = value.detach().cpu()
            value = value.float() if value.is_floating_point() else value
            value = value.numpy()
        out[key] = np.asarray(value)
    return out


def _path(target: str) -> tuple[str | int, ...]:
    return tuple(int(p) if p.isdigit() else p for p in target.split("."))


def _match(key: str, compiled: Sequence[tuple[Rule, re.Pattern[str]]]) -> tuple[Rule, dict[str, str]]:
    hits = [(rule, m.groupdict()) for rule, m in ((r, rx.match(key)) for r, rx in compiled) if m]
    if not hits:
        raise KeyError(f"unexpected key {key!r}: no conversion rule maps it")
    if len(hits) > 1:
        raise KeyError(f"key {key!r} matches several rules: {[h[0].source for h in hits]}")
    return hits[0]


def _gather(
    state_dict: Mapping[str, np.ndarray], rules: Iterable[Rule]
) -> dict[tuple[str | int, ...], tuple[str, np.ndarray]]:
    """Apply the rules: ``target path -> (source key, array)``; stacks ``{layer}`` keys."""
    compiled = [(r, r.regex()) for r in rules]
    single: dict[tuple[str | int, ...], tuple[str, np.ndarray]] = {}
    layered: dict[tuple[str | int, ...], dict[int, tuple[str, np.ndarray]]] = defaultdict(dict)
    for key, value in state_dict.items():
        rule, groups = _match(key, compiled)
        if rule.target is None:
            continue
        layer = groups.pop("layer", None)
        path = _path(rule.target.format(**groups))
        array = rule.transform(value)
        if layer is None:
            if path in single:
                raise KeyError(f"keys {single[path][0]!r} and {key!r} both map to {'.'.join(map(str, path))}")
            single[path] = (key, array)
        else:
            layered[path][int(layer)] = (key, array)
    for path, by_layer in layered.items():
        indices = sorted(by_layer)
        if indices != list(range(len(indices))):
            raise KeyError(f"layers of {by_layer[indices[0]][0]!r} are not 0..n-1: {indices}")
        first_key = by_layer[0][0].replace(".0.", ".{layer}.", 1)
        single[path] = (first_key, np.stack([by_layer[i][1] for i in indices]))
    return single


def load_state_dict(module: nnx.Module, state_dict: Mapping[str, Any], rules: Iterable[Rule]) -> nnx.Module:
    """Fill every parameter/buffer of ``module`` from a diffusers state dict, in place."""
    arrays = _gather(to_numpy(state_dict), rules)
    variables = {path: var for path, var in nnx.iter_graph(module) if isinstance(var, nnx.Variable)}
    variables = {p: v for p, v in variables.items() if not isinstance(v, nnx.RngState)}
    missing = sorted(".".join(map(str, p)) for p in variables if p not in arrays)
    if missing:
        raise KeyError(f"state dict leaves {len(missing)} parameters unset, e.g. {missing[:5]}")
    for path, (key, array) in arrays.items():
        var = variables.get(path)
        if var is None:
            raise KeyError(f"key {key!r} maps to {'.'.join(map(str, path))}, which the module does not have")
        if tuple(array.shape) != tuple(var.shape):
            raise ValueError(f"key {key!r}: shape {tuple(array.shape)} does not fit {tuple(var.shape)}")
        var.set_value(jnp.asarray(array, dtype=var.dtype))
    return module
