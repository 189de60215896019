"""Compiled scores of layout candidates, through the sweep machinery: each candidate is a variant of
the search manifest (its overrides: :meth:`Candidate.overrides`, plus the proxy depth), run by
:func:`harness.run.runner.run_sweep` into ``<reports>/<sweep id>/results.jsonl``.

A candidate whose variant id already has a record there (ok, does-not-fit or failed) is read, not
run again: a re-run of a search compiles nothing it compiled before. A proxy's predicted step is
scaled per block to full depth (``step * layers / proxy layers``) and its memory by adding the
weights of the blocks it left out (the compiled arguments scaled likewise); the full-depth compiles
of the finalists say what the scaling missed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from harness.expansion import resolve
from harness.plan.manifest import Manifest, ManifestError
from harness.plan.variants import Sweep, Variant
from harness.results import store
from harness.results.record import Record
from harness.results.uncertain import Uncertain
from harness.run.runner import SweepOptions, run_sweep
from harness.search.space import Candidate
from harness.search.strategy import Score
from harness.vocabulary import StageStatus, Status

WHERE = ("search",)


@dataclass(frozen=True)
class SweepEvaluator:
    """Evaluate candidates as variants of ``manifest`` (see the module docstring)."""

    manifest: Manifest
    base: str
    full_layers: int
    proxy: Mapping[str, Any]  # overrides of a proxy compile (depth); empty: no proxy
    proxy_layers: int
    reports_dir: Path
    sweep_id: str
    hbm_bytes: float | None
    stream: TextIO | None = None

    @property
    def results_path(self) -> Path:
        return store.results_path(self.reports_dir, self.sweep_id)

    def variant(self, c: Candidate, full: bool) -> Variant:
        """The candidate as a variant (ManifestError where the model rejects it)."""
        depth = self.full_layers if full or not self.proxy else self.proxy_layers
        overrides = {**c.overrides(self.base), **({} if full else self.proxy)}
        return resolve(self.manifest, f"L{depth}:{c.name}", overrides, WHERE)

    def __call__(self, cands: Sequence[Candidate], full: bool) -> dict[Candidate, Score]:
        scores: dict[Candidate, Score] = {}
        variants: dict[Candidate, Variant] = {}
        for c in cands:
            try:
                variants[c] = self.variant(c, full)
            except ManifestError as e:
                scores[c] = Score(StageStatus.FAILED, error=f"rejected by the model: {e.reason}")
        known = store.latest_by_variant(store.load_records(self.results_path))
        todo = tuple(v for v in variants.values() if v.id not in known)
        if todo:
            run_sweep(Sweep(self.manifest, todo), SweepOptions(self.reports_dir, self.sweep_id), self.stream)
            known = store.latest_by_variant(store.load_records(self.results_path))
        depth = self.full_layers if full or not self.proxy else self.proxy_layers
        for c, v in variants.items():
            record = known.get(v.id)
            scores[c] = (
                Score(StageStatus.FAILED, variant_id=v.id, error="no record written")
                if record is None
                else score_of(record, self.manifest.workload.stages[0], depth, self.full_layers, self.hbm_bytes)
            )
        return {c: scores[c] for c in cands}


def score_of(record: Record, stage: str, depth: int, full_layers: int, hbm_bytes: float | None) -> Score:
    """A record's score for the search: predicted step and memory scaled from ``depth`` to full depth."""
    entry = record.stages.get(stage)
    if entry is None or record.status == Status.FAILED or entry.status == StageStatus.FAILED:
        error = (entry.error if entry is not None else None) or record.error or "failed"
        return Score(StageStatus.FAILED, depth=depth, variant_id=record.variant.id, error=error)
    scale = full_layers / depth
    predicted, static = entry.predicted, entry.static
    memory = static.memory if static is not None else None
    needed = (memory.bound_bytes or memory.peak_bytes) if memory is not None else None
    if needed is not None and memory is not None:
        needed = needed + (memory.argument_bytes or 0) * (scale - 1)
    fits = static.target.fits if static is not None and static.target is not None else None
    if entry.status == StageStatus.DOES_NOT_FIT or (
        needed is not None and hbm_bytes is not None and needed > hbm_bytes
    ):
        fits = False
    unc = Uncertain.of(predicted, scale)
    device = predicted.device if predicted is not None else None
    exposed = device.exposed_collective_ns if device is not None else None
    return Score(
        status=StageStatus.DOES_NOT_FIT if fits is False else StageStatus.OK,
        step_s=unc.step_s if unc is not None else None,
        depth=depth,
        fits=fits,
        memory_bytes=needed,
        exposed_all_gather=predicted.exposed_all_gather_fraction if predicted is not None else None,
        exposed_collective_s=None if exposed is None else exposed * 1e-9 * scale,
        wasted=predicted.wasted_fraction if predicted is not None else None,
        variant_id=record.variant.id,
        error=None if unc is not None else "no predicted step (see the record's notes)",
        interval_s=unc.interval_s if unc is not None else None,
        points_s=tuple(unc.points_s.items()) if unc is not None else (),
        spec=unc.spec if unc is not None else "",
    )
