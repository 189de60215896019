"""Every repository path the README and the documentation name in code spans exists, so a moved or
renamed file fails here instead of leaving the manual pointing at nothing (placeholders such as
``<sweep>`` or ``<date>`` are not paths)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"`((?:harness|ltx2|experiments|benchmarks|tests|docs|reports/baselines)/[\w./-]+)`")


def test_every_named_path_exists():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    missing = [
        f"{page.relative_to(ROOT)}: {path}"
        for page in pages
        for path in PATH.findall(page.read_text())
        if not (ROOT / path.rstrip("/")).exists() and not any(ch in path for ch in "*")
    ]
    assert len(pages) > 10 and not missing, missing
