"""Inline SVG bar charts (no images, no library): one horizontal bar per item, its label in a
fixed column on the left (shortened to fit, the full text in a tooltip) and its value in a fixed
column on the right, one row each, so no two labels can overlap (the browser test checks the
boxes of every text element)."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence

e = html.escape

ROW, LABEL_W, BAR_W, VALUE_W, TOP = 18, 270, 330, 120, 22
CHAR_W = 6.5  # px per character of the 11 px font, generous: labels are cut to fit LABEL_W


def _fit(text: str, width: float) -> str:
    most = int(width // CHAR_W)
    return text if len(text) <= most else "\u2026" + text[-(most - 1) :]


def bar_chart(items: Sequence[tuple[str, float]], fmt: Callable[[float], str], title: str, chart_id: str) -> str:
    """Bars for ``(label, value)`` items (negative values drawn leftwards from a zero line in the
    middle, when there are any); ``fmt`` writes a value."""
    if not items:
        return ""
    signed = any(v < 0 for _, v in items)
    most = max(abs(v) for _, v in items) or 1.0
    zero = LABEL_W + (BAR_W / 2 if signed else 0)
    scale = (BAR_W / 2 if signed else BAR_W) / most
    width, height = LABEL_W + BAR_W + VALUE_W, TOP + ROW * len(items) + 6
    parts = [f'<text x="4" y="14" font-weight="600">{e(_fit(title, width - 8))}</text>']
    for i, (label, value) in enumerate(items):
        y = TOP + i * ROW
        w = abs(value) * scale
        x = zero - w if value < 0 else zero
        parts.append(
            f"<g><title>{e(label)}: {e(fmt(value))}</title>"
            f'<text class="label" x="{LABEL_W - 6}" y="{y + 12}" text-anchor="end">'
            f"{e(_fit(label, LABEL_W - 12))}</text>"
            f'<rect class="bar{" neg" if value < 0 else ""}" x="{x:.1f}" y="{y + 2}" width="{max(w, 0.5):.1f}" '
            f'height="{ROW - 5}"></rect>'
            f'<text class="value" x="{LABEL_W + BAR_W + 6}" y="{y + 12}">{e(fmt(value))}</text></g>'
        )
    if signed:
        parts.append(f'<line x1="{zero}" x2="{zero}" y1="{TOP - 2}" y2="{height - 4}" stroke="#6c757d"></line>')
    return (
        f'<svg class="chart" id="{e(chart_id)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{e(title)}">{"".join(parts)}</svg>'
    )
