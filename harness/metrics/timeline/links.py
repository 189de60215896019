"""Transfers sharing links: each link set a transfer uses (a torus dimension, the chip's cores,
NVLink, the host's memcpy: :class:`harness.metrics.timeline.groups.Route`) is shared equally by the
transfers on it at that moment, and a transfer over several link sets goes at its most crowded
one's share. A transfer alone on its links takes its own time (latency + wire bytes / bandwidth);
two that overlap each go at half speed while both run. The other policy a spec can name
(``TimelineSpec.link_sharing = "fifo"``): the earlier-issued transfer has the links alone and the
later one waits for it. A transfer's timeline event spans its issue to its end (under ``fifo`` its
wait for the links included). The host link's queues (``host-in``, ``host-out``: copies to and
from host memory) follow the spec's ``host_link_sharing`` instead (``fifo`` by default, with its
sources in :class:`~harness.metrics.timeline.specs.TimelineSpec`); they share no link with the rest.

So a small synchronous collective issued while a large asynchronous one holds the same links ends
after about twice its own time, not after the large one (a queue would make it wait the whole
transfer), and the pair ends when it would one after the other. Link routers interleave the
packets of concurrent transfers; an equal share per transfer is the model's assumption, not a
measured arbitration policy. Pure Python.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

FINISHED = 1e-12
"""A transfer whose remaining work is within this fraction of the step that ends it has finished
(float rounding of ``work - share * dt``)."""


@dataclass
class Transfer:
    """One collective's transfer: ``work_ns`` its time left at full speed, ``end_ns`` its end as
    projected from the transfers on its links now (it moves when another one starts beside it),
    ``event`` the index of its timeline event (-1: none); ``served_ns``: the link time it has
    received so far (full-speed ns; what a shared wait is attributed by)."""

    kind: str
    name: str
    issue_ns: float
    end_ns: float
    queues: tuple[str, ...] = ()
    work_ns: float = 0.0
    event: int = -1
    served_ns: float = 0.0


HOST_QUEUE = "host-"
"""Prefix of the host link's queues (one per direction): shared by ``host_link_sharing``."""


@functools.cache
def _on_host(queues: tuple[str, ...]) -> bool:  # a simulation asks it millions of times of a few routes
    """Whether a transfer on ``queues`` runs on the host link (a copy to or from host memory)."""
    return bool(queues) and all(q.startswith(HOST_QUEUE) for q in queues)


def shares(flows: Sequence[Transfer], policy: str = "fair", host_policy: str | None = None) -> list[float]:
    """Each transfer's fraction of its full speed (``flows`` in the order they were issued).
    ``fair``: 1 / the number of transfers on its most crowded link set. ``fifo``: 1 for a transfer
    no earlier one shares a link set with, 0 for the others (they wait their turn). The host link's
    transfers (:func:`_on_host`) by ``host_policy`` (``None``: ``policy``)."""
    if len(flows) == 1:  # alone on its links, under either policy (the common case: fast)
        return [1.0]
    if host_policy is not None and host_policy != policy:
        host = [_on_host(f.queues) for f in flows]
        if any(host):
            ours = iter(shares([f for f, h in zip(flows, host, strict=True) if h], host_policy))
            rest = iter(shares([f for f, h in zip(flows, host, strict=True) if not h], policy))
            return [next(ours) if h else next(rest) for h in host]
    if policy == "fifo":
        taken: set[str] = set()
        out = []
        for f in flows:
            out.append(0.0 if taken.intersection(f.queues) else 1.0)
            taken.update(f.queues)
        return out
    on: dict[str, int] = {}
    for f in flows:
        for q in f.queues:
            on[q] = on.get(q, 0) + 1
    return [1.0 / max([on[q] for q in f.queues]) for f in flows]


def drain(
    flows: Sequence[Transfer],
    works: Sequence[float],
    t: float,
    until: float,
    policy: str = "fair",
    host_policy: str | None = None,
) -> tuple[float, list[float], list[float | None]]:
    """Run ``flows`` (time left at full speed: ``works``) from ``t`` to ``until`` with no new
    transfer, sharing the links by ``policy`` and ``host_policy`` (:func:`shares`): (the time
    reached, each one's work left, each one's end or None if still running)."""
    left = list(works)
    ends_out: list[float | None] = [None if w > 0 else t for w in works]
    live = [i for i, w in enumerate(left) if w > 0]
    while live:
        share = shares([flows[i] for i in live], policy, host_policy)  # the earliest live one always moves
        dt = min(left[i] / s for i, s in zip(live, share, strict=True) if s > 0)
        if t + dt > until:
            for i, s in zip(live, share, strict=True):
                left[i] -= s * (until - t)
            return until, left, ends_out
        t += dt
        still = []
        for i, s in zip(live, share, strict=True):
            if s > 0 and left[i] <= s * dt * (1 + FINISHED):
                left[i], ends_out[i] = 0.0, t
            else:
                left[i] -= s * dt
                still.append(i)
        live = still
    return (t if math.isinf(until) else max(t, until)), left, ends_out


@dataclass
class Links:
    """The transfers on the links (``flows``, in the order they were issued), run up to time ``t``,
    sharing them by ``policy``, the host link's by ``host_policy`` (:func:`shares`)."""

    flows: list[Transfer] = field(default_factory=list)
    t: float = 0.0
    policy: str = "fair"
    host_policy: str | None = None

    def advance(self, until: float) -> None:
        """Run the transfers to ``until``; the finished ones leave the links."""
        if until <= self.t:
            return
        _, left, ends = drain(self.flows, [f.work_ns for f in self.flows], self.t, until, self.policy, self.host_policy)
        for f, w, end in zip(self.flows, left, ends, strict=True):
            f.served_ns += f.work_ns - w
            f.work_ns = w
            if end is not None:
                f.end_ns = end
        self.flows = [f for f, end in zip(self.flows, ends, strict=True) if end is None]
        self.t = until

    def add(self, transfer: Transfer, now: float) -> None:
        """Start ``transfer`` at ``now`` beside the ones running; re-project every end."""
        self.advance(now)
        self.t = max(self.t, now)
        self.flows.append(transfer)
        _, _, ends = drain(self.flows, [f.work_ns for f in self.flows], self.t, math.inf, self.policy, self.host_policy)
        for f, end in zip(self.flows, ends, strict=True):
            f.end_ns = self.t if end is None else end


def clone(pending: dict[int, Transfer], links: Links) -> tuple[dict[int, Transfer], Links]:
    """Copies of the transfers in flight and on the links, one copy per transfer (a transfer both
    waited for and on the links stays one object)."""
    copies: dict[int, Transfer] = {}

    def one(x: Transfer) -> Transfer:
        return copies.setdefault(id(x), replace(x))

    return {k: one(x) for k, x in pending.items()}, Links(
        [one(f) for f in links.flows], links.t, links.policy, links.host_policy
    )
