"""One side of ``harness ab``: a long-lived process that builds one stage from a tree's code and times
single calls of it on request.

Run as a script with the measured tree first on ``PYTHONPATH`` (``python <this file>``, cwd the
tree): ``harness.model`` and ``ltx2`` then come from that tree, whatever commit it is, while this
protocol is the same file on both sides. It reads one JSON line, the stage to build::

    {"preset", "config_overrides", "workload" (ltx2.Workload's fields), "mesh" ({axis: size}),
     "stage", "seed", "warmup"}

builds and compiles it (``build_config``, ``build_mesh``, ``build_stage``, ``make_args``), runs
``warmup`` calls, answers ``{"ready": ..., "setup_s": ...}`` and then, for each ``call`` line, times
one call (``jax.block_until_ready(program.run(*args))``, ``time.perf_counter``) and answers
``{"s": seconds}``; ``quit`` or end of input ends it. Anything that goes wrong is one
``{"error": ...}`` line and exit 2 (a tree too old to have the names above says which one).
Imports nothing of the harness at module level: this file must run against another tree's harness.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any


def answer(payload: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def build(spec: dict[str, Any]) -> Any:
    """The compiled, warmed stage: a zero-argument function that runs one call and blocks."""
    import jax

    tree = Path.cwd().resolve()
    for path in ("harness/model.py", "ltx2/__init__.py", "ltx2/stages/__init__.py"):
        if not (tree / path).is_file():
            raise ImportError(f"this tree has no {path}: it predates the stage API that harness ab drives")
    from harness.model import build_config  # the tree's own (first on the path); checked above that
    from ltx2 import Workload, build_mesh, build_stage  # they exist, or an installed copy would answer

    cfg = build_config(spec["preset"], spec["config_overrides"])
    n = 1
    for size in spec["mesh"].values():
        n *= int(size)
    devices = jax.devices()
    if len(devices) < n:
        raise RuntimeError(f"mesh {spec['mesh']} needs {n} devices, found {len(devices)}")
    mesh = build_mesh(dict(spec["mesh"]), devices=devices[:n])
    program = build_stage(spec["stage"], cfg, Workload(**spec["workload"]), mesh)
    with jax.set_mesh(mesh):
        args = jax.block_until_ready(program.make_args(int(spec["seed"])))

    def call() -> None:
        with jax.set_mesh(mesh):
            jax.block_until_ready(program.run(*args))

    for _ in range(int(spec["warmup"])):
        call()
    return call


def main() -> int:
    try:
        start = time.perf_counter()
        call = build(json.loads(sys.stdin.readline()))
        answer({"ready": True, "setup_s": time.perf_counter() - start})
    except Exception as e:  # noqa: BLE001 - every failure is one line for the driver, which says whose tree
        answer({"error": f"{type(e).__name__}: {e}"})
        return 2
    for line in sys.stdin:
        if line.strip() != "call":
            break
        start = time.perf_counter()
        call()
        answer({"s": time.perf_counter() - start})
    return 0


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: the measured tree's packages must win
    sys.exit(main())
