"""The seam between the runner and a worker: one frozen :class:`WorkerSpec`, as JSON.

The runner (or any launcher: a local subprocess, a cluster job) writes ``spec.to_json()``; the
worker reads ``WorkerSpec.from_json(text)`` and needs nothing else: what to build, where (the
target with its mesh resolved, the run mode decided once by the launching side), how to measure it
and where its results go (each field says what it holds). ``spec_version`` changes when a field does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from typing import Any

from harness import targets, testing
from harness.plan.manifest import Run, Target, Workload

SPEC_VERSION = 5  # 4: target.compiler_options; 5: outputs_dir, save_output, reference (accuracy)
RUN_MODES = ("measure", "compile")


def resolve_mode(target: Target, preset: str = "") -> str:
    """``measure`` or ``compile``: ``auto`` measures where the platform's devices are present
    (judged without starting JAX); test presets measure (they compile nothing) unless the target
    says ``compile`` (the harness's tests of compile-only sweeps)."""
    if testing.is_test_preset(preset):
        return "compile" if target.mode == "compile" else "measure"
    if target.mode != "auto":
        return target.mode
    return "measure" if targets.hardware_present(target.platform) else "compile"


@dataclass(frozen=True)
class WorkerSpec:
    """Everything one worker needs to run one variant."""

    variant_name: str
    variant_id: str
    preset: str
    config_overrides: Mapping[str, Any]
    target: Target  # mesh resolved: no -1 axis
    mode: str  # "measure" | "compile", resolved by the launching side
    workload: Workload
    run: Run
    trace_dir: str
    status_path: str | None = None
    cache_dir: str | None = None  # compile-only static metrics cache
    seed: int = 0
    parent_pid: int | None = None  # the launching process: if it dies, the worker ends (None: no such tie)
    scratch_dir: str | None = None  # the launcher's temporary folder for this worker, removed if it dies
    process_id: int = 0  # which of the variant's target.processes this worker is
    coordinator: str | None = None  # jax.distributed coordinator "host:port" (None: JAX detects the cluster)
    # The accuracy metric (harness/run/accuracy.py): where stage outputs are kept, whether this
    # variant keeps its own (another compares with it), and its reference {name, id, preset,
    # config_overrides} (None: nothing to compare with).
    outputs_dir: str | None = None
    save_output: bool = False
    reference: Mapping[str, Any] | None = None
    spec_version: int = field(default=SPEC_VERSION)

    def __post_init__(self) -> None:
        if self.mode not in RUN_MODES:
            raise ValueError(f"WorkerSpec.mode={self.mode!r}: must be one of {RUN_MODES}")
        if any(size == -1 for _, size in self.target.mesh):
            raise ValueError(f"WorkerSpec.target.mesh={dict(self.target.mesh)}: resolve the -1 axis first")

    @property
    def compile_only(self) -> bool:
        return self.mode == "compile"

    @property
    def processes(self) -> int:
        return self.target.processes

    @property
    def mesh_shape(self) -> dict[str, int]:
        return dict(self.target.mesh)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec_version": self.spec_version,
            **{f.name: getattr(self, f.name) for f in _plain_fields()},
            "variant": {"name": self.variant_name, "id": self.variant_id},
            "config_overrides": dict(self.config_overrides),
            "target": {**self.target.to_dict(), "mesh": [[a, n] for a, n in self.target.mesh]},  # order is layout
            "workload": self.workload.to_dict(),
            "run": self.run.to_dict(),
            "reference": None if self.reference is None else dict(self.reference),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WorkerSpec:
        if d.get("spec_version") != SPEC_VERSION:
            raise ValueError(
                f"worker spec version {d.get('spec_version')!r} is not readable here (reads {SPEC_VERSION})"
            )
        return cls(
            **{f.name: d[f.name] if f.default is MISSING else d.get(f.name, f.default) for f in _plain_fields()},
            variant_name=d["variant"]["name"],
            variant_id=d["variant"]["id"],
            config_overrides=dict(d["config_overrides"]),
            target=Target.from_dict({**d["target"], "mesh": {a: n for a, n in d["target"]["mesh"]}}),
            workload=Workload.from_dict(d["workload"]),
            run=Run.from_dict(d["run"]),
            reference=d.get("reference"),
        )

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        return cls.from_dict(json.loads(text))


_TYPED = {"variant_name", "variant_id", "config_overrides", "target", "workload", "run", "reference", "spec_version"}


def _plain_fields() -> list[Field[Any]]:
    """The spec's fields written to JSON as they are (every one but those :data:`_TYPED` converts)."""
    return [f for f in fields(WorkerSpec) if f.name not in _TYPED]
