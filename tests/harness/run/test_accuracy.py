"""The accuracy metric: a variant's stage output on its reference's inputs against the reference's
output (harness/metrics/measured/accuracy.py, harness/run/accuracy.py), recorded, flattened and shown."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from harness import catalogue
from harness.expansion import load_sweep
from harness.metrics.measured import accuracy
from harness.results.compare import flatten_stage
from harness.run.launcher import LocalLauncher
from harness.run.runner import SweepOptions, accuracy_fields, run_sweep


def test_compare_over_every_leaf() -> None:
    ref = {"[0]": np.array([3.0, 4.0]), "[1]": np.array([[0.0]])}
    out = {"[0]": np.array([3.0, 4.5]), "[1]": np.array([[-1.0]])}
    got = accuracy.compare(out, ref)
    assert got == {"rel_l2": pytest.approx(np.sqrt(1.25) / 5.0), "max_abs": 1.0, "elements": 3, "leaves": 2}
    assert accuracy.compare(ref, ref)["rel_l2"] == 0.0
    with pytest.raises(ValueError, match=r"leaf \[0\] has shape \(3,\)"):
        accuracy.compare({"[0]": np.zeros(3), "[1]": np.zeros((1, 1))}, ref)
    with pytest.raises(ValueError, match="leaves"):
        accuracy.compare({"[0]": np.zeros(2)}, ref)


def test_like_casts_reshapes_and_passes_key_leaves() -> None:
    """A reference's arguments in this variant's dtypes and shapes; a PRNG key leaf (a VAE decode's
    noise key) passes as it is (a key array has no astype: the vae-sharded variant of cpu.toml
    failed its stage on it)."""
    import jax
    import jax.numpy as jnp

    from harness.run.accuracy import like

    key = jax.random.key(3)
    abstract = (jax.ShapeDtypeStruct((2, 3), jnp.bfloat16), jax.ShapeDtypeStruct(key.shape, key.dtype))
    x, k = like((np.arange(6, dtype=np.float32), key), abstract)
    assert x.shape == (2, 3) and x.dtype == jnp.bfloat16
    assert np.array_equal(np.asarray(x, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert k.dtype == key.dtype and np.array_equal(jax.random.key_data(k), jax.random.key_data(key))
    with pytest.raises(ValueError, match="shape"):
        like((np.zeros(5, np.float32), key), abstract)


def test_outputs_round_trip(tmp_path: Path) -> None:
    arrays = {"['video']": np.arange(6, dtype=np.float32).reshape(2, 3), "['audio']": np.ones(2, np.float64)}
    path = accuracy.output_path(tmp_path, "abc", "denoise_step")
    accuracy.save(path, arrays)
    back = accuracy.load(path)
    assert list(back) == list(arrays) and all(np.array_equal(back[k], arrays[k]) for k in arrays)
    assert back["['video']"].dtype == np.float32


BF16 = '"transformer.dtype" = "bfloat16", "transformer.param_dtype" = "bfloat16"'
MANIFEST = """
schema_version = 1
[target]
platform = "cpu"
devices = 8
mesh = { data = 2, tensor = 4 }
[model]
preset = "tiny"
[workload]
height = 64
width = 64
num_frames = 9
steps = 2
batch = 2
text_tokens = 16
stages = ["denoise_step"]
[run]
repeats = 1
warmup = 0
metrics = ["measured"]
[[variants]]
name = "f32"
overrides = { "transformer.sharding" = "replicated" }
[[variants]]
name = "bf16"
reference = "f32"
overrides = { "transformer.sharding" = "replicated", BF16 }
[[variants]]
name = "naive"
reference = "f32"
overrides = { "transformer.sharding" = "naive" }
[[variants]]
name = "other-size"
reference = "f32"
overrides = { "transformer.sharding" = "replicated", "workload.height" = 128 }
""".replace("BF16", BF16)


def test_which_variants_keep_and_compare(tmp_path: Path) -> None:
    path = tmp_path / "acc.toml"
    path.write_text(MANIFEST)
    variants = load_sweep(path).variants
    fields = {v.name: accuracy_fields(v, variants, tmp_path / "outputs") for v in variants}
    assert fields["f32"] == {"outputs_dir": str(tmp_path / "outputs"), "save_output": True, "reference": None}
    assert fields["bf16"]["reference"]["id"] == variants[0].id and not fields["bf16"]["save_output"]
    assert fields["other-size"] == {}  # another workload size: outputs of other shapes, nothing to compare


def test_a_sweep_records_each_variants_accuracy(tmp_path: Path) -> None:
    """bfloat16 against float32 on the same weights: the relative L2 of the output is a few bfloat16
    roundings (unit roundoff 2^-9 = 2.0e-3) grown through two blocks, between 2^-12 and 2^-4;
    another sharding in float32 only reorders float32 sums (2^-24 = 6e-8 each): below 2^-16."""
    path = tmp_path / "acc.toml"
    path.write_text(MANIFEST.split('[[variants]]\nname = "other-size"')[0])
    result = run_sweep(
        load_sweep(path),
        SweepOptions(reports_dir=tmp_path / "reports"),
        stream=io.StringIO(),
        launcher=LocalLauncher(kill_grace_s=1.0),
    )
    by_name = {r.variant.name: r for r in result.records}
    assert all(r.ok for r in result.records), [r.error for r in result.records]
    metrics = {n: flatten_stage(r.stages["denoise_step"]) for n, r in by_name.items()}
    assert catalogue.ACCURACY_L2 not in metrics["f32"]  # the reference itself
    bf16 = metrics["bf16"][catalogue.ACCURACY_L2].value
    naive = metrics["naive"][catalogue.ACCURACY_L2].value
    assert 2.0**-12 < bf16 < 2.0**-4, bf16
    assert naive < 2.0**-16, naive
    assert metrics["bf16"][catalogue.ACCURACY_MAX].value > 0
    assert by_name["bf16"].stages["denoise_step"].measured.accuracy["reference"] == "f32"
    assert (tmp_path / "reports" / "acc" / "outputs" / by_name["f32"].variant.id / "denoise_step.npz").exists()
    # on the page beside the speedup, and in the CSV's columns (both derive from the catalogue)
    from harness.report import html

    page = html.render(result.records, tmp_path)
    assert "rel L2 vs ref" in page and f"{bf16:.2e}" in page
