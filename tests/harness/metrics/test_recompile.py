"""Compile counting with jax.monitoring, and cache-miss reasons from jax's logger."""

from __future__ import annotations

import functools
import logging

import jax
import jax.numpy as jnp
from jax import monitoring

from harness.metrics.measured.recompile import BACKEND_COMPILE_EVENT, CACHE_HIT_EVENT, CompileWatcher


def test_static_float_recompiles_per_value() -> None:
    @functools.partial(jax.jit, static_argnames=("scale",))
    def f_static(x, scale):
        return jnp.sin(x) * scale

    x = jnp.ones((16,))
    with CompileWatcher() as watch:
        f_static(x, scale=1.0)
        f_static(x, scale=1.0)
        f_static(x, scale=2.0)
    assert watch.count("f_static") == 2
    assert watch.compiles["jit(f_static)"] == 2
    assert any("TRACING CACHE MISS" in r and "scale" in r for r in watch.reasons), watch.reasons


def test_traced_float_compiles_once() -> None:
    @jax.jit
    def f_traced(x, scale):
        return jnp.sin(x) * scale

    x = jnp.ones((16,))
    with CompileWatcher() as watch:
        f_traced(x, jnp.float32(1.0))
        f_traced(x, jnp.float32(2.0))
        f_traced(x, jnp.float32(3.0))
    assert watch.count("f_traced") == 1
    assert watch.cache_hits == {}


def test_exit_unregisters_and_restores_config() -> None:
    logger = logging.getLogger("jax")
    handlers = list(logger.handlers)
    before = jax.config.jax_explain_cache_misses
    with CompileWatcher() as watch:
        assert jax.config.jax_explain_cache_misses is True
        assert len(logger.handlers) == len(handlers) + 1
    assert jax.config.jax_explain_cache_misses == before
    assert logger.handlers == handlers

    @jax.jit
    def after_exit(x):
        return x + 1

    after_exit(jnp.ones((3,)))
    monitoring.record_event_duration_secs(BACKEND_COMPILE_EVENT, 0.01, fun_name="jit(g)")
    assert watch.total == 0 and watch.compiles == {}


def test_persistent_cache_hit_is_not_a_compile() -> None:
    with CompileWatcher(explain=False) as watch:
        monitoring.record_event(CACHE_HIT_EVENT)
        monitoring.record_event_duration_secs(BACKEND_COMPILE_EVENT, 0.01, fun_name="jit(g)")
        monitoring.record_event_duration_secs(BACKEND_COMPILE_EVENT, 0.50, fun_name="jit(g)")
    assert watch.cache_hits == {"jit(g)": 1}
    assert watch.compiles == {"jit(g)": 1}
    assert watch.count("g") == 1


def test_a_compile_in_the_timed_region_counts_even_when_the_persistent_cache_serves_it() -> None:
    """A retrace per call lowering to the same program hits the disk cache every time: still a recompile."""
    from harness.run.measure import _compiles

    with CompileWatcher(explain=False) as watch:
        for _ in range(3):
            monitoring.record_event(CACHE_HIT_EVENT)
            monitoring.record_event_duration_secs(BACKEND_COMPILE_EVENT, 0.01, fun_name="jit(step)")
    assert watch.total == 0 and watch.cache_hits == {"jit(step)": 3}
    assert _compiles(watch, timed=True)["count"] == 3
    assert _compiles(watch, timed=True)["by_function"] == {"jit(step)": 3}
    assert _compiles(watch)["count"] == 0  # the warm-up's: a hit is a warm start
