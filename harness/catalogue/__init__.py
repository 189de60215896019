"""The metric catalogue: every metric a record's stage flattens to, declared once.

A :class:`Metric` says what one flat, dotted metric name (``time``, ``memory.peak_bytes``,
``collectives.all-gather.count``, ``predicted.step_s``) is: its record family, unit, kind, which
way is better, how the gate compares it and with what default tolerance, a short label, a one-line
definition, and where its value sits in its typed family (``path``: a chain of fields of
:mod:`harness.families`). The flattener, the gate's rules and tolerances, the manifest's tolerance
keys (:func:`split_tolerance_key`), the CSV's columns, the page's labels, the CLI's tables and the
docs' metric reference all derive from :data:`METRICS`. A leaf: imports only :mod:`harness.vocabulary`.
Adding a metric is one entry in :mod:`harness.catalogue.entries` plus the producer that fills its
field; a metric with ``path=None`` is computed by the flattener (its definition says how).

Fields: ``kind``: ``deterministic`` (a function of the compiled program and the spec), ``timing``
(measured on this machine: gated only against the same kind of machine) or ``info`` (never gated).
``rule``: ``timing`` (raw samples, ratio of medians + Mann-Whitney), ``exact`` (a count that must not
change), ``relative`` (within ``tolerance``), ``monotonic`` (any increase regresses) or ``info``.
``better``: ``lower``, ``higher`` (the gate reads a drop as the regression) or ``""`` (neither: a
FLOP count; a gated one regresses on a change beyond its tolerance either way).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools

from harness.catalogue.entries import METRICS as METRICS
from harness.catalogue.metric import ACCURACY_L2 as ACCURACY_L2
from harness.catalogue.metric import ACCURACY_MAX as ACCURACY_MAX
from harness.catalogue.metric import COMPILE_S as COMPILE_S
from harness.catalogue.metric import DOES_NOT_FIT as DOES_NOT_FIT
from harness.catalogue.metric import FAMILIES
from harness.catalogue.metric import MEMORY_BOUND as MEMORY_BOUND
from harness.catalogue.metric import MEMORY_PEAK as MEMORY_PEAK
from harness.catalogue.metric import PREDICTED_SCOPE as PREDICTED_SCOPE
from harness.catalogue.metric import PREDICTED_STEP as PREDICTED_STEP
from harness.catalogue.metric import RECOMPILES as RECOMPILES
from harness.catalogue.metric import SCOPE as SCOPE
from harness.catalogue.metric import TIME as TIME
from harness.catalogue.metric import TOTAL as TOTAL
from harness.catalogue.metric import TRACE_WASTED as TRACE_WASTED
from harness.catalogue.metric import Metric as Metric
from harness.catalogue.metric import collective as collective
from harness.catalogue.metric import host_codegen as host_codegen
from harness.catalogue.metric import scoped as scoped
from harness.catalogue.metric import template as template

NAMES: dict[str, Metric] = {m.name: m for m in METRICS}
UNKNOWN = Metric("(unknown)", "static", "", "info", "info", "", "not in the catalogue: shown, never gated", better="")


def get(name: str) -> Metric:
    """The catalogue's entry for ``name``; an uncatalogued name (a collective kind an older record
    has) reads as :data:`UNKNOWN` under its own name: shown, never gated."""
    metric = NAMES.get(name)
    if metric is not None:
        return metric
    if (tpl := NAMES.get(template(name))) is not None:
        return dataclasses.replace(tpl, name=name, label=f"{tpl.label}: {name}", path=None)
    if name.startswith("collectives.") and (kin := NAMES.get(collective(TOTAL, name.rsplit(".", 1)[-1]))):
        return Metric(name, kin.family, kin.unit, kin.kind, kin.rule, name, kin.definition, kin.better, kin.tolerance)
    return Metric(name, family(name), "", "info", "info", name, UNKNOWN.definition, better="")


def rank(name: str) -> int:
    """A metric's place in table order (uncatalogued ones last)."""
    return _RANK.get(name, len(_RANK))


_RANK = {m.name: i for i, m in enumerate(METRICS)}


def of_family(fam: str) -> tuple[Metric, ...]:
    """The catalogued metrics of one record family, in table order."""
    return tuple(m for m in METRICS if m.family == fam)


def family(name: str) -> str:
    """The record family (``measured``, ``static``, ``trace``, ``predicted``) a metric comes from."""
    if name in NAMES:
        return NAMES[name].family
    prefix = name.split(".")[0]
    if prefix in ("trace", "predicted"):
        return prefix
    return "measured" if prefix in ("time", "recompiles", "transfers", "accuracy") else "static"


# --------------------------------------------------------------------------- tolerance keys


def tolerance_forms(name: str) -> list[str]:
    """The tolerance keys (without a stage) that apply to a metric, most specific first."""
    parts = name.split(".")
    names = [".".join(parts[:n]) for n in range(len(parts), 0, -1)]
    if parts[0] == "collectives" and len(parts) == 3:
        names.insert(1, f"collectives.{parts[2]}")
    fam = family(name)
    forms = [form for n in names for form in (n if n == fam or n.startswith(f"{fam}.") else f"{fam}.{n}", n)]
    return list(dict.fromkeys(forms))


@functools.cache
def tolerance_names() -> frozenset[str]:
    """Every tolerance key (without a stage) that names at least one metric."""
    return frozenset(form for m in METRICS for form in tolerance_forms(m.name))


def split_tolerance_key(key: str) -> tuple[str | None, str]:
    """``(stage or None, the metric part)`` of a tolerance key; ValueError if it names no metric.
    A key that names no metric would silently gate nothing, so the manifest rejects it."""
    names = tolerance_names()
    if key in names:
        return None, key
    stage, _, rest = key.partition(".")
    if rest in names and stage not in FAMILIES and stage not in {n.split(".")[0] for n in names}:
        return stage, rest
    close = difflib.get_close_matches(rest if rest in names else key, sorted(names), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"matches no metric (a metric name or prefix, e.g. 'time', 'static.memory', "
        f"'collectives.count', optionally after a stage name){hint}"
    )
