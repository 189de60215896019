"""How often one attempt of the extra-matmul diff test misses, with the machine's load.

    python benchmarks/diff_power.py OUT.jsonl [--attempts 20]

Each attempt is ``tests/harness/results/test_diff.py``'s :func:`ff_attempt` (both programs captured
in interleaved rounds, then diffed); one JSON line per attempt: whether it showed the extra matmul in
ff, what it missed, its seconds and the 1-minute load average. The test's false-failure rate is this
miss rate to the power of its ATTEMPTS (benchmarks/results/diff-power-2026-11-29.md).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from tests.harness.results.test_diff import _args, ff_attempt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--attempts", type=int, default=20)
    ns = parser.parse_args()
    args = _args()
    for _ in range(ns.attempts):
        start = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            missed = ff_attempt(args, Path(tmp))
        row = {
            "ok": not missed,
            "s": round(time.perf_counter() - start, 1),
            "load": os.getloadavg()[0],
            "missed": missed,
        }
        with ns.out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(row, flush=True)


if __name__ == "__main__":
    main()
