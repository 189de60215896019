"""The perf gate: a run's records against a baseline's, as an exit code and one line per failure.

Exit codes (the table with what to do: docs/gates.md): 0 clean; 1 a gated metric regressed; 2 the
gate could not run completely (bad manifest, missing or mismatched baseline, a failed or missing
variant, changed settings, a gated metric that disappeared, too few timing samples for the test to
fire), also when it found regressions: a partial answer is not a clean bill of health; 3 nothing
regressed but predicted metrics were priced by another model than the baseline's (another spec or
simulator version, or the same program priced differently): re-baseline on purpose, saying why. A
regression wins over a changed model (exit 1, the model change printed too).

Per metric the rule is its catalogue entry's (:mod:`harness.results.compare`); a timing fails only
with a median ratio above ``timing_ratio`` *and* a Mann-Whitney p-value (pairs of consecutive calls)
below ``alpha`` (:mod:`harness.results.stats`). Timings, and a CPU program's memory, traffic and
cost metrics (:func:`harness.catalogue.host_codegen`: XLA:CPU compiles for the host), are gated only
against a baseline record of the run's machine class (:func:`for_class`); every other deterministic
metric is gated everywhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness import catalogue
from harness.families import Measured
from harness.plan.manifest import Gate
from harness.results import stats
from harness.results.compare import MISSING, Comparison, ComparisonSet, compare_records
from harness.results.record import DOES_NOT_FIT, Record

CLEAN, REGRESSION, ERROR, MODEL_CHANGED = 0, 1, 2, 3
TIMINGS = ("auto", "on", "off")


def machine_fingerprint(record: Record) -> tuple[Any, ...]:
    return record.machine.fingerprint


def same_machine(baseline: Sequence[Record], now: Sequence[Record]) -> bool:
    prints = {machine_fingerprint(r) for r in [*baseline, *now] if r.ok}
    return len(prints) <= 1


def for_class(baseline: Sequence[Record], now: Sequence[Record]) -> list[Record]:
    """One baseline record per variant: the latest of the run's machine class where the baseline holds
    one, else the latest. A baseline may keep a CPU variant's record per machine class (XLA:CPU
    compiles for the host, so each class has its own program); a later record of another class never
    replaces one of the run's."""
    wanted = {r.variant.name: machine_fingerprint(r) for r in now}
    chosen: dict[str, Record] = {}
    for r in baseline:
        name, held = r.variant.name, chosen.get(r.variant.name)
        if held is None or machine_fingerprint(held) != wanted.get(name) or machine_fingerprint(r) == wanted.get(name):
            chosen[name] = r
    return list(chosen.values())


def pool_rounds(rounds: Sequence[Sequence[Record]]) -> list[Record]:
    """One record per variant from several runs of the same code (interleaved rounds).

    Timing samples are concatenated across rounds (``samples_s``) and kept per round
    (``rounds_s``, for the per-round consistency check of ``stats.compare_samples``);
    everything else comes from the last round.
    A variant that failed in any round stays failed (with that round's error).
    """
    pooled: dict[str, Record] = {}
    for run in rounds:
        for record in run:
            name = record.variant.name
            if name in pooled and not pooled[name].ok:
                continue  # failed once: stays failed
            if name not in pooled or not record.ok:
                pooled[name] = _with_measured(record, lambda stage, m: m.replace(rounds_s=[m.samples]))
                continue
            previous = pooled[name]

            def pooled_samples(stage: str, m: Measured, previous: Record = previous) -> Measured:
                entry = previous.stages.get(stage)
                before = entry.measured if entry is not None else None
                if before is None or not before.samples:
                    return m
                return m.replace(rounds_s=[*(before.rounds_s or ()), m.samples], samples_s=before.samples + m.samples)

            pooled[name] = _with_measured(record, pooled_samples)
    return list(pooled.values())


def _with_measured(record: Record, change: Callable[[str, Measured], Measured]) -> Record:
    """``record`` with ``change(stage, measured)`` applied to every stage that has timing samples."""
    stages = {
        stage: dataclasses.replace(entry, measured=change(stage, entry.measured))
        if entry.measured is not None and entry.measured.samples
        else entry
        for stage, entry in record.stages.items()
    }
    return record.replace(stages=stages)


REBASELINE = (
    "predicted metrics were not compared; if the change to the model is intended, re-baseline on purpose "
    "(python -m harness baseline update <manifest>) and commit it saying why"
)


def model_changes(comparisons: Sequence[Comparison]) -> list[str]:
    """One line per variant and stage whose predictions were priced by another model."""
    seen: dict[tuple[str, str], Comparison] = {}
    for c in comparisons:
        if c.model_changed:
            seen.setdefault((c.variant, c.stage), c)
    return [f"{v} {s}: {c.model_changed} (first: {c.metric})" for (v, s), c in seen.items()]


@dataclass
class GateResult:
    exit_code: int
    comparisons: ComparisonSet | None
    failures: list[Comparison] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # why the gate could not run completely
    notes: list[str] = field(default_factory=list)
    timings_gated: bool = True
    model_changes: list[str] = field(default_factory=list)  # per variant and stage: what changed

    def lines(self) -> list[str]:
        """What the gate prints: problems, then one line per failing metric, then a summary."""
        out = [f"GATE ERROR  {p}" for p in self.problems]
        out += [format_failure(c) for c in self.failures]
        out += [f"MODEL CHANGED  {m}" for m in self.model_changes]
        if self.model_changes:
            out.append(f"MODEL CHANGED  {REBASELINE}")
        out += [f"note: {n}" for n in self.notes]
        n = len(self.comparisons.comparisons) if self.comparisons else 0
        summary = {
            CLEAN: "gate passed",
            REGRESSION: "gate FAILED: regression",
            ERROR: "gate could not run",
            MODEL_CHANGED: "gate FAILED: the model changed, re-baseline with a reason",
        }[self.exit_code]
        out.append(
            f"{summary}: {len(self.failures)} regressed, {len(self.problems)} problems, "
            f"{n} metrics compared (exit {self.exit_code})"
        )
        return out


def format_value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "s":
        for scale, suffix in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
            if abs(value) >= scale or suffix == "us":
                return f"{value / scale:.4g} {suffix}"
    if unit == "bytes":
        for scale, suffix in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.4g} {suffix} ({value:.0f} B)"
        return f"{value:.0f} B"
    if unit == "fraction":
        return f"{value:.1%}"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value)}"
    return f"{value:.4g}"


def format_failure(c: Comparison) -> str:
    ratio = c.ratio
    ratio_s = "-" if ratio is None else ("inf" if ratio == float("inf") else f"{ratio:.3f}x")
    return (
        f"REGRESSED  {c.variant}  {c.stage}  {c.metric}: baseline {format_value(c.baseline, c.unit)}, "
        f"now {format_value(c.now, c.unit)}, ratio {ratio_s}; {c.detail}"
    )


def evaluate(
    baseline: Sequence[Record],
    now: Sequence[Record],
    gate: Gate | None = None,
    *,
    timings: str = "auto",
) -> GateResult:
    """Gate the records of a run against a baseline's records (both plain record dicts)."""
    if timings not in TIMINGS:
        raise ValueError(f"timings must be one of {TIMINGS}, got {timings!r}")
    gate = gate or Gate()
    if not baseline:
        return GateResult(ERROR, None, problems=["the baseline has no records"])
    if not now:
        return GateResult(ERROR, None, problems=["the run produced no records"])
    baseline = for_class(baseline, now)
    gated_timings = timings == "on" or (timings == "auto" and same_machine(baseline, now))
    result = compare_records(baseline, now, gate, timings=gated_timings)
    out = GateResult(CLEAN, result, timings_gated=gated_timings)
    if not gated_timings and timings == "auto":
        out.notes.append(
            "timings not gated: baseline and run come from different machines "
            "(deterministic metrics still are; --timings on forces them)"
        )
    for name, error in result.failed_now.items():
        first = error.strip().splitlines()[-1] if error.strip() else "failed"
        out.problems.append(f"variant {name} failed: {first[:300]}")
    for name in result.only_in_baseline:
        out.problems.append(f"variant {name} is in the baseline but not in this run")
    for name in result.only_in_now:
        out.notes.append(f"variant {name} has no baseline yet (not gated)")
    for name, (old, new) in result.changed_settings.items():
        out.problems.append(
            f"variant {name} changed settings since the baseline (id {old} -> {new}); "
            "update the baseline on purpose if that is intended"
        )
    failed = set(result.failed_now)
    # A stage that no longer fits was not run: its measured metrics are missing because of that, and
    # its does_not_fit metric is the regression.
    unfit = {(r.variant.name, s) for r in now for s, e in r.stages.items() if e.verdict == DOES_NOT_FIT}
    for c in result.comparisons:
        if c.variant in failed or not c.gated:
            continue
        if c.verdict == MISSING and (c.variant, c.stage) in unfit:
            continue
        if c.verdict == MISSING and not catalogue.get(c.metric).optional:
            out.problems.append(f"{c.variant} {c.stage} {c.metric}: in the baseline, missing from this run")
        elif c.kind == "timing" and c.result is not None and not c.result.can_fire:
            out.problems.append(
                f"{c.variant} {c.stage} time: {c.result.n_base} vs {c.result.n_head} samples "
                f"can never reach p < {gate.alpha:g}; need >= {stats.min_samples(gate.alpha)} "
                "repeats per side ([run] repeats)"
            )
    shown = [c for c in result.comparisons if c.other_class and c.variant not in failed]
    if shown:
        variants = sorted({c.variant for c in shown})
        out.notes.append(
            f"{len(shown)} metrics of CPU programs ({', '.join(variants)}) shown, not gated: {shown[0].other_class} "
            "(memory, traffic and cost of the compiled program; collectives, recompiles and shapes are gated)"
        )
    out.notes += [
        f"{c.variant} {c.stage} time: samples taken under load ({c.under_load}); its verdict "
        f"({c.verdict}) may reflect the machine, not the code"
        for c in result.comparisons
        if c.gated and c.under_load
    ]
    out.failures = [c for c in result.regressions if c.variant not in failed]
    out.model_changes = model_changes([c for c in result.model_changes if c.variant not in failed])
    out.exit_code = (
        ERROR if out.problems else REGRESSION if out.failures else MODEL_CHANGED if out.model_changes else CLEAN
    )
    return out
