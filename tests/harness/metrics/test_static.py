"""Static metrics of programs compiled for 8 simulated CPU devices, on ShapeDtypeStructs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from harness.families import Static
from harness.metrics.compiled.static import (
    analyze_compiled,
    cost_metrics,
    lower_and_compile,
    memory_metrics,
)

F32 = 4


def compile_and_analyze(fn, *args, **kwargs) -> Static:  # type: ignore[no-untyped-def]
    """`lower_and_compile` then `analyze_compiled`, with the compile timing attached (as the worker does)."""
    compiled, timing = lower_and_compile(fn, *args, **kwargs)
    return analyze_compiled(compiled, timing=timing)


@pytest.fixture(scope="module")
def mesh() -> jax.sharding.Mesh:
    assert jax.device_count() == 8, "tests/conftest.py must force 8 host devices"
    return jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,))


def _sds(mesh: jax.sharding.Mesh, shape: tuple[int, ...], spec: P) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))


def _kind(metrics: Static, kind: str) -> tuple[float | None, ...]:
    """(count, operand bytes, result bytes) of one collective kind."""
    assert metrics.collectives is not None and metrics.collectives.by_kind is not None
    c = metrics.collectives.by_kind[kind]
    return c.count, c.operand_bytes, c.result_bytes


def _total_count(metrics: Static) -> float:
    assert metrics.collectives is not None and metrics.collectives.by_kind is not None
    return sum(c.count or 0 for c in metrics.collectives.by_kind.values())


def _matmul(mesh: jax.sharding.Mesh):
    rows = NamedSharding(mesh, P("x", None))
    return jax.jit(lambda x, w: jax.lax.with_sharding_constraint(x @ w, rows))


def test_contracting_sharded_matmul_all_gathers_weight(mesh) -> None:
    x, w = _sds(mesh, (64, 32), P("x", None)), _sds(mesh, (32, 16), P("x", None))
    metrics = compile_and_analyze(_matmul(mesh), x, w)
    assert metrics.platform == "cpu"
    assert _kind(metrics, "all-gather") == (1, 4 * 16 * F32, 32 * 16 * F32)
    assert _total_count(metrics) == 1
    mem = metrics.memory
    assert mem is not None
    assert mem.argument_bytes == (8 * 32 + 4 * 16) * F32  # per device shards of x and w
    assert mem.output_bytes == 8 * 16 * F32
    assert mem.bound_bytes == mem.argument_bytes + mem.output_bytes + mem.temp_bytes - mem.alias_bytes
    assert metrics.cost is not None and metrics.cost.flops == 2 * 8 * 32 * 16
    assert metrics.timing is not None
    assert metrics.timing.lower_seconds > 0 and metrics.timing.compile_seconds > 0


def test_sum_over_sharded_axis_all_reduces(mesh) -> None:
    x = _sds(mesh, (64, 32), P("x", None))
    metrics = compile_and_analyze(lambda x: x.sum(axis=0), x)
    assert _kind(metrics, "all-reduce") == (1, 32 * F32, 32 * F32)
    assert _total_count(metrics) == 1


def test_replicated_program_has_no_collectives(mesh) -> None:
    x, w = _sds(mesh, (64, 32), P()), _sds(mesh, (32, 16), P())
    metrics = compile_and_analyze(jax.jit(lambda x, w: x @ w), x, w)
    assert _total_count(metrics) == 0


def test_scan_counts_collective_per_iteration(mesh) -> None:
    def body(c, _):
        return jnp.tanh(c) + c.sum(axis=0, keepdims=True), None

    x = _sds(mesh, (64, 32), P("x", None))
    compiled, timing = lower_and_compile(jax.jit(lambda x: jax.lax.scan(body, x, None, length=5)[0]), x)
    metrics = analyze_compiled(compiled)
    assert _kind(metrics, "all-reduce") == (5, 5 * 32 * F32, 5 * 32 * F32)
    assert _total_count(metrics) == 5
    assert metrics.timing is None and timing.compile_seconds > 0


def test_to_dict_is_json_serialisable(mesh) -> None:
    x, w = _sds(mesh, (64, 32), P("x", None)), _sds(mesh, (32, 16), P("x", None))
    d = compile_and_analyze(_matmul(mesh), x, w).to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["collectives"]["by_kind"]["all-gather"]["count"] == 1
    assert d["memory"]["output_bytes"] == 512
    assert set(d["cost"]) <= {"flops", "bytes_accessed", "transcendentals"} and "flops" in d["cost"]
    assert Static.from_dict(d).to_dict() == d


def test_cost_metrics_accepts_dict_list_and_none() -> None:
    assert cost_metrics(None) is None
    assert cost_metrics([]) is None
    assert cost_metrics([{"flops": 6, "bytes accessed": 8}]).to_dict() == {"flops": 6.0, "bytes_accessed": 8.0}
    assert cost_metrics({"flops": 1.5, "transcendentals": 2}).to_dict() == {"flops": 1.5, "transcendentals": 2.0}


def test_memory_metrics_none_safe_and_bound_per_platform() -> None:
    assert memory_metrics(None, "cpu") is None
    stats = SimpleNamespace(
        argument_size_in_bytes=100,
        output_size_in_bytes=20,
        temp_size_in_bytes=300,
        alias_size_in_bytes=20,
        generated_code_size_in_bytes=None,
        peak_memory_in_bytes=120,
    )
    assert memory_metrics(stats, "cpu").bound_bytes == 400  # peak ignores temp on CPU
    assert memory_metrics(stats, "tpu").bound_bytes == 120
    assert memory_metrics(stats, "tpu").generated_code_bytes is None
    no_peak = SimpleNamespace(**{**vars(stats), "peak_memory_in_bytes": None})
    assert memory_metrics(no_peak, "gpu").bound_bytes == 400
