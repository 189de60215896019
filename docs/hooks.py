"""MkDocs hooks: add the pages generated from the code (:mod:`harness.docgen`) and the dated result files
of ``benchmarks/results/`` to the site at build time. Nothing generated is written into ``docs/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _results_index() -> str:
    rows = []
    for path in sorted(RESULTS.iterdir()):
        if path.suffix in (".md", ".json"):
            rows.append(f"| [{path.name}]({path.name}) | {_title(path)} |")
    return (
        "# Dated results\n\nEvery measurement and prediction the documentation quotes comes from one of these "
        "files (`benchmarks/results/`), each with its date, machine, load and the command that reproduces it. "
        "A number on another page links here.\n\n| file | what |\n|---|---|\n" + "\n".join(rows) + "\n"
    )


def _title(path: Path) -> str:
    if path.suffix != ".md":
        return "raw data (JSON)"
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            return line.lstrip("# ").replace("|", "\\|")
    return ""


def on_files(files: Files, config: Any) -> Files:
    import sys

    sys.path.insert(0, str(ROOT))
    from harness.docgen import pages

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    for result in sorted(RESULTS.iterdir()):
        if result.suffix == ".md":
            files.append(File.generated(config, f"results/{result.name}", content=result.read_text()))
        elif result.suffix == ".json":
            files.append(File.generated(config, f"results/{result.name}", content=result.read_bytes()))
    files.append(File.generated(config, "results/index.md", content=_results_index()))
    return files
