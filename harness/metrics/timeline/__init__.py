"""Predict a compiled program's step timeline from its scheduled HLO, where the hardware is absent.

``predict(parse(compiled.as_text()), spec_for("v6e:2x4", "tpu", coords))`` walks the program XLA
scheduled for the target on one device (:mod:`~harness.metrics.timeline.simulate`: compute ops at
roofline speed plus overhead, collectives over the links their replica groups span
(:mod:`~harness.metrics.timeline.groups`), async pairs overlapping compute, loops with collectives
pipelined across iterations) and accounts the timeline as a measured trace is accounted
(:mod:`~harness.metrics.timeline.prediction`). Every constant is in the spec with its source
(:mod:`~harness.metrics.timeline.specs`); :func:`sensitivity` says which one moves the step most,
and :func:`uncertainty` gives the step's interval from the constants' stated uncertainties.

Pure Python: importing this package imports no JAX.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

from harness.metrics.hlo.model import HloModule
from harness.metrics.timeline import rates
from harness.metrics.timeline.prediction import Prediction, device_dict
from harness.metrics.timeline.program import Program, build_program
from harness.metrics.timeline.simulate import Event, Loop, Simulator
from harness.metrics.timeline.specs import CORE_LINKS, LINK_SHARING, SCALAR_OPS, Constant, TimelineSpec
from harness.metrics.timeline.specs import cpu_spec as cpu_spec
from harness.metrics.timeline.specs import spec_for as spec_for
from harness.metrics.timeline.unpriced import pricing_notes
from harness.vocabulary import BLOCK_SCOPE

CRITICAL_PATH_TOP = 20


def _critical_path(sim: Simulator, ops_scope: dict[str, str]) -> tuple[dict[str, Any], ...]:
    ranked = sorted(sim.state.critical.items(), key=lambda kv: (-kv[1][0], kv[0]))
    return tuple(
        {"op": name, "scope": ops_scope.get(name, ""), "category": category, "ns": ns, "count": int(count)}
        for (name, category), (ns, count) in ranked[:CRITICAL_PATH_TOP]
    )


def _critical_by_scope(sim: Simulator, ops_scope: dict[str, str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for (name, _), (ns, _count) in sim.state.critical.items():
        scope = ops_scope.get(name, "")
        out[scope] = out.get(scope, 0.0) + ns
    return out


def _is_block(scope: str) -> bool:
    return BLOCK_SCOPE in scope.split("/")


def _block_loop(loops: list[Loop], events: list[Event]) -> Loop | None:
    """The loop whose iterations are transformer blocks: of the loops run more than once, the one
    whose events' scopes are most often a block's; without scopes, the one with the longest
    iteration."""
    candidates = [loop for loop in loops if len(loop.iterations) > 1]
    if not candidates:
        return None

    def blockness(loop: Loop) -> tuple[float, float]:
        first, last = loop.iterations[len(loop.iterations) // 2]
        span = events[first:last]
        share = sum(_is_block(e.scope) for e in span) / len(span) if span else 0.0
        length = (span[-1].end_ns - span[0].start_ns) if span else 0.0
        return share, length

    best = max(candidates, key=blockness)
    return best if blockness(best)[0] > 0 or not any(e.scope for e in events) else None


def _block_events(loops: list[Loop], events: list[Event]) -> tuple[Event, ...]:
    """One block iteration's events (the middle one: pipelined transfers are in steady state),
    shifted to start at 0."""
    loop = _block_loop(loops, events)
    if loop is None:
        return ()
    first, last = loop.iterations[len(loop.iterations) // 2]
    span = events[first:last]
    if not span:
        return ()
    t0 = min(e.start_ns for e in span)
    return tuple(e._replace(start_ns=e.start_ns - t0, end_ns=e.end_ns - t0) for e in span)


def _notes(program: Program, spec: TimelineSpec) -> tuple[str, ...]:
    notes = [
        "predicted from the scheduled HLO (one device; SPMD: every device runs the same program, "
        "a collective goes at its slowest group's pace, a conditional at its slowest branch's)"
    ]
    if program.unknown_trip_counts:
        notes.append(f"while loops with no known trip count run once: {', '.join(program.unknown_trip_counts[:5])}")
    assumed = [k for k, c in spec.constants.items() if c.source.startswith("assumed")]
    if assumed:
        notes.append(f"assumed constants (no published figure): {', '.join(assumed)}")
    if spec.topology.kind == "torus" and "assumed row-major" in spec.topology.source:
        notes.append("device coordinates assumed row-major: none were given")
    notes += pricing_notes(program, spec)
    return tuple(notes)


def simulate(program: Program, spec: TimelineSpec, scope_of: Callable[[str], str] | None = None) -> Prediction:
    """:func:`predict` on an already built :class:`Program` (what :func:`sensitivity` reuses)."""
    start = time.perf_counter()
    sim = Simulator(program, spec, scope_of)
    step_ns = sim.finish()
    events = sim.state.events
    ops_scope = {e.name: e.scope for e in events}
    for (name, _), _v in sim.state.critical.items():
        ops_scope.setdefault(name.removesuffix(" (transfer)"), "")
    return Prediction(
        step_ns=step_ns,
        device=device_dict(events, sim.state.exposed),
        critical_path=_critical_path(sim, ops_scope),
        events=tuple(events),
        block_events=_block_events(sim.state.loops, events),
        spec=spec,
        notes=_notes(program, spec),
        simulate_s=time.perf_counter() - start,
        critical_by_scope=_critical_by_scope(sim, ops_scope),
    )


def predict(module: HloModule, spec: TimelineSpec, *, scope_of: Callable[[str], str] | None = None) -> Prediction:
    """The predicted step of a compiled program (its parsed ``compiled.as_text()``) on ``spec``'s hardware.
    ``scope_of`` maps an instruction's ``metadata.op_name`` to a model scope (``a/b/c``): it labels
    the critical path and picks the transformer block loop for ``block_events``."""
    start = time.perf_counter()
    prediction = simulate(build_program(module), spec, scope_of)
    return dataclasses.replace(prediction, simulate_s=time.perf_counter() - start)


def step_ns(program: Program, spec: TimelineSpec) -> float:
    """Only the step time (no events recorded): what sensitivity needs, faster."""
    return Simulator(program, spec, record=False).finish()


def op_totals(program: Program, spec: TimelineSpec) -> dict[str, tuple[str, float, int]]:
    """Per op of the step: (its category, its time summed over its executions in ns, their count),
    the rows XProf's op profile sums, without recording events: a steady loop's later iterations are
    added at once, as for :func:`step_ns` (what the XProf shares' interval needs at each of its
    points; a recorded simulation runs every iteration of every loop)."""
    sim = Simulator(program, spec, record=False, totals=True)
    sim.finish()
    return {name: (str(c), float(ns), int(n)) for name, (c, ns, n) in sim.state.ops.items()}


def sensitivity(module: HloModule | Program, spec: TimelineSpec, *, factor: float = 0.2) -> dict[str, Any]:
    """Each rate and time constant of ``spec`` scaled by ``1 - factor`` and ``1 + factor``: the step
    time at each, and ``most``, the constant whose range moves the step most. JSON-able."""
    program = build_program(module) if isinstance(module, HloModule) else module
    base = step_ns(program, spec)
    out: dict[str, dict[str, float]] = {}
    for name in (k for k, c in spec.constants.items() if c.scalable):
        low = step_ns(program, spec.scaled(name, 1 - factor)) / 1e9
        high = step_ns(program, spec.scaled(name, 1 + factor)) / 1e9
        out[name] = {"low_step_s": low, "high_step_s": high, "range_s": abs(high - low)}
    most = max(out, key=lambda k: (out[k]["range_s"], k)) if out else None
    return {
        "factor": factor,
        "step_s": base / 1e9,
        "constants": out,
        "most": most,
        "most_range_fraction": (out[most]["range_s"] / (base / 1e9)) if most and base > 0 else 0.0,
    }


def _faster(constant: Constant) -> float:
    """The factor that moves ``constant`` to the fast end of its uncertainty (rates up, times down)."""
    up = 1.0 + constant.rel_uncertainty
    return 1.0 / up if constant.unit == "s" else up


def uncertainty(module: HloModule | Program, spec: TimelineSpec) -> dict[str, Any]:
    """The step's interval from its constants' stated uncertainty (:attr:`Constant.rel_uncertainty`)
    and the modelling choices that are assumed: the step at each of :func:`bound_specs`' points (every
    bound together, ``fast`` / ``slow``; each other policy or reading, where it moves the program),
    each rate and time constant alone at either bound (``<constant>:fast`` / ``:slow``; offloaded
    copies' assumed rate among them), and each measured efficiency curve of a TPU / GPU spec
    (:mod:`~harness.metrics.timeline.rates`) moved by its points' uncertainty, capped at 1
    (``<family>:fast`` / ``:slow``). ``assumed``: the names of the points that move an assumption
    rather than a measured or published constant. ``interval_s``: the lowest and highest of them;
    ``points_s``: every evaluation, so two predictions on the same spec can be compared point by point
    (:func:`harness.results.uncertain.ordering`: an order that flips at some point is a tie). JSON-able."""
    program = build_program(module) if isinstance(module, HloModule) else module
    points = {"base": step_ns(program, spec)}
    assumed: list[str] = []
    for name, c in spec.constants.items():
        if not c.scalable or c.rel_uncertainty <= 0:
            continue
        f = _faster(c)
        points[f"{name}:fast"] = step_ns(program, spec.scaled(name, f))
        points[f"{name}:slow"] = step_ns(program, spec.scaled(name, 1 / f))
        if c.source.startswith("assumed"):
            assumed += [f"{name}:fast", f"{name}:slow"]
    for family, (up, carried) in _curve_uncertainty(spec).items():
        points[f"{family}:fast"] = step_ns(program, spec.curves_scaled({family: 1 + up}))
        points[f"{family}:slow"] = step_ns(program, spec.curves_scaled({family: 1 / (1 + up)}))
        if carried:
            assumed += [f"{family}:fast", f"{family}:slow"]
    for name, bound in bound_specs(spec, host_copies=copies_host(program), scalars=runs_scalar(program)).items():
        points[name] = step_ns(program, bound)
        if name not in ("fast", "slow"):
            assumed.append(name)
    seconds = {k: v / 1e9 for k, v in points.items()}
    return {
        "step_s": seconds["base"],
        "interval_s": [min(seconds.values()), max(seconds.values())],
        "points_s": seconds,
        "uncertainty": {k: c.rel_uncertainty for k, c in spec.constants.items() if c.scalable},
        "curves": {k: v[0] for k, v in _curve_uncertainty(spec).items()},
        **{k: getattr(spec, k) for k in ("link_sharing", "host_link_sharing", "core_links", "scalar_ops")},
        "assumed": assumed,
    }


def copies_host(program: Program) -> bool:
    """Whether ``program`` copies to or from host memory (a host copy, ``Op.host``): only then
    does the host link's sharing policy move its step."""
    return any(op.host for ops in program.ops.values() for op in ops)


def runs_scalar(program: Program) -> bool:
    """Whether ``program`` runs a scalar op (``Op.scalar``): only then (and on a spec with ``scalar_op_s``)
    does ``scalar_ops`` move its step."""
    return any(op.scalar for ops in program.ops.values() for op in ops)


def bound_specs(spec: TimelineSpec, host_copies: bool = True, scalars: bool = True) -> dict[str, TimelineSpec]:
    """The specs at the interval's joint bounds (see :func:`uncertainty`): ``fast`` / ``slow`` (every
    rate and time constant and every TPU / GPU efficiency curve at its bound together), the other
    link-sharing policy (``link_sharing:<policy>``), the host link's other one
    (``host_link_sharing:<policy>``, where ``host_copies``: :func:`copies_host`), the other use of a
    chip's ports by its cores (``core_links:<use>``, where a chip holds several devices), the scalar-op
    measurement's other reading (``scalar_ops:<reading>``, where ``scalars``, :func:`runs_scalar`, and
    the spec has ``scalar_op_s``: a GPU's or CPU's scalar op is priced as any op) and, where
    a curve is carried from another generation, the datasheet rates (``curves:datasheet``). What the
    XProf shares' interval is read at."""
    fast, slow = spec, spec
    for name, c in spec.constants.items():
        if c.scalable and c.rel_uncertainty > 0:
            f = _faster(c)
            fast, slow = fast.scaled(name, f), slow.scaled(name, 1 / f)
    curves = _curve_uncertainty(spec)
    fast = fast.curves_scaled({family: 1 + up for family, (up, _) in curves.items()})
    slow = slow.curves_scaled({family: 1 / (1 + up) for family, (up, _) in curves.items()})
    out = {"fast": fast, "slow": slow}
    if any(carried for _, carried in curves.values()):
        out["curves:datasheet"] = spec.datasheet()
    for policy in LINK_SHARING:
        if policy != spec.link_sharing:
            out[f"link_sharing:{policy}"] = dataclasses.replace(spec, link_sharing=policy)
        if host_copies and policy != spec.host_link_sharing:
            out[f"host_link_sharing:{policy}"] = dataclasses.replace(spec, host_link_sharing=policy)
    if spec.topology.kind == "torus" and spec.topology.devices_per_chip > 1:
        for use in (u for u in CORE_LINKS if u != spec.core_links):
            out[f"core_links:{use}"] = dataclasses.replace(spec, core_links=use)
    if scalars and "scalar_op_s" in spec.constants:
        for price in (p for p in SCALAR_OPS if p != spec.scalar_ops):
            out[f"scalar_ops:{price}"] = dataclasses.replace(spec, scalar_ops=price)
    return out


LINK_CONSTANTS = ("collective_latency_s", "link_bytes_per_s", "on_chip_bytes_per_s", "host_bytes_per_s")
LINK_FAMILIES = ("link_efficiency",)


def share_bound_specs(spec: TimelineSpec, host_copies: bool = True, scalars: bool = True) -> dict[str, TimelineSpec]:
    """:func:`bound_specs` and the two crossed bounds a share of time needs: the links (the transfer
    constants :data:`LINK_CONSTANTS` and curves :data:`LINK_FAMILIES`) at their slow bound with every
    other constant and curve at its fast bound (``links:slow``), and the reverse (``links:fast``).
    A step is monotone in every rate, so the joint bounds are its extremes; a share (exposed
    all-gather time over all op time) is a ratio of transfer to compute time, so its extremes lie
    where the two move apart, which the joint bounds never try. Added after the qkv-fixed rung's
    held-out share had been read (benchmarks/results/ag-wasted-qkv-2026-11-29.md)."""
    out = bound_specs(spec, host_copies, scalars)
    curves = _curve_uncertainty(spec)
    for label, links_fast in (("links:slow", False), ("links:fast", True)):
        s = spec
        for name, c in spec.constants.items():
            if c.scalable and c.rel_uncertainty > 0:
                f = _faster(c)
                s = s.scaled(name, f if (name in LINK_CONSTANTS) == links_fast else 1 / f)
        s = s.curves_scaled(
            {fam: (1 + up) ** (1 if (fam in LINK_FAMILIES) == links_fast else -1) for fam, (up, _) in curves.items()}
        )
        out[label] = s
    return out


def _curve_uncertainty(spec: TimelineSpec) -> dict[str, tuple[float, bool]]:
    """Per efficiency-curve family a TPU / GPU spec carries: (the largest relative uncertainty of its
    points, whether any is assumed, i.e. carried from another generation). CPU curves are the
    host's own measurement, moved by the constants they scale: none here."""
    if spec.platform == "cpu":
        return {}
    out: dict[str, tuple[float, bool]] = {}
    for family in rates.CURVE_FAMILIES:
        names = spec.curve_names(family)
        if names:
            cs = [spec.constants[n] for n in names]
            out[family] = (max(c.rel_uncertainty for c in cs), any(c.source.startswith("assumed") for c in cs))
    return out
