"""What the worker drives for each stage: compile for static metrics, prepare inputs, run once.

:class:`Stage` is the protocol. :class:`harness.run.jax_stage.JaxStage` implements it over an
:class:`ltx2.StageProgram` (the model's stage API); :class:`harness.testing.TestStage` is the
JAX-free stand-in of the test presets. This module imports neither, so a test worker never
loads JAX.
"""

from __future__ import annotations

from typing import Any, Protocol

from harness.families import Static


class Stage(Protocol):
    """One pipeline stage, ready to compile and run."""

    hlo_text: str | None  # the compiled program's optimized HLO once static() ran (None: nothing compiled)

    @property
    def name(self) -> str: ...

    @property
    def uses_jax(self) -> bool: ...

    @property
    def notes(self) -> list[str]: ...

    @property
    def calls_per_video(self) -> int: ...

    def static(self) -> Static:
        """Compile ahead of time (abstract inputs) and return the static metrics."""
        ...

    def prepare(self) -> None:
        """Make concrete inputs (random weights and data) on the devices."""
        ...

    def run(self) -> Any:
        """One call of the stage, blocked until the result is ready."""
        ...
