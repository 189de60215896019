"""How the page and the console write numbers: each with a unit scaled for reading (``12.3 ms``,
``1.5 GiB``, ``72 TFLOP``; "-" for unknown), and :func:`fmt_exact` for the exact value behind it
(the page's tooltips; the CSV keeps raw values)."""

from __future__ import annotations

import math
from html import escape

FLOP_SCALES = ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"))


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s != 0 and abs(s) < 1e-3:
        return f"{s * 1e6:.3g} us"
    return f"{s * 1e3:.3g} ms" if abs(s) < 1 else f"{s:.3g} s"


def fmt_bytes(b: float | None) -> str:
    if b is None:
        return "-"
    for scale, unit in ((2**60, "EiB"), (2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if abs(b) >= scale:
            return f"{b / scale:.3g} {unit}"
    return f"{b:.0f} B"


def fmt_flops(x: float | None) -> str:
    """``72 TFLOP`` (decimal prefixes, as FLOP rates are quoted)."""
    if x is None:
        return "-"
    for scale, unit in FLOP_SCALES:
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} FLOP"


def fmt_num(x: float | None) -> str:
    """A count: whole below a million (``4096``), else scaled (``1.23 M``)."""
    if x is None:
        return "-"
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{int(x)}" if x == int(x) else f"{x:.4g}"


def fmt_pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def fmt_unit(x: float | None, unit: str) -> str:
    """``x`` in a unit of the comparison catalog (``s``, ``bytes``, ``flops``, ``fraction``, ``count``)."""
    if unit == "s":
        return fmt_time(x)
    if unit == "bytes":
        return fmt_bytes(x)
    if unit == "flops":
        return fmt_flops(x)
    if unit == "fraction":
        return fmt_pct(x)
    return fmt_num(x)


def fmt_exact(x: float | None, unit: str = "") -> str:
    """The exact value with its base unit (``71982003847168 FLOP``, ``0.0123456 s``), for a tooltip."""
    if x is None:
        return ""
    base = {"s": " s", "bytes": " B", "flops": " FLOP", "fraction": ""}.get(unit, "")
    text = f"{int(x)}" if x == int(x) and abs(x) < 1e18 else f"{x:.9g}"
    return text + base


def fmt_html(x: float | None, unit: str) -> str:
    """``x`` for the page: the scaled text, the exact value in its ``title`` (tooltip)."""
    text, exact = fmt_unit(x, unit), fmt_exact(x, unit)
    return escape(text) if x is None or exact == text else f'<span title="{escape(exact)}">{escape(text)}</span>'


def fmt_ratio(r: float | None) -> str:
    if r is None:
        return "-"
    return "new (from 0)" if math.isinf(r) else f"{r:.3f}x"
