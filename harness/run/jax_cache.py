"""JAX's persistent compilation cache for measured runs: a warm start, and the compile seconds it saves.

A measuring worker points JAX's persistent cache at ``<reports>/jax-cache/`` (beside the compile-only
``aot-cache/``) before anything compiles, so a second sweep with the same reports folder (or a CI
cache of it) compiles from disk. Each JAX stage records its ``compile_cache``
(:class:`~harness.families.CompileCache`): its first compile (a miss is a cold compile, ``cold_s``)
and the same program compiled again with JAX's in-memory caches cleared, which must come from disk
(``warm_s``; ``warm_misses`` above 0 is an unexpected miss, which the gate fails on).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from harness import families
from harness.families import CompileCache, Static
from harness.run.spec import WorkerSpec

JAX_CACHE_DIR = "jax-cache"
_HIT, _MISS = "/jax/compilation_cache/cache_hits", "/jax/compilation_cache/cache_misses"


def cache_dir_for(spec: WorkerSpec) -> Path | None:
    """``<reports>/jax-cache`` for a measuring single-process worker the runner gave a cache folder;
    else None (only process 0 of a multi-process variant writes entries, so another process's warm
    recompile could race it and miss)."""
    if spec.compile_only or not spec.cache_dir or spec.processes > 1:
        return None
    return Path(spec.cache_dir).parent / JAX_CACHE_DIR


def enable(path: Path) -> None:
    """Send every compile of this process through a persistent cache at ``path`` (however small or quick)."""
    import jax

    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


class CacheEvents:
    """Counts persistent-cache hits and misses while active."""

    def __init__(self) -> None:
        self.hits = self.misses = 0

    def _on_event(self, event: str, **kwargs: Any) -> None:
        if event == _HIT:
            self.hits += 1
        elif event == _MISS:
            self.misses += 1

    def __enter__(self) -> CacheEvents:
        from jax import monitoring

        monitoring.register_event_listener(self._on_event)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        from jax import monitoring

        monitoring.unregister_event_listener(self._on_event)


def warm_recompile(program: Any, compiler_options: Any = None) -> dict[str, Any]:
    """Compile ``program`` (an ``ltx2.StageProgram``: ``fn``, ``abstract_args``) again with JAX's
    in-memory caches cleared: seconds, persistent-cache hits and misses."""
    import jax

    from harness.metrics.compiled.static import lower_and_compile

    jax.clear_caches()
    with CacheEvents() as events:
        start = time.perf_counter()
        lower_and_compile(program.fn, *program.abstract_args, compiler_options=compiler_options or None)
        seconds = time.perf_counter() - start
    return {"seconds": seconds, "hits": events.hits, "misses": events.misses}


def record(first: CacheEvents, first_s: float | None, warm: dict[str, Any], path: Path) -> CompileCache:
    """A stage's ``compile_cache`` entry (see the module docstring)."""
    first_hit = first.misses == 0 and first.hits > 0
    return CompileCache(
        dir=str(path),
        first=families.CacheEvents(seconds=first_s, hits=first.hits, misses=first.misses, hit=first_hit),
        warm=families.CacheEvents(**warm, hit=warm["misses"] == 0 and warm["hits"] > 0),
        cold_s=None if first_hit else first_s,
        warm_s=warm["seconds"],
        warm_misses=warm["misses"],
    )


def static_with_cache(stage: Any, compile_static: Callable[[], Static], path: Path) -> Static:
    """``compile_static()`` (the stage's static metrics) with its cache hits counted, then the warm
    recompile; ``compile_cache`` added to the result."""
    with CacheEvents() as first:
        static = compile_static()
    program = getattr(stage, "program", None)
    if program is None or static.oom:
        return static
    first_s = ((static.lower_s or 0.0) + (static.compile_s or 0.0)) or None
    warm = warm_recompile(program, getattr(stage, "compiler_options", None))
    return static.replace(compile_cache=record(first, first_s, warm, path))
