"""The accuracy probe of compile-only variants (harness/run/probe.py): its three configs, the update it
compares, its summary, the worker's record of it and the page's label."""

from __future__ import annotations

import numpy as np
import pytest

from harness.report import html, tables
from harness.run import probe

V6E_PARTIALS = {
    "transformer.dtype": "bfloat16",
    "transformer.param_dtype": "bfloat16",
    "transformer.sharding": "naive",
    "sharding.rules.mlp": ["tensor"],
    "sharding.rules.heads": ["tensor"],
    "transformer.attention_impl": "splash",
    "transformer.linear_partials": "activation",
    "pipeline.stg_fork": True,
    "guidance.stg_scale": 1.0,
    "model.preset": "ltx2.3-22b",
    "transformer.attention_impl_min_tokens": 1024,
}


def test_the_reference_resets_every_numerics_knob_and_keeps_the_model() -> None:
    c = probe.configs(V6E_PARTIALS)
    assert c["reference"] == {
        "guidance.stg_scale": 1.0,
        "pipeline.guidance_batching": "sequential",
        "pipeline.stg_fork": False,
        "pipeline.text_kv_cache": False,
    }
    assert c["bf16"] == {**c["reference"], "transformer.dtype": "bfloat16", "transformer.param_dtype": "bfloat16"}
    dropped = ("model.preset", "transformer.attention_impl_min_tokens")  # splash on every (short) attention
    assert c["variant"] == {k: v for k, v in V6E_PARTIALS.items() if k not in dropped}


def test_the_update_is_the_output_minus_the_latents_it_updates() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    state = {"w": np.zeros((2, 3), np.float32)}  # the weights (args[0]) are never subtracted
    out = {"[0]": x + 0.5, "[1]": np.ones(4, np.float32)}
    got = probe.update(out, (state, x, np.float32(2.0)))
    assert np.array_equal(got["[0]"], np.full((2, 3), 0.5)) and np.array_equal(got["[1]"], np.ones(4))


def test_summary_medians_and_ratio() -> None:
    variant = [{"rel_l2": r, "max_abs": 1.0} for r in (2e-3, 4e-3, 3e-3)]
    bf16 = [{"rel_l2": r, "max_abs": 1.0} for r in (2e-3, 2e-3, 4e-3)]
    s = probe.summary(variant, bf16)
    assert s["rel_l2"] == 3e-3 and s["bf16_rel_l2"] == 2e-3 and s["ratio"] == pytest.approx(1.0)
    assert s["worse"] == 1 and s["seeds"] == 3 and "not the target" in s["where"]


def test_the_page_labels_a_probe_as_measured_on_cpu() -> None:
    p = {"rel_l2": 6.3e-3, "ratio": 1.003, "worse": 2, "seeds": 8, "bf16_rel_l2": 6.28e-3}
    row = tables.StageRow("v", "id", "denoise_step", "ok", "compile", *[None] * 9, probe=p)
    page = html.variant_section([row], None)
    assert "6.30e-03" in page and "1.003x plain bf16 (worse on 2/8 seeds); CPU probe, small config" in page


@pytest.mark.slow
def test_the_worker_records_a_probe(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The worker's probe subprocess (8 CPU devices) for a compile-only TPU variant: plain bfloat16
    is the probe's own bf16 config, so its ratio is exactly 1 on every seed; bfloat16's update is
    a few roundings (2^-9 each) off float32's, between 2^-12 and 2^-4."""
    from harness.plan.manifest import Run, Target, Workload
    from harness.run.spec import WorkerSpec
    from harness.run.worker import _with_probe

    spec = WorkerSpec(
        "bf16",
        "abc",
        "ltx2_19b",
        {"transformer.dtype": "bfloat16", "transformer.param_dtype": "bfloat16"},
        Target(platform="tpu", topology="v6e:2x4", mesh=(("data", 2), ("context", 2), ("tensor", 2))),
        "compile",
        Workload(),
        Run(metrics=("static", "accuracy")),
        str(tmp_path / "traces"),
        scratch_dir=str(tmp_path),
    )
    notes: list[str] = []
    static = _with_probe("denoise_step", {"memory": {}}, spec, notes)
    got = static["accuracy_probe"]
    assert got["ratio"] == 1.0 and got["worse"] == 0 and got["seeds"] == probe.SEEDS, (got, notes)
    assert 2.0**-12 < got["rel_l2"] < 2.0**-4 and got["rel_l2"] == got["bf16_rel_l2"]
    assert notes == [f"accuracy probe: {got['where']}"]
