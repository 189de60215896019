"""A predicted timeline in XProf's terms: its op-profile numbers
(:func:`harness.metrics.xprof.metrics.op_profile`) and its XSpace
(:func:`harness.metrics.xprof.xplane_write.write_xspace`), both from the same events.

The events are the simulator's (:class:`harness.metrics.timeline.simulate.Event`: lane, name,
category, start_ns, end_ns, scope); each op's FLOPs and HBM bytes of one execution come from the
program it simulated (:class:`harness.metrics.timeline.program.Program`), and the peaks from the
spec it was priced with (``peak_flops_per_s``, ``hbm_bytes_per_s``). A compute op's xprof
category is its HLO opcode (``fusion``, ``convolution``, ``copy``...: libtpu writes finer ones,
e.g. ``loop fusion``, which we cannot know from the text); a collective's is its kind; an op
offloaded to another core (a ``call-start`` / ``call-done``: a SparseCore collective or copy) is
``async-start`` / ``async-done``, the categories libtpu gives them (HLO's ``kAsyncStart`` /
``kAsyncDone``; xprof's own SparseCore-offload test writes a ``call-start`` so), whatever it runs.
Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.families import XprofProfile
from harness.metrics.measured.events import COMPUTE
from harness.metrics.xprof.metrics import TRANSFER_SUFFIX, OpCost, op_costs, op_profile
from harness.metrics.xprof.xplane_write import XOp, write_xspace

XPLANE_NAME = "predicted.xplane.pb"
PROFILE_DIR = "plugins/profile/predicted"  # where `xprof --logdir <trace dir>` looks


def program_costs(
    ops_by_computation: Mapping[str, Iterable[Any]],
) -> tuple[dict[str, tuple[float, float]], dict[str, str]]:
    """(op -> (FLOPs, HBM bytes) of one execution, op -> HLO opcode) of a simulated program's ops
    (:attr:`Program.ops`). A collective (its sync op or its start) carries the HBM bytes it reads and
    writes (``Instruction.traffic``), as XProf's op profile counts a collective's bytes accessed;
    its transfer over the links is the timeline's, not these bytes'."""
    costs: dict[str, tuple[float, float]] = {}
    opcodes: dict[str, str] = {}
    for ops in ops_by_computation.values():
        for op in ops:
            hbm = float(op.bytes)
            if not hbm and op.kind and op.cls in ("sync", "start"):
                hbm = float(op.instr.traffic)
            costs[op.name] = (float(op.flops), hbm)
            opcodes[op.name] = op.instr.opcode
    return costs, opcodes


_OFFLOADED = {"call-start": "async-start", "call-done": "async-done"}  # opcode -> libtpu's category


def _category(name: str, category: str, opcodes: Mapping[str, str]) -> str:
    """The xprof category of op ``name`` whose timeline category is ``category``."""
    opcode = opcodes.get(name, "")
    if opcode in _OFFLOADED:
        return _OFFLOADED[opcode]
    return opcodes.get(name, category) if category == COMPUTE else category


def xprof_entry(
    events: Sequence[Any],
    costs: Mapping[str, tuple[float, float]],
    opcodes: Mapping[str, str],
    *,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
) -> XprofProfile:
    """The predicted step's op-profile numbers (XProf's definitions) from its timeline events."""
    rows = ((e.name, _category(e.name, e.category, opcodes), e.end_ns - e.start_ns) for e in events)
    return op_profile(op_costs(rows, costs), peak_flops_per_s=peak_flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s)


def xprof_totals(
    totals: Mapping[str, tuple[str, float, int]],
    costs: Mapping[str, tuple[float, float]],
    opcodes: Mapping[str, str],
    *,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
) -> XprofProfile:
    """:func:`xprof_entry` from per-op totals (:func:`harness.metrics.timeline.op_totals`: op ->
    (category, ns, executions)) instead of the events they sum."""
    ops = []
    for name, (category, ns, count) in totals.items():
        flops, hbm = costs.get(name, (0.0, 0.0))
        xcat = _category(name, category, opcodes)
        ops.append(OpCost(name, xcat, ns, flops * count, hbm * count, count))
    return op_profile(ops, peak_flops_per_s=peak_flops_per_s, hbm_bytes_per_s=hbm_bytes_per_s)


def xops(events: Sequence[Any], costs: Mapping[str, tuple[float, float]], opcodes: Mapping[str, str]) -> list[XOp]:
    """The timeline as XSpace ops: transfers off the stream, everything else on ``XLA Ops``."""
    out = []
    for e in events:
        transfer = e.name.endswith(TRANSFER_SUFFIX)
        flops, hbm = (0.0, 0.0) if transfer else costs.get(e.name, (0.0, 0.0))
        out.append(
            XOp(e.name, _category(e.name, e.category, opcodes), e.start_ns, e.end_ns, flops, hbm, stream=not transfer)
        )
    return out


def write_predicted_xspace(
    where: Path,
    events: Sequence[Any],
    costs: Mapping[str, tuple[float, float]],
    opcodes: Mapping[str, str],
    *,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
) -> Path:
    """The timeline as ``where/plugins/profile/predicted/predicted.xplane.pb``: ``xprof --logdir
    where`` opens it (trace viewer, op profile, HLO stats, roofline)."""
    return write_xspace(
        where / PROFILE_DIR / XPLANE_NAME,
        xops(events, costs, opcodes),
        peak_flops_per_s=peak_flops_per_s,
        hbm_bytes_per_s=hbm_bytes_per_s,
    )
