"""Which deterministic metrics of CPU programs differ between two machine classes' records.

    python benchmarks/machine_class_diff.py BASELINE.jsonl RESULTS.jsonl

For every variant in both files whose records come from different machine classes
(``Machine.fingerprint``), every gated deterministic metric (predictions left out) present on both
sides is grouped by whether :func:`harness.catalogue.host_codegen` calls it dependent on the
host's code generation, and the groups' counts of equal and differing values are printed as a table,
with the range of the ratios; a metric outside ``host_codegen`` that differs is printed by name (it
would be gated across classes). Evidence: ``benchmarks/results/cpu-machine-class-2026-11-29.md``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

from harness import catalogue
from harness.catalogue import host_codegen
from harness.results.compare import flatten_record
from harness.results.store import load_records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path)
    parser.add_argument("results", type=Path)
    args = parser.parse_args()
    base = {r.variant.name: r for r in load_records(args.baseline)}
    same: Counter[str] = Counter()
    differ: Counter[str] = Counter()
    spread: dict[str, tuple[float, float]] = {}
    for h in load_records(args.results):
        b = base.get(h.variant.name)
        if b is None or not h.ok or b.machine.fingerprint == h.machine.fingerprint:
            continue
        fb, fh = flatten_record(b), flatten_record(h)
        for key in sorted(set(fb) & set(fh)):
            spec = catalogue.get(key[1])
            if not spec.gated or spec.kind == "timing" or spec.family == "predicted":
                continue
            group = ("codegen: " if host_codegen(key[1]) else "not codegen: ") + key[1].split(".")[0]
            if fb[key].value == fh[key].value:
                same[group] += 1
                continue
            differ[group] += 1
            r = fh[key].value / fb[key].value if fb[key].value else float("inf")
            lo, hi = spread.get(group, (r, r))
            spread[group] = (min(lo, r), max(hi, r))
            print(f"differs: {h.variant.name} {key[0]} {key[1]}: {fb[key].value:.0f} -> {fh[key].value:.0f}")
    print("| group | metrics compared | differ | now / baseline |\n|---|---:|---:|---|")
    for g in sorted(set(same) | set(differ)):
        lo, hi = spread.get(g, (1.0, 1.0))
        print(f"| {g} | {same[g] + differ[g]} | {differ[g]} | {lo:.5f} - {hi:.5f} |")


if __name__ == "__main__":
    main()
