"""A search manifest read and checked against the model: the space, the model's facts, the hardware
numbers of the analytic estimate and the evaluator. Every problem is a
:class:`~harness.plan.manifest.ManifestError` naming the file, the ``search.*`` key and the reason."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import targets
from harness.expansion import load_sweep, resolve
from harness.model import build_config, check_override, model_workload
from harness.plan.manifest import Manifest, Target
from harness.plan.search_space import SearchSpace
from harness.plan.variants import Sweep
from harness.results.store import check_sweep_id
from harness.search.analytic import Hardware
from harness.search.evaluate import SweepEvaluator
from harness.search.facts import ModelFacts, model_facts
from harness.search.space import Candidate, as_candidate
from ltx2 import MESH_AXES, get_strategy, strategy_names, with_overrides

# A CPU target has no peak numbers of its own here; these only order candidates (the ratio of
# compute to interconnect time is what matters), the compiled programs decide.
CPU_HARDWARE = Hardware(peak_flops=1e11, link_bytes_per_s=1e10, hbm_bytes=None, hbm_bytes_per_s=2e10)


@dataclass(frozen=True)
class SearchSetup:
    manifest: Manifest
    sweep: Sweep
    space: SearchSpace
    facts: ModelFacts
    devices: int
    hardware: Hardware
    evaluator: SweepEvaluator
    seeds: tuple[Candidate, ...] = ()  # the manifest's [[variants]] the space can express


def check_space(m: Manifest, space: SearchSpace, preset: str) -> None:
    """What only the model can say of a ``[search]`` table: names of strategies, logical and mesh axes, kernels."""
    if space.base not in strategy_names():
        raise m.error(
            ("search", "base"), f"unknown sharding strategy {space.base!r} (known: {', '.join(strategy_names())})"
        )
    for logical, options in space.rules:
        for i, axes in enumerate(options):
            try:
                with_overrides("replicated", {logical: list(axes)})
            except ValueError as e:
                raise m.error(("search", "rules", logical, i), str(e)) from None
    for i, mesh in enumerate(space.meshes):
        unknown = [a for a, _ in mesh if a not in MESH_AXES]
        if unknown:
            raise m.error(("search", "meshes", i), f"unknown mesh axes {unknown} (known: {', '.join(MESH_AXES)})")
    for i, impl in enumerate(space.attention):
        try:
            check_override(preset, "transformer.attention_impl", impl)
        except (TypeError, ValueError) as e:
            raise m.error(("search", "attention", i), str(e.args[0] if e.args else e)) from None


def hardware(target: Target) -> Hardware:
    """The search's figures of the target's hardware record (``Target.hardware``, the topology parsed once)."""
    where = target.hardware if target.platform != "cpu" else None
    if where is None:
        return CPU_HARDWARE
    spec = where.spec
    if spec is None:
        raise ValueError(
            f"no target spec for {where.name!r} (topology {str(where)!r}; known: {', '.join(targets.SPECS)})"
        )
    return Hardware(spec.peak_bf16_flops, spec.interconnect_bytes_per_s, float(spec.hbm_bytes), spec.hbm_bytes_per_s)


def proxy_overrides(cfg: Any, layers: int) -> dict[str, Any]:
    """Overrides of a ``layers``-block proxy: the depth, and the STG blocks kept below it (the config
    requires them to exist; a denoising step without STG passes does not run them)."""
    blocks = sorted({min(b, layers - 1) for b in cfg.pipeline.spatio_temporal_guidance_blocks})
    return {"transformer.num_layers": layers, "pipeline.spatio_temporal_guidance_blocks": blocks}


def load_search(path: Path, reports: Path, sweep_id: str | None = None) -> SearchSetup:
    """The search a manifest describes (ManifestError on any problem)."""
    sweep = load_sweep(path)
    m = sweep.manifest
    if m.search is None:
        raise m.error((), "has no [search] table: declare the layout space to search (harness/plan/search_space.py)")
    space = m.search
    check_space(m, space, m.model.preset)
    base = resolve(m, "search-base", {"transformer.sharding": space.base}, ("search", "base"))
    cfg = build_config(base.preset, base.config_overrides)
    facts = model_facts(cfg, model_workload(base.workload), space.base)
    proxy = space.proxy_layers if space.proxy_layers is not None and space.proxy_layers < facts.num_layers else None
    hw = hardware(base.target)
    evaluator = SweepEvaluator(
        manifest=m,
        base=space.base,
        full_layers=facts.num_layers,
        proxy=proxy_overrides(cfg, proxy) if proxy else {},
        proxy_layers=proxy or facts.num_layers,
        reports_dir=reports,
        sweep_id=check_sweep_id(sweep_id or m.name),
        hbm_bytes=hw.hbm_bytes,
    )
    return SearchSetup(m, sweep, space, facts, base.target.devices or 1, hw, evaluator, seeds(sweep, space, facts))


def seeds(sweep: Sweep, space: SearchSpace, facts: ModelFacts) -> tuple[Candidate, ...]:
    """The manifest's declared [[variants]] as points of the space, where it can express them."""
    declared = {spec.name for spec in sweep.manifest.variants}
    out = []
    for v in sweep.variants:
        if v.name in declared:
            t = build_config(v.preset, v.config_overrides).transformer
            mesh = tuple(v.target.mesh_shape.items())
            c = as_candidate(facts, space, get_strategy(t.sharding), mesh, t.attention_impl)
            if c is not None:
                out.append(c)
    return tuple(out)
