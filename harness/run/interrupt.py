"""SIGINT (Ctrl-C) and SIGTERM (a CI timeout) as one exception, :class:`Interrupted`, so a command
stops the way it stops on any error: the launcher kills the running worker's process group, the
temporary folders are removed on the way out, and the command exits 128 + the signal number
(130 / 143) with a line saying what was stopped.

Only the first signal raises: while the clean-up it started runs (killing a worker can take the
launcher's grace period), further signals are ignored, so a second Ctrl-C cannot abandon a
worker half-stopped.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM, raised in the main thread. A BaseException: no ``except Exception`` swallows it.
    ``detail`` is what was stopped, filled in by whoever knows (the runner)."""

    def __init__(self, signum: int, detail: str = ""):
        super().__init__(signum)
        self.signum, self.detail = signum, detail

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """Within: the first SIGINT / SIGTERM raises :class:`Interrupted`; later ones are ignored. The
    previous handlers come back afterwards. Outside the main thread this does nothing (Python
    delivers signals to the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised = False

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Interrupted(signum)

    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
