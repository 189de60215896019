"""Progress on stderr while a sweep runs (the summary table at its end: :mod:`harness.report.console`).

One variant at a time: on a terminal the current line is rewritten in place (variant i/n, name,
stage, phase, elapsed); otherwise (CI logs) one line is printed per stage change. Several at once
(compile-only variants with ``--jobs``): one line per variant started or finished, each with the
whole sweep's state (done / running / left). Every finished line carries an ETA for the sweep when
past durations are known (:class:`Eta`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO

from harness.run.interrupt import Interrupted


@dataclass
class Eta:
    """The sweep's remaining time from each variant's expected duration (its last run's, from the
    results file; unknown ones count as the mean of the known). Compile-only variants share ``jobs``
    slots; the others run one at a time."""

    expected: Mapping[str, float]  # variant id -> seconds
    parallel: frozenset[str] = frozenset()  # ids of the variants that run side by side
    jobs: int = 1
    left: set[str] = field(default_factory=set)
    started: dict[str, float] = field(default_factory=dict)  # id -> monotonic start

    def seconds(self, now: float | None = None) -> float | None:
        if not self.expected:
            return None
        mean = sum(self.expected.values()) / len(self.expected)
        now = time.monotonic() if now is None else now
        par = seq = 0.0
        for vid in self.left:
            rest = max(self.expected.get(vid, mean) - (now - self.started[vid] if vid in self.started else 0.0), 0.0)
            if vid in self.parallel:
                par += rest
            else:
                seq += rest
        return par / max(self.jobs, 1) + seq


def fmt_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f", ETA {seconds / 60:.1f} min" if seconds >= 90 else f", ETA {seconds:.0f} s"


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None, eta: Eta | None = None):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.eta = eta
        self.done = 0
        self.stop: threading.Event | None = None  # set: running workers are ended (their update raises)
        self.stop_signal = 2
        self.running: set[str] = set()  # ids of the variants running side by side
        self._prefix = self._current = ""
        self._last: tuple[str, str] | None = None
        self._lock = threading.Lock()

    def _emit(self, text: str, final: bool) -> None:
        with self._lock:
            if self.tty:
                self.stream.write("\r\033[K" + text + ("\n" if final else ""))
            else:
                self.stream.write(text + "\n")
            self.stream.flush()

    def _eta(self, variant_id: str, finished: bool) -> str:
        if self.eta is None:
            return ""
        if finished:
            self.eta.left.discard(variant_id)
        return fmt_eta(self.eta.seconds())

    def start(self, index: int, name: str, variant_id: str) -> None:
        self._prefix, self._current = f"[{index}/{self.total}] {name} ({variant_id})", variant_id
        self._last = ("", "starting")
        if self.eta is not None:
            self.eta.started[variant_id] = time.monotonic()
        self._emit(f"{self._prefix} starting", final=False)

    def update(self, stage: str, phase: str, elapsed_s: float) -> None:
        where = f"{stage}:{phase}" if stage else phase
        if not self.tty and self._last == (stage, phase):
            return
        self._last = (stage, phase)
        self._emit(f"{self._prefix} {where} {elapsed_s:6.1f}s", final=False)

    def finish(self, status: str, elapsed_s: float, error: str | None = None) -> None:
        first = (error or "").strip().splitlines()
        detail = f"  {first[-1][:120]}" if first and status != "ok" else ""
        self.done += 1
        self._emit(f"{self._prefix} {status} in {elapsed_s:.1f}s{self._eta(self._current, True)}{detail}", final=True)

    def skipped(self, index: int, name: str, variant_id: str, why: str = "ok record exists") -> None:
        self.done += 1
        self._emit(f"[{index}/{self.total}] {name} ({variant_id}) skipped: {why}", final=True)

    def task(self, index: int, name: str, variant_id: str) -> TaskProgress:
        """A view of this sweep's progress for one of several variants running at once."""
        return TaskProgress(self, index, name, variant_id)


class TaskProgress(Progress):
    """One of several concurrent variants: start and finish lines with the sweep's state; stage changes
    are not printed (the lines of several variants would interleave). When the sweep stops
    (``parent.stop`` set), :meth:`update`, which the launcher calls while it watches the worker,
    raises :class:`Interrupted` so the launcher ends that worker as it does on a signal."""

    def __init__(self, parent: Progress, index: int, name: str, variant_id: str):
        self.parent, self.variant_id = parent, variant_id
        self._prefix = f"[{index}/{parent.total}] {name} ({variant_id})"

    def _state(self) -> str:
        p = self.parent
        return f"{p.done}/{p.total} done" + (f", {len(p.running)} running" if p.running else "")

    def start(self, index: int = 0, name: str = "", variant_id: str = "") -> None:
        p = self.parent
        with p._lock:
            p.running.add(self.variant_id)
            if p.eta is not None:
                p.eta.started[self.variant_id] = time.monotonic()
        p._emit(f"{self._prefix} started ({self._state()})", final=True)

    def update(self, stage: str, phase: str, elapsed_s: float) -> None:
        if self.parent.stop is not None and self.parent.stop.is_set():
            raise Interrupted(self.parent.stop_signal)

    def finish(self, status: str, elapsed_s: float, error: str | None = None) -> None:
        p = self.parent
        first = (error or "").strip().splitlines()
        detail = f"  {first[-1][:120]}" if first and status != "ok" else ""
        with p._lock:
            p.done += 1
            p.running.discard(self.variant_id)
            eta = p._eta(self.variant_id, True)
        p._emit(f"{self._prefix} {status} in {elapsed_s:.1f}s ({self._state()}{eta}){detail}", final=True)
