"""Test-only presets: stages that never import JAX, for the harness's own tests.

A manifest whose preset is ``test:<behaviour>`` runs :class:`TestStage` objects instead of the
model, so crash isolation, timeouts, resume and reporting can be tested in a fraction of a
second per subprocess. They take only ``test.*`` overrides, are not listed in error messages
and never appear in ``experiments/``. The planner (:mod:`harness.plan`) and the worker
(:mod:`harness.run.worker`) are their only users.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.families import Static


def _ok(overrides: Mapping[str, Any]) -> None:
    time.sleep(float(overrides.get("test.run_s", 0.001)))


def _raise(overrides: Mapping[str, Any]) -> None:
    raise RuntimeError("test workload raised on purpose")


def _kill(overrides: Mapping[str, Any]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _sleep(overrides: Mapping[str, Any]) -> None:
    time.sleep(float(overrides.get("test.sleep_s", 3600.0)))


# Test preset -> (what one call of its stage does, in words; the behaviour).
TEST_PRESETS: dict[str, tuple[str, Callable[[Mapping[str, Any]], None]]] = {
    "test:ok": ("sleeps test.run_s (default 1 ms) per call", _ok),
    "test:raise": ("raises RuntimeError when run (a Python error inside a stage)", _raise),
    "test:kill": ("kills its own process with SIGKILL when run (a crash, as the OOM killer does)", _kill),
    "test:sleep": ("sleeps test.sleep_s (default 1 h) per call (a hang, for timeouts)", _sleep),
}


def is_test_preset(preset: str) -> bool:
    return preset in TEST_PRESETS


def check_override(key: str) -> None:
    if not key.startswith("test."):
        raise KeyError(f"test presets take only test.* keys, got {key!r}")


@dataclass
class TestStage:
    """A JAX-free stage whose ``run()`` does what its test preset says."""

    __test__ = False  # not a pytest class

    name: str
    preset: str
    overrides: dict[str, Any]
    uses_jax: bool = False
    calls_per_video: int = 1
    notes: list[str] = field(default_factory=lambda: ["test workload: no model, no JAX"])
    hlo_text: str | None = None  # nothing is compiled

    def static(self) -> Static:
        out: dict[str, Any] = {"platform": "test", "flops": float(self.overrides.get("test.flops", 1.0))}
        if "test.memory_bytes" in self.overrides:  # the per-device memory it claims to need (fit checks)
            out["memory"] = {"bound_bytes": int(self.overrides["test.memory_bytes"])}
        return Static.from_dict(out)

    def prepare(self) -> None:
        pass

    def run(self) -> None:
        TEST_PRESETS[self.preset][1](self.overrides)
