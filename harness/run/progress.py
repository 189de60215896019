"""Progress on stderr while a sweep runs (the summary table at its end: :mod:`harness.report.console`).

On a terminal the current line is rewritten in place (variant i/n, name, stage,
phase, elapsed); otherwise (CI logs) one line is printed per stage change.
"""

from __future__ import annotations

import sys
from typing import TextIO


class Progress:
    def __init__(self, total: int, stream: TextIO | None = None):
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._prefix = ""
        self._last: tuple[str, str] | None = None

    def _emit(self, text: str, final: bool) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def start(self, index: int, name: str, variant_id: str) -> None:
        self._prefix = f"[{index}/{self.total}] {name} ({variant_id})"
        self._last = ("", "starting")
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
        self._emit(f"{self._prefix} {status} in {elapsed_s:.1f}s{detail}", final=True)

    def skipped(self, index: int, name: str, variant_id: str, why: str = "ok record exists") -> None:
        self._emit(f"[{index}/{self.total}] {name} ({variant_id}) skipped: {why}", final=True)
