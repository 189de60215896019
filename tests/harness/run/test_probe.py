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
    from harness.families import Static
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
    got = _with_probe("denoise_step", Static.from_dict({"memory": {}}), spec, notes).accuracy_probe
    assert got["ratio"] == 1.0 and got["worse"] == 0 and got["seeds"] == probe.SEEDS, (got, notes)
    assert 2.0**-12 < got["rel_l2"] < 2.0**-4 and got["rel_l2"] == got["bf16_rel_l2"]
    assert notes == [f"accuracy probe: {got['where']}"]


def test_the_probe_script_keeps_each_reference_in_one_part() -> None:
    """benchmarks/accuracy_probe.py's parts: every knob set once, a reference's sets together (so
    its float32 and plain bf16 runs happen once), parts of about equal cost."""
    from benchmarks import accuracy_probe

    mesh = {"data": 2, "tensor": 4}
    todo = {f"set{i}": ({"transformer.sharding": s}, mesh, "denoise_step") for i, s in enumerate("abcdef")}
    todo |= {f"loop{i}": ({"transformer.sharding": s}, mesh, "denoise_loop") for i, s in enumerate("abc")}
    todo["other"] = ({"guidance.stg_scale": 1.0}, mesh, "denoise_step")
    parts = accuracy_probe.parts(todo, 3)
    assert sorted(k for p in parts for k in p) == sorted(todo)
    assert sorted(map(sorted, parts)) == [["loop0", "loop1", "loop2"], ["other"], [f"set{i}" for i in range(6)]]
    assert accuracy_probe.parts(todo, 1) == [list(todo)]


def test_a_reference_is_keyed_by_what_it_runs() -> None:
    mesh = {"data": 2, "tensor": 4}
    key = probe.baseline_key(V6E_PARTIALS, mesh, "denoise_step", 8)
    assert key == probe.baseline_key(
        {**V6E_PARTIALS, "transformer.linear_partials": "float32"}, mesh, "denoise_step", 8
    )
    assert key != probe.baseline_key(V6E_PARTIALS, {"data": 2, "tensor": 2, "context": 2}, "denoise_step", 8)
    assert key != probe.baseline_key(V6E_PARTIALS, mesh, "denoise_loop", 8)
    assert key != probe.baseline_key({**V6E_PARTIALS, "guidance.stg_scale": 0.0}, mesh, "denoise_step", 8)
    assert key != probe.baseline_key(V6E_PARTIALS, mesh, "denoise_step", 4)


@pytest.mark.slow
def test_a_shared_reference_gives_the_same_numbers() -> None:
    """Two seeds of a tensor-parallel variant with bf16 partial sums, probed alone and then again
    from the reference runs kept by the first call: identical numbers, and the second call builds
    only the variant's program."""
    import jax

    import ltx2

    if len(jax.devices("cpu")) < 8:
        pytest.skip("needs 8 CPU devices")
    variant = {k: v for k, v in V6E_PARTIALS.items() if not k.startswith(("guidance", "pipeline", "model"))}
    mesh = {"data": 2, "context": 2, "tensor": 2}
    baselines: dict[str, probe.Baseline] = {}
    alone = probe.probe(variant, mesh, "denoise_step", seeds=2, baselines=baselines)
    assert len(baselines) == 1
    built = []
    real = ltx2.build_stage
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ltx2, "build_stage", lambda *a, **k: built.append(a[1]) or real(*a, **k))
        shared = probe.probe(variant, mesh, "denoise_step", seeds=2, baselines=baselines)
    assert shared == alone and len(built) == 1 and alone["seeds"] == 2
