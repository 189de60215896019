"""The names the harness's parts share: collective kinds, op categories, scope names, statuses and
verdicts. Metrics write them into records, results compare them and reports show them; each part
imports them from here, not from the module that first produced them.

A leaf: imports nothing of the harness, the model or JAX. The enums are ``StrEnum``: a member *is*
its string (``Status.OK == "ok"``), so records stay plain JSON and old records read unchanged.
"""

from __future__ import annotations

from enum import StrEnum


class Collective(StrEnum):
    """A collective's kind: the HLO opcode (async ``-start``/``-done`` pairs count as their kind)."""

    ALL_GATHER = "all-gather"
    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    COLLECTIVE_PERMUTE = "collective-permute"
    ALL_TO_ALL = "all-to-all"
    RAGGED_ALL_TO_ALL = "ragged-all-to-all"
    COLLECTIVE_BROADCAST = "collective-broadcast"


# Every collective kind, in the order tables, lanes and per-kind metrics list them.
KINDS: tuple[str, ...] = tuple(Collective)

# An op's category: ``compute``, or the kind of collective it is.
COMPUTE = "compute"
CATEGORIES: tuple[str, ...] = (COMPUTE, *KINDS)

# The scope of an instruction none of whose JAX path names a model scope, and how it is shown.
UNATTRIBUTED = ""
UNATTRIBUTED_LABEL = "(unattributed)"
# The model scope of one transformer block (the name ``ltx2.scopes`` gives it).
BLOCK_SCOPE = "block"


def label(scope: str) -> str:
    """A scope as shown to people: the path, or ``(unattributed)``."""
    return scope or UNATTRIBUTED_LABEL


class Status(StrEnum):
    """How a variant's run ended."""

    OK = "ok"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CRASHED = "crashed"


class StageStatus(StrEnum):
    """How one stage of a variant ended. ``does-not-fit``: compiled but not run, because the memory
    it needs per device exceeds the device's (its static metrics are recorded, its measured ones not)."""

    OK = "ok"
    FAILED = "failed"
    DOES_NOT_FIT = "does-not-fit"


class Change(StrEnum):
    """A metric's verdict against its baseline: a significant change beyond the threshold (improved,
    regressed), a change within noise, none, or a metric on one side only (missing, new)."""

    IMPROVED = "improved"
    REGRESSED = "regressed"
    UNCHANGED = "unchanged"
    NOISE = "noise"
    MISSING = "missing"  # only in the baseline
    NEW = "new"  # only in the new run
