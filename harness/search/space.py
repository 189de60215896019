"""Layout candidates: the points of a ``[search]`` space, normalised to the mesh they run on, and
the model's reasons to drop one before anything compiles.

A :class:`Candidate` is one mesh, one attention kernel and one mesh-axes list per searched logical
axis. Normalising drops mesh axes the candidate's mesh does not have (a rule naming ``context`` on
a mesh without it places nothing there), so two points that lay the model out alike are one
candidate. :func:`prune_reason` says why a candidate cannot be the layout it spells:

- its mesh does not span the target's devices;
- the strategy rejects it (XLA miscompiles a convolution sharded on both ``conv_in`` and
  ``activation_frames``: :class:`ltx2.sharding.Strategy`);
- one array would use a mesh axis on two of its dims (``PartitionSpec`` keeps the first, so the
  rule would silently not hold);
- a dim does not divide over its mesh axes (parameters would silently keep a dividing prefix;
  heads, tokens and batch would not place);
- it lays out every array of the step as an earlier candidate does (:func:`layout_key`: a rule of a
  logical axis the step does not use, such as ``kv``, or ``activation_heads`` without the splash
  kernel): the same program, compiled once.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from harness.plan.search_space import AxesOption, MeshShape, SearchSpace
from harness.search.facts import ModelFacts

RULES_PREFIX = "sharding.rules."


@dataclass(frozen=True)
class Candidate:
    """One layout: a mesh (axis order kept: it is the device layout), a kernel, the searched rules."""

    mesh: MeshShape
    attention: str
    rules: tuple[tuple[str, AxesOption], ...]

    @property
    def name(self) -> str:
        """``fsdp2xtensor4/xla/heads=tensor,embed=-`` (``-``: replicated)."""
        mesh = "x".join(f"{a}{s}" for a, s in self.mesh)
        rules = ",".join(f"{k}={'.'.join(v) or '-'}" for k, v in self.rules)
        return f"{mesh}/{self.attention}/{rules}"

    def overrides(self, base: str) -> dict[str, Any]:
        """The variant overrides that run this layout: base strategy, every searched rule, mesh, kernel."""
        return {
            "transformer.sharding": base,
            **{RULES_PREFIX + k: list(v) for k, v in self.rules},
            "target.mesh": dict(self.mesh),
            "transformer.attention_impl": self.attention,
        }

    def replace_rule(self, logical: str, axes: AxesOption) -> Candidate:
        return Candidate(self.mesh, self.attention, tuple((k, axes if k == logical else v) for k, v in self.rules))


def normalise(mesh: MeshShape, attention: str, rules: Sequence[tuple[str, AxesOption]]) -> Candidate:
    """The candidate with each rule's mesh axes cut to those the mesh has."""
    present = {a for a, _ in mesh}
    return Candidate(mesh, attention, tuple((k, tuple(a for a in v if a in present)) for k, v in rules))


def enumerate_space(space: SearchSpace) -> Iterator[Candidate]:
    """Every point of the declared product, normalised, each distinct candidate once."""
    seen: set[Candidate] = set()
    names = [k for k, _ in space.rules]
    for mesh, attention in itertools.product(space.meshes, space.attention):
        for combo in itertools.product(*(options for _, options in space.rules)):
            c = normalise(mesh, attention, list(zip(names, combo, strict=True)))
            if c not in seen:
                seen.add(c)
                yield c


def neighbours(c: Candidate, space: SearchSpace) -> list[Candidate]:
    """Candidates one move away: another option of one rule, another mesh or another kernel."""
    out: list[Candidate] = []
    for logical, options in space.rules:
        out += [normalise(c.mesh, c.attention, c.replace_rule(logical, o).rules) for o in options]
    out += [normalise(m, c.attention, c.rules) for m in space.meshes]
    out += [Candidate(c.mesh, a, c.rules) for a in space.attention]
    return list(dict.fromkeys(x for x in out if x != c))


def dim_axes(facts: ModelFacts, c: Candidate, names: Sequence[str | None]) -> list[tuple[str, ...]]:
    """Mesh axes (present in the mesh) each dim of an array with these logical names asks for."""
    return strategy_axes(facts.strategy(c.rules), c.mesh, names)


def strategy_axes(strategy: Any, mesh: MeshShape, names: Sequence[str | None]) -> list[tuple[str, ...]]:
    present = {a for a, _ in mesh}
    return [tuple(a for a in strategy.mesh_axes(n) if a in present) for n in names]


def as_candidate(
    facts: ModelFacts, space: SearchSpace, strategy: Any, mesh: MeshShape, attention: str
) -> Candidate | None:
    """A hand-written layout (a strategy on a mesh) as a point of ``space``: its rule for every searched
    axis, when each is one of the declared options and the result lays out every array of the step as
    ``strategy`` does; None when the space cannot express it."""
    if mesh not in space.meshes or attention not in space.attention:
        return None
    c = normalise(mesh, attention, [(k, tuple(strategy.mesh_axes(k))) for k, _ in space.rules])
    declared = {k: {normalise(mesh, attention, [(k, o)]).rules[0][1] for o in opts} for k, opts in space.rules}
    if any(v not in declared[k] for k, v in c.rules):
        return None
    try:
        same = all(
            strategy_axes(strategy, mesh, a.names) == dim_axes(facts, c, a.names)
            for a in facts.arrays
            if a.laid_out(attention)
        )
    except ValueError:
        return None
    return c if same else None


@dataclass(frozen=True)
class Pruned:
    """Why a candidate was dropped: a short kind (what the counts group by) and the details."""

    kind: str  # MESH_SIZE | STRATEGY | AXIS_TWICE | NOT_DIVISIBLE | WEIGHTS
    detail: str


MESH_SIZE, STRATEGY, AXIS_TWICE = "mesh size != devices", "strategy rejects it", "mesh axis twice in one array"
NOT_DIVISIBLE, WEIGHTS, SAME = "dim does not divide", "weights exceed memory", "same layout as another"


def layout_key(facts: ModelFacts, c: Candidate) -> tuple[object, ...]:
    """What the compiled step depends on: mesh, kernel and the mesh axes of every array it lays out."""
    arrays = tuple(tuple(dim_axes(facts, c, a.names)) for a in facts.arrays if a.laid_out(c.attention))
    return (c.mesh, c.attention, arrays)


def prune_reason(facts: ModelFacts, c: Candidate, devices: int) -> Pruned | None:
    """Why ``c`` cannot be the layout it spells (None: it can); see the module docstring."""
    shape = dict(c.mesh)
    if math.prod(shape.values()) != devices:
        return Pruned(MESH_SIZE, f"mesh {shape} spans {math.prod(shape.values())} devices, the target has {devices}")
    try:
        facts.strategy(c.rules)
    except ValueError as e:
        return Pruned(STRATEGY, str(e))
    for array in facts.arrays:
        if not array.laid_out(c.attention):
            continue
        axes = dim_axes(facts, c, array.names)
        flat = [a for dim in axes for a in dim]
        if len(set(flat)) != len(flat):
            return Pruned(AXIS_TWICE, f"{array.what} {array.names} would use a mesh axis twice: {axes}")
        for name, size, dim in zip(array.names, array.shape, axes, strict=True):
            shards = math.prod(shape[a] for a in dim)
            if size % shards:
                return Pruned(
                    NOT_DIVISIBLE,
                    f"{array.what} {array.names} {array.shape}: {name} ({size}) does not "
                    f"divide over {' x '.join(dim)} ({shards})",
                )
    return None
