"""Every manifest under experiments/ loads, validates and expands."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.expansion import load_sweep
from harness.model import build_config
from ltx2.sharding import strategy_names

EXPERIMENTS = sorted((Path(__file__).parents[3] / "experiments").glob("*.toml"))


def test_there_are_manifests() -> None:
    assert {"cpu.toml", "nightly.toml"} <= {p.name for p in EXPERIMENTS}


@pytest.mark.parametrize("path", EXPERIMENTS, ids=[p.name for p in EXPERIMENTS])
def test_manifest_loads(path: Path) -> None:
    variants = load_sweep(path).variants
    assert variants and len({v.id for v in variants}) == len(variants)
    assert not any(v.preset.startswith("test:") for v in variants)  # test workloads stay in tests


def test_cpu_manifest_runs_every_strategy_once() -> None:
    variants = load_sweep(Path(__file__).parents[3] / "experiments" / "cpu.toml").variants
    strategies = [
        v.config_overrides.get("transformer.sharding") for v in variants if set(v.overrides) == {"transformer.sharding"}
    ]
    assert sorted(strategies) == strategy_names()


@pytest.mark.parametrize("name", ["v6e.toml", "v7x.toml"])
def test_tpu_manifests_climb_the_layout_ladder(name: str) -> None:
    """naive, then its FFN kernels whole on the contracted dim and split on the hidden dim over
    tensor, then Q/K/V's likewise: MaxDiffusion's LTX-2 sharding fixes, one at a time."""
    variants = {v.name: v for v in load_sweep(Path(__file__).parents[3] / "experiments" / name).variants}
    ladder = [variants[n] for n in ("naive", "naive-ffn-fixed", "naive-ffn-qkv-fixed")]
    assert [v.reference for v in ladder[1:]] == ["naive", "naive-ffn-fixed"]
    assert [build_config(v.preset, v.config_overrides).transformer.sharding for v in ladder] == [
        "naive",
        "naive+mlp=tensor+mlp_in=-",
        "naive+heads=tensor+mlp=tensor+mlp_in=-+qkv_in=-",
    ]
    assert len({v.target.mesh for v in ladder}) == 1  # the same chips and mesh: only the rules change
