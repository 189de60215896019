"""A history of nightly runs, one gated metric's series over it, and the change points in each.

A folder of run files, ``<history>/<manifest>/<UTC start>-<commit12>.jsonl`` (one per nightly run, its
records as the sweep wrote them; in CI the ``perf-history`` branch), ordered by their records' earliest
``started_at``. Per (variant, stage, gated metric) a :class:`Series` holds one value per run (a
timing's median and fastest call; a deterministic metric's value). :func:`analyse` finds a measured
time's change points (:mod:`harness.results.changepoint`) in the logs of each run's fastest call, the
run's least disturbed summary; a deterministic metric changes wherever its value does; fewer runs
than a change point needs on both sides is "too little data". Why each choice: docs/gates.md,
"History and change points". Pure Python over records: the command and the trend page both read it.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import shutil
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import catalogue
from harness.results import changepoint
from harness.results.compare import flatten_record
from harness.results.record import Record
from harness.results.store import load_records

SUFFIX = ".jsonl"
TOO_LITTLE = "too little data"
OK = "ok"


@dataclass(frozen=True)
class Run:
    """One nightly run: its file (relative to the history folder), start, commit and records."""

    path: str
    started_at: str
    commit: str | None
    records: tuple[Record, ...]


@dataclass(frozen=True)
class Point:
    run: int  # index in the history's runs
    value: float  # a timing's median over its calls, as the gate reads it; else the metric's value
    loaded: bool  # timings: measured while other processes kept the machine busy
    low: float  # a timing's fastest call (what change points are found in); else the value


@dataclass(frozen=True)
class Series:
    variant: str
    stage: str
    metric: str
    kind: str  # the catalogue's kind: timing (measured on this machine) or deterministic
    rule: str  # the catalogue's gate rule: timing, exact, relative, monotonic
    unit: str
    points: tuple[Point, ...]

    @property
    def key(self) -> str:
        return f"{self.variant} / {self.stage} / {self.metric}"

    @property
    def measured(self) -> bool:
        """Measured on the machine (a timing, a warm compile's seconds): noisy, so tested for change
        points; other gated metrics are deterministic and change exactly where their value does."""
        return self.kind == "timing"


@dataclass(frozen=True)
class Change:
    """The series moved between run ``before`` and run ``after`` (indices into the history's runs)."""

    before: int
    after: int
    ratio: float  # timings: median of the runs' fastest calls after / before; else the values' ratio
    p_value: float | None  # Student's t between the segments around it (timings); None when deterministic


@dataclass(frozen=True)
class Analysis:
    series: Series
    status: str  # OK or TOO_LITTLE
    changes: tuple[Change, ...]
    note: str = ""


# --------------------------------------------------------------------------- the folder


def run_file_name(records: Sequence[Record]) -> str:
    """``<UTC start, compact>-<commit12>.jsonl`` for a run's records (``nocommit`` without one)."""
    start = min(r.started_at for r in records)
    stamp = re.sub(r"[^0-9T]", "", start.split("+")[0].split(".")[0]) + "Z"
    commit = next((str(r.commit) for r in records if r.commit), "nocommit")
    return f"{stamp}-{commit[:12]}{SUFFIX}"


def append(history: Path, manifest: str, results: Path) -> Path:
    """Copy a run's results file into the history as a new run file; the path written."""
    records = load_records(results)
    if not records:
        raise ValueError(f"{results}: no records to append to the history")
    target = history / manifest / run_file_name(records)
    if target.exists():
        raise ValueError(f"{target} is already in the history (the same run appended twice?)")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(results, target)
    return target


def load(history: Path, manifest: str) -> list[Run]:
    """Every run of ``manifest`` in the history, oldest first."""
    folder = history / manifest
    if not folder.is_dir():
        raise ValueError(f"no runs of {manifest!r} in the history {history} (expected {folder}/)")
    runs = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        records = tuple(load_records(path))
        if records:
            commit = next((str(r.commit) for r in records if r.commit), None)
            start = min(r.started_at for r in records)
            runs.append(Run(str(path.relative_to(history)), start, commit, records))
    return sorted(runs, key=lambda r: (r.started_at, r.path))


def series(runs: Sequence[Run]) -> list[Series]:
    """One series per (variant, stage, gated metric) seen in any ok record, in first-seen order."""
    points: dict[tuple[str, str, str], list[Point]] = {}
    for i, run in enumerate(runs):
        for record in run.records:
            if not record.ok:
                continue
            for (stage, metric), value in flatten_record(record).items():
                if catalogue.get(metric).gated and math.isfinite(value.value):
                    points.setdefault((record.variant.name, stage, metric), []).append(
                        Point(i, value.value, value.loaded, min(value.samples, default=value.value))
                    )
    out = []
    for (v, s, m), p in points.items():
        entry = catalogue.get(m)
        out.append(Series(v, s, m, entry.kind, entry.rule, entry.unit, tuple(p)))
    return out


# --------------------------------------------------------------------------- change points


def _ratio(before: Sequence[float], after: Sequence[float]) -> float:
    b, a = statistics.median(before), statistics.median(after)
    return a / b if b else (1.0 if a == b else math.inf)


def analyse(
    s: Series,
    *,
    alpha: float = changepoint.ALPHA,
    min_magnitude: float = changepoint.MIN_MAGNITUDE,
    min_size: int = changepoint.MIN_SIZE,
) -> Analysis:
    """Where ``s`` changed (see the module docstring)."""
    values = [p.low if s.measured else p.value for p in s.points]
    if not s.measured:
        changes = tuple(
            Change(s.points[i - 1].run, s.points[i].run, _ratio([values[i - 1]], [values[i]]), None)
            for i in range(1, len(values))
            if values[i] != values[i - 1]
        )
        return Analysis(s, OK, changes)
    if changepoint.too_short(len(values), min_size) or min(values) <= 0:
        need = 2 * min_size
        return Analysis(
            s, TOO_LITTLE, (), f"{len(values)} run(s); a change point needs {need}, {min_size} on each side"
        )
    found = changepoint.e_divisive(
        [math.log(v) for v in values], alpha=alpha, min_magnitude=min_magnitude, min_size=min_size
    )
    cuts = sorted(c.index for c in found)
    bounds = [0, *cuts, len(values)]
    moved: list[Change] = []
    for c in sorted(found, key=lambda c: c.index):
        k = cuts.index(c.index)
        before, after = values[bounds[k] : c.index], values[c.index : bounds[k + 2]]
        moved.append(Change(s.points[c.index - 1].run, s.points[c.index].run, _ratio(before, after), c.p_value))
    return Analysis(s, OK, tuple(moved))


# --------------------------------------------------------------------------- handing over


def change_name(s: Series, change: Change, runs: Sequence[Run]) -> str:
    """A file-name stem for what is kept about one change point (its bisect and diff results)."""
    raw = f"{s.variant}--{s.stage}--{s.metric}--{runs[change.before].path}--{runs[change.after].path}"
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", raw.replace(SUFFIX, ""))


def bisect_command(s: Series, change: Change, runs: Sequence[Run], manifest: str) -> str | None:
    """The ``harness bisect`` command between the commits around a change; None when both runs
    measured the same commit (then the machine moved, not the code)."""
    good, bad = runs[change.before].commit, runs[change.after].commit
    if not good or not bad or good == bad:
        return None
    args = ["python", "-m", "harness", "bisect", good, bad, "--manifest", manifest]
    args += ["--variant", s.variant, "--stage", s.stage, "--metric", s.metric]
    return shlex.join(args)


def diff_command(s: Series, change: Change, runs: Sequence[Run], history: Path | str) -> str:
    """The ``harness diff`` command between the runs around a change (the two run files)."""
    before, after = (str(Path(history) / runs[i].path) for i in (change.before, change.after))
    return shlex.join(["python", "-m", "harness", "diff", before, after, "--variant", s.variant, "--stage", s.stage])


def summary(analyses: Sequence[Analysis], runs: Sequence[Run]) -> list[dict[str, object]]:
    """The analyses as JSON-ready rows (``harness history --json``)."""
    return [
        {
            "series": a.series.key,
            "kind": a.series.kind,
            "rule": a.series.rule,
            "runs": len(a.series.points),
            "status": a.status,
            "note": a.note,
            "changes": [
                {
                    "before": runs[c.before].path,
                    "after": runs[c.after].path,
                    "commits": [runs[c.before].commit, runs[c.after].commit],
                    "ratio": c.ratio,
                    "p_value": c.p_value,
                }
                for c in a.changes
            ],
        }
        for a in analyses
    ]


def dumps(rows: list[dict[str, object]]) -> str:
    return json.dumps(rows, indent=1) + "\n"
