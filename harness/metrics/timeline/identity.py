"""What a prediction is a function of, as fingerprints the gate compares (docs/gates.md).

A predicted step is a pure function of the compiled program and the timeline spec, so the gate can
hold it to a tolerance of a few tenths of a percent, provided both sides were priced by the same
model. Three fingerprints say what the model and the program were:

* :func:`spec_identity`: sha256 over the spec's numbers (every constant's value, unit and
  uncertainty, the topology, the link sharing), leaving out the prose (sources, notes, the name);
* :data:`SIMULATOR_VERSION`: bumped by hand whenever a change to the simulator changes what it
  predicts for the same program and spec;
* :func:`program_fingerprint`: sha256 over the optimized HLO text without what says where it came
  from (``metadata={...}``: JAX op names, source lines; the module's source tables, ``FileNames``
  to ``StackFrames``, paths included): the same program compiled from edited or moved source is
  the same.

The gate (:mod:`harness.results.compare`) reads them from each record's ``predicted.identity``: a
different spec or simulator version is "the model changed, re-baseline with a reason"; the same
program priced differently under the same spec and version is a simulator change that was not
declared (the version was not bumped), reported the same way, never as a regression.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from harness.metrics.hlo.text import without_provenance
from harness.metrics.timeline.specs import TimelineSpec

SIMULATOR_VERSION = 6
"""Bump when the simulator (this package) prices the same program on the same spec differently; what
each version changed: benchmarks/results/docstring-findings-2026-11-29.md, "Simulator versions"."""

_PROSE = frozenset({"source", "notes", "name"})


def _numbers(value: Any) -> Any:
    """``value`` without the keys that are prose (:data:`_PROSE`), recursively."""
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items() if k not in _PROSE}
    if isinstance(value, list | tuple):
        return [_numbers(v) for v in value]
    return value


def spec_identity(spec: TimelineSpec) -> str:
    """sha256 (hex, 16 digits) of the spec's numbers: equal for specs that price every op alike."""
    text = json.dumps(_numbers(spec.to_dict()), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def program_fingerprint(hlo_text: str) -> str:
    """sha256 (hex, 16 digits) of an optimized HLO text without its metadata and source tables."""
    return hashlib.sha256(without_provenance(hlo_text).encode()).hexdigest()[:16]


def identity(spec: TimelineSpec, hlo_text: str, *, deterministic: bool) -> dict[str, Any]:
    """A prediction's ``identity`` entry. ``deterministic``: the spec is a fixed table (a TPU / GPU
    topology's, or a calibrated spec file), not constants measured on this machine for this sweep
    (a CPU target's), which differ between runs: only deterministic predictions are gated."""
    return {
        "spec": spec_identity(spec),
        "simulator_version": SIMULATOR_VERSION,
        "program": program_fingerprint(hlo_text),
        "deterministic": deterministic,
    }
