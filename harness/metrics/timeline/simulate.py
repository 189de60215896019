"""Walk a scheduled program on one device and lay out its timeline.

One compute stream runs the instructions in schedule order from the program's launch
(``program_launch_s``, where the spec has one: TPU; read ``scalar_ops = "with_launch"``, a leading
scalar op runs from the program's start instead, its price holding the launch); its clock advances by each compute
op's time, ``max(matmul time, bytes / HBM bandwidth) + op overhead``, each dot at its shape's
efficiency (:mod:`~harness.metrics.timeline.pricing`). A collective's transfer
takes ``latency + wire bytes / bandwidth of its route`` (:mod:`harness.metrics.timeline.groups`):

* an offloaded copy (an async DMA, a SparseCore call) runs beside the stream on the offload queue;
  a host copy (to or from host memory, ``S(5)``) on the host link's queue for its direction, at
  ``host_bytes_per_s``, the copies of one direction served by the spec's ``host_link_sharing``
  (``fifo``: in the order issued); each is written as a zero-length start and a done that spans the
  stream's wait, on the compute lane, as a measured trace shows a ``copy-start`` / ``copy-done``;
  on the critical path a done's wait is shared among the copies its queue served meanwhile, by the
  link time each received (:meth:`Simulator._attribute`; a collective's done likewise, among the
  transfers on its links);
* a synchronous collective blocks the stream until its transfer ends;
* an async ``*-start`` issues the transfer and the stream goes on; its ``*-done`` waits until the
  transfer has ended (the wait is exposed time). A TPU async collective fusion is the same: its
  start fusion issues, the continuation fusions between are compute (the transfer runs beside
  them: libtpu advances it in steps inside them, which this model does not split), its done waits;
* transfers share the links as :mod:`~harness.metrics.timeline.links` says: a transfer starts when
  it is issued and goes at its share while others run beside it; collectives on disjoint dimensions
  run side by side at full speed.

A ``while`` body runs trip-count times (once, with a note, where the count is unknown); the async
values carried through the loop tuple keep their transfers in flight across iterations, so a
collective XLA pipelines (started at the end of iteration i, done in iteration i+1, its prologue
start before the loop and epilogue done after it) overlaps exactly as scheduled. Where two
iterations start in the same state relative to the clock (the transfers on the links and their work
left, those not yet waited for and their time left, the loop value's tokens), every later one runs
alike shifted in time: a simulation that records no events (``record=False``: the step time only,
as sensitivity and intervals need) adds the remaining iterations in one step (clock, links,
transfers and exposed / critical-path totals, and with ``totals=True`` each op's time and count,
what XProf's op profile sums), so a 40-step loop of 48-layer scans costs a few iterations, not
1920. Values are followed through ``tuple``, ``get-tuple-element``, parameters, loop and call
boundaries; a done whose start cannot be traced that way waits for the oldest
transfer in flight of its kind. A ``call`` runs its computation; a ``conditional`` runs its most
expensive branch (each branch is simulated from the same state and the one that ends latest is
kept: the slowest device sets the pace of an SPMD program whose branches differ by device).

Every device runs the same SPMD program, so one device's timeline is the step's; where groups of
one collective differ in their links, the slowest group sets the pace
(:func:`~harness.metrics.timeline.groups.slowest_route`). Pure Python.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from harness.metrics.measured.events import COMPUTE
from harness.metrics.timeline import pricing
from harness.metrics.timeline.groups import Route, permute_route, slowest_route
from harness.metrics.timeline.links import Links, Transfer, clone
from harness.metrics.timeline.program import OFFLOAD, OFFLOAD_DONE, Op, Program, pass_through
from harness.metrics.timeline.specs import TimelineSpec
from harness.metrics.timeline.unpriced import HOST_RATE

NS = 1e9
LAUNCH = "(program launch)"
_MATMUL_MODULES = 1  # modules whose dots stay cached: the program being predicted (a parsed step is large)
_MATMULS: dict[int, tuple[Any, dict[str, list[pricing.Matmul]]]] = {}


class Event(NamedTuple):
    """One span of the timeline, in ns: ``lane`` is ``compute`` or a collective kind."""

    lane: str
    name: str
    category: str
    start_ns: float
    end_ns: float
    scope: str


@dataclass
class Loop:
    """Where one ``while`` ran: its body's per-iteration event index ranges."""

    name: str
    body: str
    iterations: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class State:
    """The simulator's clock, the transfers on the links, those not yet waited for and what it recorded."""

    t: float = 0.0
    links: Links = field(default_factory=Links)
    pending: dict[int, Transfer] = field(default_factory=dict)
    next_token: int = 0
    events: list[Event] = field(default_factory=list)
    exposed: dict[str, float] = field(default_factory=dict)  # (op name, category) totals live in `critical`
    critical: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    loops: list[Loop] = field(default_factory=list)
    ops: dict[str, list[Any]] = field(default_factory=dict)
    """Per op, where the simulator keeps totals (``totals=True``): [its first event's category, ns
    summed over its events, their count]; transfer spans are not ops and not counted."""

    def snapshot(self) -> tuple[Any, ...]:
        return (
            self.t,
            *clone(self.pending, self.links),
            self.next_token,
            len(self.events),
            dict(self.exposed),
            {k: list(v) for k, v in self.critical.items()},
            len(self.loops),
            {k: list(v) for k, v in self.ops.items()},
        )

    def restore(self, snap: tuple[Any, ...]) -> None:
        """Back to ``snap`` (every container copied: one snapshot is restored once per branch)."""
        self.t, pending, links, self.next_token, n, exposed, critical, loops, ops = snap
        self.pending, self.links = clone(pending, links)
        self.exposed, self.critical, self.ops = dict(exposed), _copy(critical), {k: list(v) for k, v in ops.items()}
        del self.events[n:]
        del self.loops[loops:]


STEADY_TOLERANCE_NS = 1e-3
"""Two relative states are equal when their times agree to this (1 ps: float rounding of clocks of
~10^10 ns is ~10^-6 ns; every op takes at least ~1 ns)."""


def _copy(critical: dict[tuple[str, str], list[float]]) -> dict[tuple[str, str], list[float]]:
    return {k: list(v) for k, v in critical.items()}


def _relabel(value: Any, order: dict[int, int]) -> Any:
    """``value`` with each token replaced by its place in ``order`` (None where not in flight)."""
    if isinstance(value, int):
        return ("token", order.get(value))
    if isinstance(value, tuple):
        return tuple(_relabel(v, order) for v in value)
    return value


def _same_state(a: Any, b: Any) -> bool:
    """Equal relative states (:meth:`Simulator._relative`): the same structure, times within
    :data:`STEADY_TOLERANCE_NS`."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= STEADY_TOLERANCE_NS
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _tokens(value: Any) -> list[int]:
    if isinstance(value, int):
        return [value]
    if isinstance(value, tuple):
        return [t for v in value for t in _tokens(v)]
    return []


class Simulator:
    """Runs a :class:`Program` with a :class:`TimelineSpec` (see the module docstring)."""

    def __init__(
        self,
        program: Program,
        spec: TimelineSpec,
        scope_of: Callable[[str], str] | None = None,
        record: bool = True,
        totals: bool = False,
    ):
        self.program, self.spec, self.record, self.totals = program, spec, record, totals
        self.scope_of = scope_of
        self.latency_ns = spec.value("collective_latency_s") * NS
        launch = spec.value("program_launch_s") * NS if "program_launch_s" in spec.constants else 0.0
        if spec.scalar_ops == "with_launch" and program.leads_with_scalar:
            launch = 0.0  # the leading scalar op's DMA runs from the start: its price holds the launch
        self.state = State(t=launch, links=Links(policy=spec.link_sharing, host_policy=spec.host_link_sharing))
        self._shapes: dict[str, str] | None = None
        self._cost: dict[int, float] = {}
        self._route: dict[int, tuple[Route, float]] = {}
        self._scope: dict[str, str] = {}
        if launch > 0:  # on the critical path (the stream's first wait), under no scope; no event (none in a trace)
            self._on_path(LAUNCH, COMPUTE, launch)

    # ------------------------------------------------------------------ costs

    def compute_ns(self, op: Op) -> float:
        """A compute op's time (:func:`harness.metrics.timeline.pricing.compute_seconds`)."""
        key = id(op)
        if key not in self._cost:
            mms = self.matmuls(op) if op.flops > 0 else []
            self._cost[key] = pricing.compute_seconds(op.flops, op.bytes, mms, self.spec, scalar=op.scalar) * NS
        return self._cost[key]

    def matmuls(self, op: Op) -> list[pricing.Matmul]:
        """The dots ``op`` runs (:func:`~harness.metrics.timeline.pricing.matmuls`), read once per
        module: the simulations of one program at other constants (sensitivity, intervals) share them."""
        module = self.program.module
        cached = _MATMULS.get(id(module))
        if cached is None or cached[0] is not module:
            if len(_MATMULS) >= _MATMUL_MODULES:
                _MATMULS.pop(next(iter(_MATMULS)))
            cached = _MATMULS[id(module)] = (module, {})
        table = cached[1]
        if op.name not in table:
            table[op.name] = pricing.matmuls(op.instr, module, self.shapes)
        return table[op.name]

    @property
    def shapes(self) -> dict[str, str]:
        """Instruction name -> shape over the whole module (names are unique in an HLO module)."""
        if self._shapes is None:
            self._shapes = {i.name: i.shape for instrs in self.program.module.computations.values() for i in instrs}
        return self._shapes

    def transfer(self, op: Op) -> tuple[Route, float]:
        """The route of a collective and its transfer time in ns (latency + wire bytes / bandwidth)."""
        key = id(op)
        if key not in self._route:
            if op.kind == "collective-permute":
                route = permute_route(op.pairs, self.spec)
                size = 2 if route.queues else 1
            else:
                route = slowest_route(op.groups, self.spec)
                size = route.size
            wire = op.wire_bytes(size)
            moving = route.queues and wire > 0 and math.isfinite(route.bytes_per_s)
            self._route[key] = (route, self.latency_ns + (wire / route.bytes_per_s * NS if moving else 0.0))
        return self._route[key]

    def scope(self, op: Op) -> str:
        if self.scope_of is None:
            return ""
        name = op.instr.op_name
        if name not in self._scope:
            self._scope[name] = self.scope_of(name)
        return self._scope[name]

    # ------------------------------------------------------------------ recording

    def _event(self, lane: str, name: str, category: str, start: float, end: float, op: Op) -> None:
        if self.record:
            self.state.events.append(Event(lane, name, category, start, end, self.scope(op)))
        if self.totals:  # a transfer's span is recorded only with events (its end moves later)
            entry = self.state.ops.setdefault(name, [category, 0.0, 0])
            entry[1] += end - start
            entry[2] += 1

    def _on_path(self, name: str, category: str, ns: float, count: int = 1) -> None:
        """The compute stream spent ``ns`` in ``name`` (running it, or waiting for its transfer)."""
        entry = self.state.critical.setdefault((name, category), [0.0, 0])
        entry[0] += ns
        entry[1] += count
        if category not in (COMPUTE, OFFLOAD):  # exposed collective time (an offload's wait is idle)
            self.state.exposed[category] = self.state.exposed.get(category, 0.0) + ns

    def _issue(self, op: Op) -> Transfer:
        """Start a collective's transfer on its links beside those running (:mod:`~harness.metrics.
        timeline.links`); return it. Its end, and theirs, move as later transfers join them."""
        s = self.state
        route, ns = self.transfer(op)
        transfer = Transfer(op.kind, op.name, s.t, s.t + ns, route.queues, ns)
        if not route.queues:
            return transfer
        if self.record:
            transfer.event = len(s.events)
            self._event(op.kind, f"{op.name} (transfer)", op.kind, s.t, transfer.end_ns, op)
        s.links.add(transfer, s.t)
        if self.record:
            for f in s.links.flows:
                if f.event >= 0:
                    s.events[f.event] = s.events[f.event]._replace(end_ns=f.end_ns)
        return transfer

    # ------------------------------------------------------------------ ops

    def _sync(self, op: Op) -> None:
        s = self.state
        transfer = self._issue(op)
        self._event(op.kind, op.name, op.kind, s.t, transfer.end_ns, op)
        self._on_path(op.name, op.kind, transfer.end_ns - s.t)
        s.t = transfer.end_ns

    def _start(self, op: Op) -> int:
        s = self.state
        transfer = self._issue(op)
        self._event(op.kind, op.name, op.kind, s.t, s.t, op)
        return self._pend(transfer)

    def _pend(self, transfer: Transfer) -> int:
        """Keep ``transfer`` until its done waits for it; return its token (the async value)."""
        s = self.state
        token = s.next_token
        s.next_token += 1
        s.pending[token] = transfer
        return token

    def _offload(self, op: Op) -> int:
        """Start an offloaded copy (:data:`~harness.metrics.timeline.program.OFFLOAD`): its bytes at
        the spec's ``offload_bytes_per_s`` (else the HBM bandwidth) times the HBM curve at its size, on
        the offload engine's own queue, beside compute; no event (its wait, at its done, is the stream
        idling)."""
        s = self.state
        rate = "offload_bytes_per_s" if "offload_bytes_per_s" in self.spec.constants else "hbm_bytes_per_s"
        ns = op.bytes / pricing.hbm_bytes_per_s(op.bytes, self.spec, rate) * NS if op.bytes > 0 else 0.0
        transfer = Transfer(OFFLOAD, op.name, s.t, s.t + ns, (OFFLOAD,), ns)
        s.links.add(transfer, s.t)
        return self._pend(transfer)

    def _host_copy(self, op: Op) -> int:
        """Start a host copy (``Op.host``: to or from host memory): its bytes at the host link's
        ``host_bytes_per_s`` (the HBM bandwidth where the spec has none, said in the prediction's
        notes), on that direction's queue (PCIe is full duplex: a copy in and one out do not share),
        beside compute; its done waits for it."""
        s = self.state
        rate = self.spec.constants.get(HOST_RATE)
        bytes_per_s = rate.value if rate is not None else self.spec.value("hbm_bytes_per_s")
        ns = op.bytes / bytes_per_s * NS
        transfer = Transfer(OFFLOAD, op.name, s.t, s.t + ns, (f"host-{op.host}",), ns)
        s.links.add(transfer, s.t)
        return self._pend(transfer)

    def _done(self, op: Op, value: Any) -> None:
        s = self.state
        token = next((t for t in _tokens(value) if t in s.pending), None)
        if token is None:  # the start's value did not flow here: the oldest transfer of this kind
            family = [t for t, x in s.pending.items() if x.kind == op.kind or (not op.kind and x.kind != OFFLOAD)]
            token = min(family, default=None)
        if token is None:
            return
        transfer = s.pending.pop(token)
        end = max(s.t, transfer.end_ns)
        # The done spans the stream's wait, as a measured trace shows it (an offload's on the stream).
        lane = COMPUTE if transfer.kind == OFFLOAD else transfer.kind
        self._event(lane, op.name, lane, s.t, end, op)
        if end > s.t:
            self._attribute(transfer, end)
        s.t = end

    def _attribute(self, transfer: Transfer, end: float) -> None:
        """The stream's wait from now to ``end`` for a transfer (an offloaded copy, a collective), on
        the critical path of the transfers its links served meanwhile, each by the link time it
        received (the one waited for counts the wait once): under ``fifo`` that is the transfer
        itself, or those issued before it that it queued behind; under ``fair`` each transfer
        sharing its links its share, so a wait that moved three copies' bytes is not all the first
        one's, nor a gather's wait all the gather's while an all-to-all shared its links. A
        collective's exposed time by kind follows the same shares; the timeline's events (the done
        spans the stream's wait, as a measured trace shows it) do not change."""
        s = self.state
        s.links.advance(s.t)
        rivals = [f for f in s.links.flows if set(f.queues) & set(transfer.queues)]
        before = [f.served_ns for f in rivals]
        s.links.advance(end)
        served = [f.served_ns - b for f, b in zip(rivals, before, strict=True)]
        total, wait = sum(served), end - s.t
        if total <= 0:
            self._on_path(transfer.name, transfer.kind, wait)
            return
        for f, ns in zip(rivals, served, strict=True):
            if ns > 0 or f is transfer:
                self._on_path(f.name, f.kind, wait * ns / total, count=int(f is transfer))

    def _compute(self, op: Op) -> None:
        s = self.state
        ns = self.compute_ns(op)
        self._event(COMPUTE, op.name, COMPUTE, s.t, s.t + ns, op)
        self._on_path(op.name, COMPUTE, ns)
        s.t += ns

    # ------------------------------------------------------------------ control flow

    def run(self, computation: str, args: tuple[Any, ...] = ()) -> Any:
        """Run one computation; return its root's value (async tokens, possibly inside tuples)."""
        env: dict[str, Any] = {}
        ops = self.program.ops.get(computation, [])
        for op in ops:
            env[op.name] = self._step(op, env, args)
        root = self.program.root(computation) or (ops[-1].name if ops else "")
        return env.get(root)

    def _step(self, op: Op, env: dict[str, Any], args: tuple[Any, ...]) -> Any:
        cls, operands = op.cls, op.instr.operands
        if cls == "free":
            opcode = op.instr.opcode
            if opcode == "parameter":
                return args[op.index] if 0 <= op.index < len(args) else None
            if opcode == "tuple":
                return tuple(env.get(o) for o in operands)
            if opcode == "get-tuple-element":
                value = env.get(operands[0]) if operands else None
                if isinstance(value, int):  # an element of an async op's state tuple: its token
                    return value
                return value[op.index] if isinstance(value, tuple) and 0 <= op.index < len(value) else None
            return env.get(operands[0]) if pass_through(op) and operands else None
        if cls == COMPUTE:
            self._compute(op)
        elif cls == "continuation":  # compute that passes an async collective's state (its token) on
            self._compute(op)
            return next((t for o in operands for t in _tokens(env.get(o)) if t in self.state.pending), None)
        elif cls == "sync":
            self._sync(op)
        elif cls == "start":
            return self._start(op)
        elif cls in ("done", OFFLOAD_DONE):
            self._done(op, env.get(operands[0]) if operands else None)
        elif cls == OFFLOAD:  # a zero-length start on the stream, as a measured trace shows it
            token = self._host_copy(op) if op.host else self._offload(op)
            self._event(COMPUTE, op.name, COMPUTE, self.state.t, self.state.t, op)
            return token
        elif cls == "while":
            return self._while(op, env.get(operands[0]) if operands else None)
        elif cls == "call":
            return self.run(op.callees[0], tuple(env.get(o) for o in operands)) if op.callees else None
        elif cls == "conditional":
            return self._conditional(op, env)
        return None

    def _while(self, op: Op, value: Any) -> Any:
        if len(op.callees) < 2:
            return value
        cond, body = op.callees
        loop = Loop(op.name, body)
        self.state.loops.append(loop)
        trips = op.trip_count if op.trip_count is not None else 1
        before: tuple[Any, ...] | None = None
        for done in range(trips):
            if not self.record:  # a steady state repeats: skip to the loop's end (not while recording events)
                now = (
                    self._relative(value),
                    self.state.t,
                    dict(self.state.exposed),
                    _copy(self.state.critical),
                    {k: list(v) for k, v in self.state.ops.items()},
                )
                if before is not None and _same_state(before[0], now[0]):
                    self._advance(trips - done, now[1] - before[1], before, now)
                    break
                before = now
            self.run(cond, (value,))
            first = len(self.state.events)
            value = self.run(body, (value,))
            loop.iterations.append((first, len(self.state.events)))
        self.run(cond, (value,))
        return value

    def _relative(self, value: Any) -> tuple[Any, ...]:
        """What the rest of a loop depends on, relative to the clock: the transfers on the links
        (kind, name, work left), those not yet waited for (kind, name, time left, 0 once ended;
        oldest first) and the loop value with each token replaced by its transfer's place in that
        order. Two iterations that start in equal relative states run alike, shifted in time."""
        s = self.state
        s.links.advance(s.t)
        order = {token: i for i, token in enumerate(sorted(s.pending))}
        flows = tuple((f.kind, f.name, f.work_ns) for f in s.links.flows)
        pending = tuple((x.kind, x.name, max(x.end_ns - s.t, 0.0)) for _, x in sorted(s.pending.items()))
        return flows, pending, _relabel(value, order)

    def _advance(self, iterations: int, period_ns: float, before: tuple[Any, ...], now: tuple[Any, ...]) -> None:
        """Run ``iterations`` more iterations of a steady state whose one iteration moved the clock
        ``period_ns`` and the exposed / critical-path totals from ``before``'s to ``now``'s."""
        s, shift = self.state, period_ns * iterations
        s.t += shift
        s.links.t += shift
        for x in {id(x): x for x in (*s.pending.values(), *s.links.flows)}.values():
            x.issue_ns += shift
            x.end_ns += shift
        for kind, ns in now[2].items():
            s.exposed[kind] += (ns - before[2].get(kind, 0.0)) * iterations
        for key, (ns, count) in now[3].items():
            ns0, count0 = before[3].get(key, (0.0, 0))
            s.critical[key][0] += (ns - ns0) * iterations
            s.critical[key][1] += (count - count0) * iterations
        for name, (_, ns, count) in now[4].items():
            _, ns0, count0 = before[4].get(name, (None, 0.0, 0))
            s.ops[name][1] += (ns - ns0) * iterations
            s.ops[name][2] += (count - count0) * iterations

    def _conditional(self, op: Op, env: dict[str, Any]) -> Any:
        branches = op.callees
        if not branches:
            return None
        operands = op.instr.operands
        s = self.state
        snap, ends = s.snapshot(), []
        for i, branch in enumerate(branches):
            arg = env.get(operands[i + 1]) if i + 1 < len(operands) else None
            self.run(branch, (arg,))
            ends.append(s.t)
            s.restore(snap)
        slowest = max(range(len(branches)), key=lambda i: ends[i])
        arg = env.get(operands[slowest + 1]) if slowest + 1 < len(operands) else None
        return self.run(branches[slowest], (arg,))

    def finish(self) -> float:
        """Run ENTRY; the step ends when the stream and every transfer are done. Returns ns."""
        self.run(self.program.entry)
        ends = [x.end_ns for x in self.state.pending.values()]
        return max([self.state.t, *ends])
