"""The measured and trace metric families of one stage: timed calls, recompiles, transfers, a trace.

Warm-up calls (the first one compiles) are timed apart from the repeats; the compile watcher
runs over both, so a recompile inside the timed region shows. The machine's load during the
repeats is part of the result (:mod:`harness.run.load`); with ``max_load`` the repeats wait for a
quiet machine first, or refuse. JAX loads only for stages that
use it: the test presets' stages must run without it.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness.families import Load, Measured, Recompiles, Trace, Transfers
from harness.results.stats import summarize
from harness.run import load
from harness.run.stage import Stage

_TRANSFER_LINE = re.compile(r"(host-to-device|device-to-host|device-to-device) transfer")


def _timed(run: Callable[[], Any]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


@contextlib.contextmanager
def _captured_fd2() -> Iterator[list[str]]:
    """Collect what native code writes to stderr (XLA's transfer-guard log) while active."""
    lines: list[str] = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield lines
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            lines.extend(tmp.read().decode(errors="replace").splitlines())


def count_transfers(run: Callable[[], Any]) -> Transfers:
    """Implicit host<->device transfers during one (untimed) call, from jax's transfer guard."""
    import jax

    with _captured_fd2() as lines, jax.transfer_guard("log"):
        run()
    hits = [m.group(1) for line in lines if (m := _TRANSFER_LINE.search(line))]
    examples = [line.strip() for line in lines if _TRANSFER_LINE.search(line)][:5]
    return Transfers(
        host_to_device=hits.count("host-to-device"),
        device_to_host=hits.count("device-to-host"),
        device_to_device=hits.count("device-to-device"),
        examples=examples,
    )


def _compiles(watch: Any, *, timed: bool = False) -> Recompiles:
    """The compiles a watcher saw. In the timed region every compile is a recompile, served by the
    persistent cache or not: a retrace per call that lowers to the same program is a cache hit each
    time (``count`` was 0 for a step recompiled on every call, at 10x its time:
    benchmarks/results/nightly-tpu-gate-2026-11-29.md), so there ``count`` and ``by_function``
    include the hits. In the warm-up a hit is a warm start, not counted."""
    if watch is None:
        return Recompiles(count=0, by_function={}, reasons=[])
    seen = watch.compiles + watch.cache_hits if timed else watch.compiles
    return Recompiles(count=sum(seen.values()), by_function=dict(seen), reasons=watch.reasons[:20])


def measure(
    stage: Stage,
    warmup: int,
    repeats: int,
    status: Callable[[str, str], None],
    *,
    max_load: float | None = None,
    max_load_wait_s: float = 300.0,
) -> Measured:
    """Warm-up calls (first one compiles), then timed repeats with the compile watcher on and the
    machine's load recorded; with ``max_load``, first a bounded wait for a quiet machine
    (:class:`harness.run.load.MachineBusy` if it stays busy)."""
    watcher: Callable[[], Any] = contextlib.nullcontext
    if stage.uses_jax:
        from harness.metrics.measured.recompile import CompileWatcher

        watcher = CompileWatcher
    status(stage.name, "warmup")
    with watcher() as warm_watch:
        warm = [_timed(stage.run) for _ in range(warmup)]
    quiet = None
    if max_load is not None:
        status(stage.name, "wait-quiet")
        quiet = load.wait_for_quiet(max_load, max_load_wait_s)
    status(stage.name, "measure")
    window = load.Window.open()
    with watcher() as watch:
        samples = [_timed(stage.run) for _ in range(repeats)]
    machine_load = window.close().replace(quiet_wait=quiet)
    transfers = None
    if stage.uses_jax:
        status(stage.name, "transfers")
        transfers = count_transfers(stage.run)
    return Measured(
        wall_s=summarize(samples),
        samples_s=samples,
        warmup_s=warm,
        recompiles=_compiles(watch, timed=True),  # in the timed region: must be 0
        warmup_compiles=_compiles(warm_watch),
        transfers=transfers,
        load=machine_load,
    )


def load_notes(machine_load: Load | None) -> list[str]:
    """A stage's note when its samples were taken under load (and when it waited for a quiet machine)."""
    notes = []
    quiet = machine_load.quiet_wait if machine_load is not None else None
    if quiet is not None and (quiet.waited_s or 0.0) >= load.POLL_S * 1.5:
        notes.append(f"waited {quiet.waited_s:.0f} s for a quiet machine (run.max_load = {quiet.max_load:g})")
    if machine_load is not None and machine_load.loaded:
        notes.append(
            f"timed under load: other processes kept {machine_load.others_busy_cores:.2f} of "
            f"{machine_load.cores} cores busy (load average {(machine_load.loadavg_1m or [0.0])[-1]:.2f})"
        )
    return notes


def trace(stage: Stage, log_dir: Path, steps: int, status: Callable[[str, str], None]) -> Trace:
    """An XLA trace of ``steps`` calls, parsed into per-device time by category, per step and by
    model scope (when the stage knows its program's scopes)."""
    from harness.metrics.measured.trace import PERFETTO_TRACE, analyze_trace, capture_trace

    status(stage.name, "trace")
    xplane = capture_trace(stage.run, log_dir, steps=steps)
    status(stage.name, "trace-parse")
    trace_filter = getattr(stage, "trace_filter", None)
    modules, categories, scopes = trace_filter() if trace_filter is not None else (None, None, None)
    metrics = analyze_trace(xplane, modules=modules, categories=categories, scopes=scopes)
    chrome = xplane.parent / PERFETTO_TRACE
    return metrics.replace(
        log_dir=str(log_dir), xplane=str(xplane), steps=steps, chrome_trace=str(chrome) if chrome.exists() else None
    )


TRACE_STEPS = 8  # per-step samples for a diff's intervals
TRACE_BUDGET_S = 6.0  # ... unless that many calls would take longer than this
MIN_TRACE_STEPS = 3


def trace_steps(median_s: float | None) -> int:
    """How many calls to trace: :data:`TRACE_STEPS`, fewer (not below :data:`MIN_TRACE_STEPS`) for a
    stage whose calls would take more than :data:`TRACE_BUDGET_S` together."""
    if not median_s or median_s <= 0:
        return MIN_TRACE_STEPS
    return max(MIN_TRACE_STEPS, min(TRACE_STEPS, int(TRACE_BUDGET_S / median_s)))
