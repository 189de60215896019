"""Real A/A traces for the diff's intervals: one program traced again and again, with the machine's load.

    python benchmarks/aa_traces.py OUT.jsonl [--traces 24] [--steps 32]

The program is the diff test's block (``tests/harness/results/test_diff.py``: an attention and an
ff matmul of [384, 384] float32 inside the model's named scopes). Each trace is ``--steps``
consecutive calls captured by :func:`harness.metrics.measured.trace.capture_trace` and parsed into per-step
samples exactly as a sweep's trace is; one JSON line per trace holds its step samples and the load
other processes put on the machine while it ran (:mod:`harness.run.load`). Every call of every
trace runs the same code, so any interval of a diff between two parts of them that excludes zero is
a false alarm: ``benchmarks/aa_flag_rate.py`` counts them.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from harness.metrics.compiled.attribution import instruction_scopes  # noqa: E402
from harness.metrics.hlo import parse  # noqa: E402
from harness.metrics.measured.trace import analyze_trace, capture_trace  # noqa: E402
from harness.run import load  # noqa: E402
from ltx2 import scopes  # noqa: E402

N = 384


def block(x: jax.Array, w: jax.Array) -> jax.Array:
    with scopes.scope(scopes.TRANSFORMER), scopes.scope(scopes.BLOCK):
        with scopes.scope(scopes.ATTN1):
            h = jnp.tanh(x @ w)
        with scopes.scope(scopes.FF):
            return jnp.tanh(h @ w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--traces", type=int, default=24)
    parser.add_argument("--steps", type=int, default=32)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x, w = (jnp.asarray(rng.standard_normal((N, N)) / np.sqrt(N), jnp.float32) for _ in range(2))
    compiled = jax.jit(block).lower(x, w).compile()
    names = instruction_scopes(parse(compiled.as_text()), scopes.scope_path)
    jax.block_until_ready(compiled(x, w))
    with args.out.open("a") as out, tempfile.TemporaryDirectory() as tmp:
        for i in range(args.traces):
            window = load.Window.open()
            xplane = capture_trace(lambda: compiled(x, w), Path(tmp) / f"t{i}", steps=args.steps)
            machine = window.close()
            trace = analyze_trace(xplane, modules={names.module}, scopes=names).to_dict()
            row = {"trace": i, "time": time.time(), "load": machine, "step_samples": trace["step_samples"]}
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"trace {i + 1}/{args.traces}: others busy {machine.get('others_busy_cores')}", flush=True)


if __name__ == "__main__":
    main()
