"""Load a script that is not in an installed package (benchmarks/*.py, tests/fixtures/*.py) as a module.

`pytest` runs with --import-mode=importlib and the checkout's root is not on sys.path (the nox session
runs the `pytest` entry point, not `python -m pytest`), so `import benchmarks.x` fails there; load by path.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(path: Path, name: str | None = None) -> ModuleType:
    """The module at `path`, registered in sys.modules under `name` (default: the file's stem) so that
    dataclasses in it resolve their annotations."""
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module."""
    return load(ROOT / "benchmarks" / f"{name}.py")
