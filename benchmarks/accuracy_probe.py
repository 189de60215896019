"""The accuracy probe (harness/run/probe.py) of every variant of compile-only manifests, once per distinct
set of numerics knobs, mesh and stage: the table in benchmarks/results/bf16-knobs-probe-2026-11-29.md.

A sweep records the same numbers per variant (``[run] metrics`` with ``"accuracy"``); this runs the
probe alone, without the full-size TPU compiles. The float32 reference and plain bfloat16 are run
once per distinct reference (its config, mesh and stage) and shared by the knob sets that use it;
``--part K/N`` splits the references, with their knob sets, over N parts of about equal count. Needs
as many CPU devices as the largest mesh (16 for v6e.toml's ``trillium-22b-16``)::

    PYTHONPATH=$PWD XLA_FLAGS=--xla_force_host_platform_device_count=16 JAX_PLATFORMS=cpu \\
        python benchmarks/accuracy_probe.py experiments/v6e.toml experiments/v7x.toml [--part K/N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from harness.expansion import load_sweep
from harness.run import probe


def parts(todo: dict[str, tuple[dict, dict, str]], n: int) -> list[list[str]]:
    """The knob sets split into ``n`` parts, each reference's sets in one part, the largest
    reference first into the part with the fewest sets so far (costs: a set, plus two per reference)."""
    by_ref: dict[str, list[str]] = {}
    for key, (overrides, mesh, stage) in todo.items():
        by_ref.setdefault(probe.baseline_key(overrides, mesh, stage, probe.SEEDS), []).append(key)
    out: list[list[str]] = [[] for _ in range(n)]
    cost = [0] * n
    for keys in sorted(by_ref.values(), key=len, reverse=True):
        i = cost.index(min(cost))
        out[i] += keys
        cost[i] += len(keys) + 2
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("manifests", nargs="+")
    ap.add_argument("--part", default="1/1", help="K/N: the K-th of N parts of the distinct configs")
    args = ap.parse_args(argv)
    groups: dict[str, list[str]] = {}
    todo: dict[str, tuple[dict, dict, str]] = {}
    for path in args.manifests:
        for v in load_sweep(path).variants:
            mesh, stage = dict(v.target.resolved().mesh), v.workload.stages[0]
            key = json.dumps([probe.configs(v.config_overrides)["variant"], mesh, stage], sort_keys=True)
            groups.setdefault(key, []).append(f"{path.rsplit('/', 1)[-1].removesuffix('.toml')}:{v.name}")
            todo.setdefault(key, (dict(v.config_overrides), mesh, stage))
    k, n = map(int, args.part.split("/"))
    mine = set(parts(todo, n)[k - 1])
    print(f"part {k}/{n}: {len(mine)} of {len(todo)} distinct knob sets", flush=True)
    baselines: dict[str, probe.Baseline] = {}
    for i, (key, (overrides, mesh, stage)) in enumerate(todo.items()):
        if key not in mine:
            continue
        start = time.perf_counter()
        try:
            got = probe.probe(overrides, mesh, stage, baselines=baselines)
            line = (
                f"ratio {got['ratio']:.3f} worse {got['worse']}/{got['seeds']} rel_l2 {got['rel_l2']:.3e} "
                f"bf16 {got['bf16_rel_l2']:.3e}"
            )
        except Exception as e:  # a config the probe cannot build is a row too
            line = f"not probed: {type(e).__name__}: {str(e)[:200]}"
        print(f"{i:3d} {' '.join(groups[key])} | {line} | {time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
