"""Progress on stderr while a sweep runs, and the summary table at its end.

On a terminal the current line is rewritten in place (variant i/n, name, stage,
phase, elapsed); otherwise (CI logs) one line is printed per stage change.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from harness.results.record import Record, StageEntry

MIB = 2**20


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


# --------------------------------------------------------------------------- summary


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _fmt(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def stage_cells(stage: StageEntry | None) -> list[str]:
    """Median ms, recompiles, collectives (count), memory bound MiB of one stage."""
    if stage is None:
        return ["-"] * 4
    if stage.status != "ok":  # failed, or does-not-fit (its memory bound says why)
        return [stage.status, "-", "-", _fmt(_dig(stage.static, "memory", "bound_bytes"), 1 / MIB)]
    median = _dig(stage.measured, "wall_s", "median")
    recompiles = _dig(stage.measured, "recompiles", "count")
    by_kind = _dig(stage.static, "collectives", "by_kind") or {}
    collectives = sum(c.get("count", 0) for c in by_kind.values()) if by_kind else None
    memory = _dig(stage.static, "memory", "bound_bytes")
    return [
        _fmt(median, 1e3, 2),
        "-" if recompiles is None else str(recompiles),
        "-" if collectives is None else str(collectives),
        _fmt(memory, 1 / MIB),
    ]


def summary_table(records: Sequence[Record]) -> str:
    """A plain-text table: one row per record, four columns per stage."""
    stages: list[str] = []
    for r in records:
        for s in r.stages:
            if s not in stages:
                stages.append(s)
    header = ["variant", "id", "status", "time s"]
    for s in stages:
        header += [f"{s} ms", "recomp", "colls", "mem MiB"]
    rows = [header]
    for r in records:
        row = [r.variant.name, r.variant.id, r.status, _fmt(r.duration_s)]
        for s in stages:
            row += stage_cells(r.stages.get(s))
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
