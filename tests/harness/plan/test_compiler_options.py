"""``target.compiler_options``: parsed and checked in the manifest, part of a variant's id only when set,
carried by the worker spec, the compile cache key and the record, given to every compile (an unknown
option is an error naming the key) and, for a measured run, put in the backend's flags."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from harness import targets
from harness.expansion import expand
from harness.metrics.compiled.static import CompilerOptionError, lower_and_compile
from harness.plan.manifest import Target, parse_manifest
from harness.plan.variants import resolved_settings, select
from harness.results.record import TargetInfo
from harness.run.compile_cache import cache_key
from harness.run.launcher import worker_env
from harness.run.spec import WorkerSpec

FLAGS = "{ xla_tpu_enable_async_collective_fusion = true, xla_tpu_scoped_vmem_limit_kib = 98304 }"
MANIFEST = f"""\
schema_version = 1
[target]
platform = "tpu"
mode = "compile"
topology = "v6e:2x4"
mesh = {{ fsdp = 2, tensor = 4 }}
[model]
preset = "tiny"
overrides = {{ "transformer.sharding" = "trillium" }}
[workload]
height = 64
width = 64
num_frames = 9
batch = 2
text_tokens = 16
[[variants]]
name = "plain"
[[variants]]
name = "async"
overrides = {{ "target.compiler_options" = {FLAGS} }}
"""


def _variants(text: str = MANIFEST) -> dict[str, object]:
    m = parse_manifest(text, "m.toml")
    return {v.name: v for v in expand(m)}


def test_variant_override_sets_the_options_sorted_and_changes_the_id() -> None:
    vs = _variants()
    plain, fast = vs["plain"], vs["async"]
    assert plain.target.compiler_options == ()  # type: ignore[attr-defined]
    assert fast.target.compiler_options == (
        ("xla_tpu_enable_async_collective_fusion", True),  # type: ignore[attr-defined]
        ("xla_tpu_scoped_vmem_limit_kib", 98304),
    )
    assert plain.id != fast.id  # type: ignore[attr-defined]
    # a variant without options has the settings (and id) it had before the key existed
    settings = plain.settings()  # type: ignore[attr-defined]
    assert "compiler_options" not in settings["target"]
    assert fast.settings()["target"]["compiler_options"] == {  # type: ignore[attr-defined]
        "xla_tpu_enable_async_collective_fusion": True,
        "xla_tpu_scoped_vmem_limit_kib": 98304,
    }


def test_options_in_the_target_section_apply_to_every_variant() -> None:
    text = MANIFEST.replace('topology = "v6e:2x4"', f'topology = "v6e:2x4"\ncompiler_options = {FLAGS}')
    text = text.replace(
        f'overrides = {{ "target.compiler_options" = {FLAGS} }}',
        'overrides = { "target.compiler_options" = { xla_tpu_scoped_vmem_limit_kib = 1024 } }',
    )
    vs = _variants(text)
    assert dict(vs["plain"].target.compiler_options)["xla_tpu_enable_async_collective_fusion"] is True  # type: ignore[attr-defined]
    # a variant's table replaces the section's (like target.mesh): not merged key by key
    assert vs["async"].target.compiler_options == (("xla_tpu_scoped_vmem_limit_kib", 1024),)  # type: ignore[attr-defined]


def test_bad_option_value_in_a_variant_names_its_key() -> None:
    text = MANIFEST.replace(FLAGS, "{ xla_foo = { a = 1 } }")
    with pytest.raises(
        ValueError,
        match=r'variants\[1\]\.overrides\."target\.compiler_options"\.xla_foo: expected a '
        "boolean, number or string, got a table",
    ):
        _variants(text)


def _spec(target: Target) -> WorkerSpec:
    v = select(list(_variants().values()), ["async"])[0]
    return WorkerSpec(
        v.name,
        v.id,
        v.preset,
        dict(v.config_overrides),
        target,
        "compile",
        v.workload,
        parse_manifest(MANIFEST).run,
        "/tmp/t",
    )


def test_spec_round_trip_cache_key_and_record_carry_the_options() -> None:
    fast = _variants()["async"].target.resolved()  # type: ignore[attr-defined]
    plain = dataclasses.replace(fast, compiler_options=())
    spec = _spec(fast)
    assert WorkerSpec.from_json(spec.to_json()).target == fast
    assert cache_key(spec, "denoise_step") != cache_key(_spec(plain), "denoise_step")
    other = dataclasses.replace(fast, compiler_options=(("xla_tpu_enable_async_collective_fusion", False),))
    assert cache_key(spec, "denoise_step") != cache_key(_spec(other), "denoise_step")
    assert Target.from_dict(fast.to_dict()) == fast
    written_before = {k: v for k, v in plain.to_dict().items() if k != "compiler_options"}
    assert Target.from_dict(written_before) == plain
    info = TargetInfo("tpu", "compile", {"fsdp": 2}, "v6e:2x4", 8, None, dict(fast.compiler_options))
    assert info.compiler_options == {
        "xla_tpu_enable_async_collective_fusion": True,
        "xla_tpu_scoped_vmem_limit_kib": 98304,
    }


def test_a_measured_run_gets_the_options_as_backend_flags() -> None:
    fast = _variants()["async"].target.resolved()  # type: ignore[attr-defined]
    measured = dataclasses.replace(_spec(fast), mode="measure")
    env = worker_env(measured, {"LIBTPU_INIT_ARGS": "--xla_tpu_other=1"})
    assert env["LIBTPU_INIT_ARGS"] == (
        "--xla_tpu_other=1 --xla_tpu_enable_async_collective_fusion=true --xla_tpu_scoped_vmem_limit_kib=98304"
    )
    assert "LIBTPU_INIT_ARGS" not in worker_env(_spec(fast), {})  # compile-only: compile() gets them itself
    cpu = targets.run_flags_env("cpu", {"xla_disable_hlo_passes": "fusion"}, {"XLA_FLAGS": "--a=1"})
    assert cpu == {"XLA_FLAGS": "--a=1 --xla_disable_hlo_passes=fusion"}
    assert targets.run_flags_env("tpu", {}, {}) == {}


def _fn(x: jax.Array) -> jax.Array:
    return jnp.exp(x) * 2.0 + 1.0


def _entry_lines(text: str) -> list[str]:
    body = text[text.index("ENTRY") :].split("\n")[1:]
    return [line for line in body[: body.index("}")] if " parameter(" not in line and " constant(" not in line]


def _entry_ops(text: str) -> list[str]:
    """The opcode of each instruction of the entry computation, parameters and constants left out."""
    return [line.split(" = ", 1)[1].split("(", 1)[0].split()[-1] for line in _entry_lines(text)]


def test_options_reach_the_compiler_and_an_unknown_one_names_the_key() -> None:
    arg = jax.ShapeDtypeStruct((8,), jnp.float32)
    plain, _ = lower_and_compile(_fn, arg)
    unfused, _ = lower_and_compile(_fn, arg, compiler_options={"xla_disable_hlo_passes": "fusion"})
    # exp, multiply and add are one loop fusion; with the fusion pass off each runs as its own op
    # (wrapped in a one-op fusion or not, as the CPU backend's fusion emitters choose)
    assert _entry_ops(plain.as_text() or "") == ["fusion"]
    assert len(_entry_ops(unfused.as_text() or "")) >= 3
    with pytest.raises(
        CompilerOptionError,
        match=r"^target\.compiler_options\.xla_no_such_flag: the compiler of this "
        r"target has no such option",
    ):
        lower_and_compile(_fn, arg, compiler_options={"xla_no_such_flag": True})


def test_experiment_variants_with_the_async_flags(tmp_path: Path) -> None:
    from harness.expansion import load_sweep

    root = Path(__file__).resolve().parents[3] / "experiments"
    for file, name, ref in (("v6e.toml", "trillium-async", "trillium"), ("v7x.toml", "ironwood-async", "ironwood")):
        sweep = load_sweep(root / file)
        v = select(sweep.variants, [name])[0]
        options = dict(v.target.compiler_options)
        assert v.reference == ref and options["xla_tpu_enable_async_collective_fusion"] is True
        assert len(options) == 6
        reference = select(sweep.variants, [ref])[0]
        assert (
            resolved_settings(
                v.preset, v.config_overrides, dataclasses.replace(v.target, compiler_options=()), v.workload
            )
            == reference.settings()
        )


ASYNC_FLAGS_V6E = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from harness.metrics.hlo import collective_stats, parse
from harness.metrics.compiled.static import lower_and_compile
from harness.targets import compile_devices
mesh = Mesh(np.array(compile_devices("tpu", "v6e:2x4")).reshape(8), ("x",))
w = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "x")))
x = jax.ShapeDtypeStruct((8192, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, P("x", None)))
def f(x, w1, w2):  # four layers whose weights are all-gathered (FSDP-style)
    for i in range(4):
        x = jnp.tanh(x @ (w1 * (i + 1))) @ w2
    return x
fn = jax.jit(f, out_shardings=NamedSharding(mesh, P("x", None)))
flags = {"xla_tpu_enable_async_collective_fusion": True, "xla_tpu_enable_async_collective_fusion_fuse_all_gather": True,
         "xla_tpu_enable_async_collective_fusion_multiple_steps": True, "xla_tpu_overlap_compute_collective_tc": True,
         "xla_enable_async_all_gather": True}
for options in ({}, flags):
    text = lower_and_compile(fn, x, w, w, compiler_options=options)[0].as_text()
    print(text.count('"AsyncCollectiveStart"'), text.count('"AsyncCollectiveDone"'),
          collective_stats(parse(text))["all-gather"].count)
"""


@pytest.mark.aot
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs the [tpu-aot] extra (libtpu): nox -s aot")
def test_async_collective_flags_reach_libtpu() -> None:
    """Compile-only for v6e: without the flags every all-gather is sync; with them libtpu emits async
    collective fusions (start / done pairs), and the collectives still count once each."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[3]
    env = {**os.environ, **targets.compile_env("tpu"), "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, "-c", ASYNC_FLAGS_V6E], cwd=repo, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (plain_starts, plain_dones, plain_ags), (starts, dones, ags) = (
        map(int, ln.split()) for ln in done.stdout.splitlines()
    )
    assert plain_starts == plain_dones == 0
    assert starts == dones > 0
    assert ags == plain_ags
