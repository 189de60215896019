"""Count XLA compilations per function, and say why they happened.

`jax.monitoring` fires `/jax/core/compile/backend_compile_duration` (with `fun_name`,
e.g. `jit(f)`) for every backend compile, including ones served by the persistent
compilation cache. A persistent-cache hit fires `/jax/compilation_cache/cache_hits`
(without a fun_name) on the same thread just before its duration event, so a hit is
attributed to the compile event that follows it on that thread and not counted as a
compile. Reasons come from `jax_explain_cache_misses`, whose explanations jax logs on
the `jax` logger.

    with CompileWatcher() as watch:
        step(x, scale=1.0); step(x, scale=2.0)
    watch.count("step")   # -> 2 if `scale` is static
    watch.reasons         # -> ["TRACING CACHE MISS at ... scale ..."]

Small jit helpers (`jit(broadcast_in_dim)` from `jnp.ones`, ...) are counted too: filter by name.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from types import TracebackType

import jax
from jax import monitoring

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
CACHE_HIT_EVENT = "/jax/compilation_cache/cache_hits"
_MISS_MARKER = "CACHE MISS"
_EXPLAIN_FLAG = "jax_explain_cache_misses"


class _ReasonHandler(logging.Handler):
    """Keeps the messages of cache-miss explanations logged under `jax`."""

    def __init__(self, sink: list[str]) -> None:
        super().__init__(level=logging.DEBUG)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if _MISS_MARKER in message:
            self._sink.append(message)


class CompileWatcher:
    """Context manager counting backend compiles by `fun_name` while it is active.

    Attributes (read after or during the block):
        compiles: fun_name -> compiles not served by the persistent cache.
        cache_hits: fun_name -> compiles served by the persistent cache.
        reasons: cache-miss explanations logged by jax (only if `explain=True`).
    """

    def __init__(self, *, explain: bool = True) -> None:
        self.explain = explain
        self.compiles: Counter[str] = Counter()
        self.cache_hits: Counter[str] = Counter()
        self.reasons: list[str] = []
        self._lock = threading.Lock()
        self._pending_hit = threading.local()
        self._handler = _ReasonHandler(self.reasons)
        self._saved_explain: bool | None = None

    @property
    def total(self) -> int:
        """Compiles of every function, persistent-cache hits excluded."""
        return sum(self.compiles.values())

    def count(self, name: str) -> int:
        """Compiles of functions called `name`: matches `name` itself or a wrapper like `jit(name)`."""
        return sum(n for fun, n in self.compiles.items() if fun == name or fun.endswith(f"({name})"))

    def _on_event(self, event: str, **kwargs: str | int) -> None:
        if event == CACHE_HIT_EVENT:
            self._pending_hit.value = True

    def _on_duration(self, event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event != BACKEND_COMPILE_EVENT:
            return
        hit = getattr(self._pending_hit, "value", False)
        self._pending_hit.value = False
        with self._lock:
            (self.cache_hits if hit else self.compiles)[str(kwargs.get("fun_name", "?"))] += 1

    def __enter__(self) -> CompileWatcher:
        monitoring.register_event_listener(self._on_event)
        monitoring.register_event_duration_secs_listener(self._on_duration)
        if self.explain:
            self._saved_explain = bool(getattr(jax.config, _EXPLAIN_FLAG))
            jax.config.update(_EXPLAIN_FLAG, True)
            logging.getLogger("jax").addHandler(self._handler)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        monitoring.unregister_event_listener(self._on_event)
        monitoring.unregister_event_duration_listener(self._on_duration)
        if self.explain:
            logging.getLogger("jax").removeHandler(self._handler)
            jax.config.update(_EXPLAIN_FLAG, self._saved_explain)
