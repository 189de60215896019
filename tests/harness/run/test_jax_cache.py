"""JAX's persistent compilation cache for measured runs: cold and warm compiles, and the gate on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from harness.plan.manifest import Gate
from harness.results import gate
from harness.results.compare import compare_records
from harness.run.jax_cache import JAX_CACHE_DIR, cache_dir_for
from tests.harness.fixtures.synthetic import minimal, records

REPO = Path(__file__).resolve().parents[3]

# In its own process: the persistent cache is process-wide JAX configuration.
SCRIPT = """
import json, sys
from pathlib import Path
import jax, jax.numpy as jnp
from types import SimpleNamespace
from harness.families import Static
from harness.metrics.compiled.static import lower_and_compile
from harness.run import jax_cache

path = Path(sys.argv[1])
jax_cache.enable(path)

def step(x):
    for _ in range(8):
        x = jnp.tanh(x @ x.T)
    return x

program = SimpleNamespace(fn=jax.jit(step), abstract_args=(jax.ShapeDtypeStruct((32, 32), jnp.float32),))

def compile_static():
    return Static(timing=lower_and_compile(program.fn, *program.abstract_args)[1])

stage = SimpleNamespace(program=program, compiler_options={})
cold = jax_cache.static_with_cache(stage, compile_static, path).compile_cache.to_dict()
jax.clear_caches()
warm_start = jax_cache.static_with_cache(stage, compile_static, path).compile_cache.to_dict()
for entry in path.iterdir():  # a cache that lost its entries: the warm recompile has to compile again
    entry.unlink()
forced = jax_cache.static_with_cache(stage, compile_static, path).compile_cache.to_dict()
print(json.dumps({"cold": cold, "warm_start": warm_start, "forced": forced}))
"""


def test_cold_warm_and_a_forced_miss(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "cache")], capture_output=True, text=True, env=env, check=True
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    cold, warm_start, forced = got["cold"], got["warm_start"], got["forced"]
    assert cold["first"]["misses"] > 0 and not cold["first"]["hit"] and cold["cold_s"] > 0
    assert cold["warm"]["hit"] and cold["warm_misses"] == 0 and cold["warm_s"] > 0
    assert warm_start["first"]["hit"] and warm_start.get("cold_s") is None and warm_start["warm_misses"] == 0
    assert forced["warm_misses"] > 0 and not forced["warm"]["hit"]


def test_cache_dir_sits_beside_the_aot_cache_for_measuring_workers():
    def spec(compile_only=False, cache_dir="/r/aot-cache", processes=1):
        return SimpleNamespace(compile_only=compile_only, cache_dir=cache_dir, processes=processes)

    assert cache_dir_for(spec()) == Path("/r") / JAX_CACHE_DIR
    assert cache_dir_for(spec(compile_only=True)) is None
    assert cache_dir_for(spec(cache_dir=None)) is None
    assert cache_dir_for(spec(processes=2)) is None


def _run(cold_s, warm_s, warm_misses, name="v"):
    cache = {"cold_s": cold_s, "warm_s": warm_s, "warm_misses": warm_misses, "first": {"hit": cold_s is None}}
    return records([minimal(name, {"denoise_step": {"static": {"compile_cache": cache}}})])


def _failing(result):
    return [(c.metric, c.verdict) for c in result.failures]


def test_gate_fails_on_a_forced_cache_miss():
    result = gate.evaluate(_run(10.0, 0.5, 0), _run(10.0, 0.5, 3), Gate())
    assert result.exit_code == gate.REGRESSION and _failing(result) == [("compile.warm_misses", "regressed")]


def test_gate_checks_compile_time_as_a_ratio_with_tolerance():
    assert gate.evaluate(_run(10.0, 0.5, 0), _run(14.0, 0.7, 0), Gate()).exit_code == gate.CLEAN  # within 50 %
    slow = gate.evaluate(_run(10.0, 0.5, 0), _run(16.0, 0.5, 0), Gate())
    assert slow.exit_code == gate.REGRESSION and _failing(slow) == [("compile.cold_s", "regressed")]
    strict = Gate(tolerances={"compile": 0.1})
    assert _failing(gate.evaluate(_run(10.0, 0.5, 0), _run(12.0, 0.5, 0), strict)) == [("compile.cold_s", "regressed")]
    # seconds from another kind of machine are shown, not gated; a cache miss is gated everywhere
    other = compare_records(_run(10.0, 0.5, 0), _run(30.0, 2.0, 1), Gate(), timings=False)
    assert [c.metric for c in other.regressions] == ["compile.warm_misses"]


def test_a_warm_start_without_a_cold_compile_is_not_a_missing_metric():
    result = gate.evaluate(_run(10.0, 0.5, 0), _run(None, 0.5, 0), Gate())
    assert result.exit_code == gate.CLEAN and not result.problems
