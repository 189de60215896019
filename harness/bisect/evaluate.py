"""One bisection run at one commit: the harness of that commit's worktree runs one variant's one stage.

:class:`HarnessMeasure` writes the manifest once, cut down to the stage and the metric family the
metric needs (``static`` for collectives, memory and FLOPs; ``measured`` for timings, recompiles and
transfers), and runs ``python -m harness sweep`` from the commit's tree with that tree first on the
path, so each commit's own harness and model code measure it. The value comes from the sweep's
record through :func:`harness.results.compare.value_of`, the same flattening the gate reads.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import catalogue
from harness.bisect.search import Measurement
from harness.plan.toml import toml_key, toml_value
from harness.results import store
from harness.results.compare import value_of
from harness.revision import Worktrees, sweep_at

WAIT_KEYS = ("max_load", "max_load_wait_s")  # the bisection's runs do not wait for a quiet machine


class MeasureError(RuntimeError):
    """A commit whose run gave no value for the metric (it failed, or lacks the stage)."""


@dataclass(frozen=True)
class Metric:
    """What is bisected: one metric (a gate metric name) of one stage of one variant."""

    variant: str
    stage: str
    metric: str

    @property
    def timing(self) -> bool:
        return catalogue.get(self.metric).rule == "timing"

    @property
    def family(self) -> str:
        return "measured" if catalogue.family(self.metric) == "measured" else "static"

    def __str__(self) -> str:
        return f"{self.variant} / {self.stage} / {self.metric}"


def to_toml(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """TOML text of parsed TOML data (tables as ``[a.b]`` sections, tables in arrays inline)."""
    lines = [f"{toml_key(k)} = {toml_value(v)}" for k, v in data.items() if not isinstance(v, Mapping)]
    for k, v in data.items():
        if isinstance(v, Mapping):
            path = (*prefix, k)
            lines += ["", "[" + ".".join(toml_key(p) for p in path) + "]", to_toml(v, path).strip("\n")]
    return "\n".join(lines) + "\n"


def cut_manifest(source: str, metric: Metric, *, trace: bool = False) -> str:
    """The manifest's text with only ``metric``'s stage and family (and a trace when asked)."""
    raw = tomllib.loads(source)
    raw.setdefault("workload", {})["stages"] = [metric.stage]
    run = raw.setdefault("run", {})
    run["metrics"] = ["static", "measured"] if trace else [metric.family]
    run["trace"] = trace
    for key in WAIT_KEYS:
        run.pop(key, None)
    return to_toml(raw)


def measurement(records_path: Path, metric: Metric, commit: str) -> Measurement:
    """``metric``'s value (and samples) from the latest record of its variant in a results file."""
    records = store.latest_by_variant(store.load_records(records_path)) if records_path.exists() else {}
    record = next((r for r in records.values() if r.variant.name == metric.variant), None)
    if record is None:
        raise MeasureError(f"{commit[:12]}: no record of {metric.variant} in {records_path}")
    if not record.ok:
        raise MeasureError(f"{commit[:12]}: {metric.variant} {record.status}: {(record.error or '').strip()[-400:]}")
    value = value_of(record, metric.stage, metric.metric)
    if value is None:
        raise MeasureError(f"{commit[:12]}: the record has no {metric.stage} {metric.metric}")
    return Measurement(commit, value.value, value.samples, record)


class HarnessMeasure:
    """``commit -> Measurement``: the cut-down manifest run by the harness of the commit's worktree."""

    def __init__(
        self,
        trees: Worktrees,
        manifest_source: str,
        manifest_name: str,
        metric: Metric,
        reports: Path,
        *,
        trace: bool = False,
        log: Callable[[str], None] = lambda _: None,
    ):
        self.trees, self.metric, self.reports, self.log = trees, metric, reports.resolve(), log
        self.reports.mkdir(parents=True, exist_ok=True)
        self.manifest = self.reports / f"{manifest_name}.toml"
        self.manifest.write_text(cut_manifest(manifest_source, metric, trace=trace))
        self.runs = 0

    def __call__(self, commit: str) -> Measurement:
        tree = self.trees.get(commit)
        self.runs += 1
        sweep_id = store.check_sweep_id(f"{self.reports.name}-{commit[:12]}-{self.runs}")
        self.log(f"{commit[:12]}: python -m harness sweep ... --sweep-id {sweep_id} (in {tree})")
        done = sweep_at(tree, self.manifest, self.reports, sweep_id, self.metric.variant, "--no-report", capture=True)
        log_path = self.reports / f"{sweep_id}.log"
        log_path.write_text(done.stdout + done.stderr)
        try:
            return measurement(store.results_path(self.reports, sweep_id), self.metric, commit)
        except MeasureError as e:
            raise MeasureError(f"{e} (its sweep's output: {log_path})") from None
