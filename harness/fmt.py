"""How people read numbers, on pages and in consoles: times, bytes, counts, ratios ("-" for unknown)."""

from __future__ import annotations

import math


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "-"
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(b) >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def fmt_num(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{int(x)}" if x == int(x) and abs(x) < 1e15 else f"{x:.4g}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def fmt_unit(x: float | None, unit: str) -> str:
    if unit == "s":
        return fmt_time(x)
    if unit == "bytes":
        return fmt_bytes(x)
    if unit == "fraction":
        return fmt_pct(x)
    return fmt_num(x)


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    return "new (from 0)" if math.isinf(r) else f"{r:.3f}x"


__all__ = ["fmt_bytes", "fmt_num", "fmt_pct", "fmt_ratio", "fmt_time", "fmt_unit"]
