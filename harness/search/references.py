"""The search manifest's own ``[[variants]]`` (hand-written layouts) as references: compiled at full
depth through the sweep machinery (a variant with a record in the search's results file is read,
not compiled again) and scored like the candidates, as rows of the ranked table."""

from __future__ import annotations

from typing import Any

from harness.plan.variants import Sweep
from harness.results import store
from harness.run.runner import SweepOptions, run_sweep
from harness.search.evaluate import score_of
from harness.search.setup import SearchSetup


def reference_rows(s: SearchSetup) -> list[dict[str, Any]]:
    """One row per declared variant with a record (``label``: ``reference <name>``), in manifest order."""
    declared = [v for v in s.sweep.variants if v.name in {spec.name for spec in s.manifest.variants}]
    if not declared:
        return []
    path = s.evaluator.results_path
    known = store.latest_by_variant(store.load_records(path))
    todo = tuple(v for v in declared if v.id not in known)
    if todo:
        run_sweep(Sweep(s.manifest, todo), SweepOptions(s.evaluator.reports_dir, s.evaluator.sweep_id))
        known = store.latest_by_variant(store.load_records(path))
    out = []
    layers = s.facts.num_layers
    for v in declared:
        if v.id not in known:
            continue
        sc = score_of(known[v.id], s.manifest.workload.stages[0], layers, layers, s.hardware.hbm_bytes)
        out.append(
            {
                "label": f"reference {v.name}",
                "name": v.name,
                "mesh": v.target.mesh_shape,
                "attention": v.config_overrides.get("transformer.attention_impl", "(config)"),
                "rules": {},
                "depth": layers,
                "confirmed": True,
                "full_depth": True,
                "status": sc.status,
                "step_s": sc.step_s,
                "exposed_all_gather": sc.exposed_all_gather,
                "exposed_collective_s": sc.exposed_collective_s,
                "wasted": sc.wasted,
                "memory_bytes": sc.memory_bytes,
                "fits": sc.fits,
                "variant_id": v.id,
                "error": sc.error,
            }
        )
    return out
