"""Markdown pieces the generated reference pages share: tables whose cells cannot break a row."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

GENERATED = (
    '!!! note "Generated"\n    This page is generated from the code at build time (`{source}`); '
    "a test fails when the code gains an entry this page cannot describe.\n"
)


def cell(value: object) -> str:
    """One table cell: pipes escaped, newlines as spaces, empty as a dash."""
    text = str(value).replace("|", "\\|").replace("\n", " ").strip()
    return text or "—"


def code(value: object) -> str:
    """Inline code (backticks inside are dropped: they cannot nest)."""
    text = str(value).replace("`", "")
    return f"`{text}`" if text else ""


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def page(title: str, source: str, intro: str, *sections: str, wide: bool = False) -> str:
    """A generated page; ``wide`` hides the table of contents, leaving the room to a wide table."""
    head = "---\nhide:\n  - toc\n---\n\n" if wide else ""
    return head + "\n".join([f"# {title}\n", GENERATED.format(source=source), intro.strip() + "\n", *sections])
