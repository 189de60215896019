"""Why a collective is in a compiled program: the mesh axes it spans and the sharding rule behind it.

A collective in post-SPMD HLO names its devices (``replica_groups`` or ``source_target_pairs``, as
logical ids: positions in the mesh's device order, ``use_global_device_ids``) and the dimension it
works on. With the mesh shape, the devices of one group give the mesh axes it spans; with the
program's parameters (shape, logical axis names, mesh axes per dimension) and the strategy's
activation rules, the logical axis that is sharded over those axes names the rule:

* all-gather: an operand the size of a parameter's shard is that parameter, gathered on the
  dimension whose logical axis is sharded over the spanned axes ("weights `embed` sharded over
  `fsdp`, gathered whole"); otherwise an activation sharded by a rule on those axes;
* all-reduce / reduce-scatter: partial sums of a contraction whose operand is sharded over the
  spanned axes: a parameter of the collective's scope with a dimension on those axes, else an
  activation rule on them;
* all-to-all / collective-permute: a change of layout / an exchange between neighbours along
  the spanned axes.

Where nothing matches, the text says only which axes the collective spans. Heuristic by nature
(XLA may reshape an operand before gathering it): each cause says what it rests on. Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.metrics.hlo.model import Instruction
from harness.metrics.hlo.text import shape_dims


@dataclass(frozen=True)
class ParamLayout:
    """One parameter of the program: ``path`` (``transformer_blocks.ff.proj_in.kernel``), global
    shape, logical axis name and mesh axes per dimension."""

    path: str
    shape: tuple[int, ...]
    logical: tuple[str | None, ...]
    axes: tuple[tuple[str, ...], ...]

    def local_shapes(self, sizes: Mapping[str, int]) -> list[tuple[int, ...]]:
        """Per-device shapes it can appear as: its shard, and one layer of it when stacked (without
        the layer axis, or with it kept as 1: TPU slices ``[1, ...]`` out of the stack in a scan)."""
        local = tuple(d // math.prod(sizes.get(a, 1) for a in ax) for d, ax in zip(self.shape, self.axes, strict=True))
        return [local, local[1:], (1, *local[1:])] if self.logical[:1] == ("layers",) else [local]


@dataclass(frozen=True)
class ShardingFacts:
    """What the derivation needs about one program: the mesh (axis, size) in device order, the
    strategy's name and activation rules, the parameters, and which module attributes each scope
    name stands for (``a2v`` -> ``audio_to_video_attn``)."""

    strategy: str
    mesh: tuple[tuple[str, int], ...]
    params: tuple[ParamLayout, ...] = ()
    activation_rules: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    scope_aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.mesh)


@dataclass(frozen=True)
class Cause:
    axes: tuple[str, ...]
    logical: str | None
    text: str


# --------------------------------------------------------------------------- devices -> mesh axes


def spanned_axes(device_groups: Sequence[Sequence[int]], mesh: Sequence[tuple[str, int]]) -> tuple[str, ...]:
    """Mesh axes along which the devices of some group differ (all axes for an empty group)."""
    if any(not g for g in device_groups):
        return tuple(a for a, s in mesh if s > 1)
    sizes = [s for _, s in mesh]
    varying: set[int] = set()
    for group in device_groups:
        coords = np.array(np.unravel_index(np.asarray(group), sizes)).T
        varying.update(int(k) for k in np.nonzero((coords != coords[0]).any(axis=0))[0])
    return tuple(a for k, (a, _) in enumerate(mesh) if k in varying)


# --------------------------------------------------------------------------- the cause


def _rule(logical: str, axes: Sequence[str]) -> str:
    return f"rule {logical} -> {', '.join(axes)}"


def _fmt_axes(axes: Sequence[str]) -> str:
    return ", ".join(f"`{a}`" for a in axes) or "no mesh axis"


def _in_scope(param: ParamLayout, scope: str, aliases: Mapping[str, tuple[str, ...]]) -> bool:
    """A parameter of the scope's modules: every scope component that stands for module attributes
    names one of them in the parameter's path."""
    parts = set(param.path.split("."))
    needs = [aliases[s.partition(".")[0]] for s in scope.split("/") if s.partition(".")[0] in aliases]
    return bool(needs) and all(parts & set(names) for names in needs)


def _short(path: str) -> str:
    return path.removeprefix("transformer_blocks.").removesuffix(".value")


def _gathered_param(
    operand: tuple[int, ...], dim: int, axes: tuple[str, ...], facts: ShardingFacts, scope: str
) -> Cause | None:
    sizes = facts.sizes
    hits: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for p in facts.params:
        for local in p.local_shapes(sizes):
            if local != operand or dim >= len(local):
                continue
            offset = len(p.shape) - len(local)
            logical, mesh = p.logical[dim + offset], p.axes[dim + offset]
            if logical and set(axes) <= set(mesh):
                hits.setdefault((logical, mesh), []).append(p.path)
    if len(hits) != 1:
        return None
    (((logical, mesh), paths),) = hits.items()
    paths.sort(key=lambda path: not _in_scope(ParamLayout(path, (), (), ()), scope, facts.scope_aliases))
    example = _short(paths[0]) + (f" and {len(paths) - 1} more of that shape" if len(paths) > 1 else "")
    return Cause(
        axes,
        logical,
        f"weights `{logical}` sharded over {_fmt_axes(mesh)} ({_rule(logical, mesh)}), "
        f"gathered whole for the op (shape match: {example})",
    )


def _activation(axes: tuple[str, ...], facts: ShardingFacts, what: str) -> Cause:
    rules = [(name, ax) for name, ax in sorted(facts.activation_rules.items()) if set(axes) & set(ax)]
    if not rules:
        return Cause(
            axes,
            None,
            f"{what} over {_fmt_axes(axes)}: no activation rule of {facts.strategy!r} uses "
            "these axes (the partitioner's own choice)",
        )
    logical = rules[0][0] if len(rules) == 1 else None
    names = " or ".join(f"`{n}`" for n, _ in rules)
    return Cause(
        axes,
        logical,
        f"{what}: activations {names} sharded over {_fmt_axes(axes)} ({'; '.join(_rule(n, a) for n, a in rules)})",
    )


def _contracted(axes: tuple[str, ...], facts: ShardingFacts, scope: str, what: str) -> Cause:
    mine = [p for p in facts.params if _in_scope(p, scope, facts.scope_aliases)]
    found = {
        (lg, ",".join(ax))
        for p in mine
        for lg, ax in zip(p.logical, p.axes, strict=True)
        if lg and lg != "layers" and set(axes) & set(ax)
    }
    if len(found) == 1:
        ((logical, mesh),) = found
        return Cause(
            axes,
            logical,
            f"{what}: weights of this scope contract `{logical}`, sharded over "
            f"{_fmt_axes(mesh.split(','))} ({_rule(logical, mesh.split(','))})",
        )
    return _activation(axes, facts, what)


def explain(instr: Instruction, kind: str, shapes: Mapping[str, str], facts: ShardingFacts | None, scope: str) -> Cause:
    """The cause of one collective op (see the module docstring); its device groups are the ones the
    parse resolved (``Instruction.groups``: a TPU reduce-scatter fusion's are its all-reduce's)."""
    device_groups = instr.groups
    if facts is None or device_groups is None:
        return Cause((), None, "mesh unknown: no cause derived")
    axes = spanned_axes(device_groups, facts.mesh)
    dim = instr.dimensions[0] if instr.dimensions else None
    if kind == "all-gather":
        operand = shape_dims(instr.operand_shapes[0] or shapes.get(instr.operands[0], "")) if instr.operands else None
        if operand is not None and dim is not None and (c := _gathered_param(operand, dim, axes, facts, scope)):
            return c
        return _activation(axes, facts, f"gathered on dim {dim}" if dim is not None else "gathered")
    if kind in ("all-reduce", "reduce-scatter"):
        what = "partial sums reduced" + (", then scattered" if kind == "reduce-scatter" else "")
        return _contracted(axes, facts, scope, what)
    if kind in ("all-to-all", "ragged-all-to-all"):
        return _activation(axes, facts, "layout change (all-to-all)")
    if kind == "collective-permute":
        return _activation(axes, facts, "exchange with neighbours (halo / shift)")
    return _activation(axes, facts, kind)
