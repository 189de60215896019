"""Static metrics of a compiled program: collectives, per-device memory, cost, compile time.

Deterministic and hardware-free: lower and compile on `jax.ShapeDtypeStruct`s, for any
model size, on any backend jax can compile for (including TPU/GPU AOT from a CPU host).

Caveats the numbers carry:
* memory is per device. On CPU `peak_memory_in_bytes` is about args + outputs and
  ignores temporaries, so `Memory.bound_bytes` is `arg + out + temp - alias`
  there; elsewhere it is the backend's peak.
* `cost_analysis()` counts a `while`/`scan` body once (collectives do apply trip counts).
* CPU HLO differs from TPU/GPU HLO (bf16 collectives upcast to f32, no reduce-scatter),
  so baselines must be kept per backend.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax

from harness.families import Collectives, CollectiveTotals, Cost, Memory, Static, Timing
from harness.metrics.hlo import HloModule, collective_stats, parse


def compiled_platform(compiled: jax.stages.Compiled) -> str:
    """Platform ('cpu', 'tpu', 'gpu', ...) of the devices a compiled program is assigned to."""
    for sharding in jax.tree.leaves((compiled.input_shardings, compiled.output_shardings)):
        if isinstance(sharding, jax.sharding.Sharding) and sharding.device_set:
            device: Any = next(iter(sharding.device_set))
            return str(device.platform)
    return jax.default_backend()


def _int_or_none(stats: object, name: str) -> int | None:
    value = getattr(stats, name, None)
    return None if value is None else int(value)


def memory_metrics(stats: object | None, platform: str) -> Memory | None:
    """Read a `CompiledMemoryStats` (or None) into the static family's :class:`~harness.families.Memory`."""
    if stats is None:
        return None
    fields = {
        "argument_bytes": "argument_size_in_bytes",
        "output_bytes": "output_size_in_bytes",
        "temp_bytes": "temp_size_in_bytes",
        "alias_bytes": "alias_size_in_bytes",
        "generated_code_bytes": "generated_code_size_in_bytes",
        "peak_bytes": "peak_memory_in_bytes",
    }
    values: dict[str, Any] = {ours: _int_or_none(stats, theirs) for ours, theirs in fields.items()}
    return Memory(**values, bound_bytes=_memory_bound(values, platform))


def _memory_bound(values: Mapping[str, int | None], platform: str) -> int | None:
    peak = values["peak_bytes"]
    if platform != "cpu" and peak is not None:
        return peak
    keys = ("argument_bytes", "output_bytes", "temp_bytes", "alias_bytes")
    arg, out, temp, alias = (values[k] for k in keys)
    if arg is None or out is None or temp is None or alias is None:
        return None
    return arg + out + temp - alias


def cost_metrics(cost: object | None) -> Cost | None:
    """Read `cost_analysis()` output: a dict, a list holding one dict (older jax), or None."""
    if isinstance(cost, list | tuple):
        cost = cost[0] if cost else None
    if not isinstance(cost, Mapping):
        return None

    def get(key: str) -> float | None:
        value = cost.get(key)
        return None if value is None else float(value)

    return Cost(flops=get("flops"), bytes_accessed=get("bytes accessed"), transcendentals=get("transcendentals"))


def _module(compiled: jax.stages.Compiled) -> HloModule:
    """The compiled program's module; a backend that prints no text gives an empty module (no
    collectives counted), said here rather than read from an empty parse."""
    text = compiled.as_text()
    return parse(text) if text else HloModule("", None, {})


def analyze_compiled(compiled: jax.stages.Compiled, module: HloModule | None = None, **fields: Any) -> Static:
    """Collectives, memory and cost of an already compiled program (``module``: its text, already
    parsed, else parsed here), with the ``fields`` of :class:`~harness.families.Static` given."""
    platform = compiled_platform(compiled)
    stats = collective_stats(module if module is not None else _module(compiled))
    by_kind = {k: CollectiveTotals(**vars(c)) for k, c in stats.by_kind.items()}
    return Static(
        platform=platform,
        collectives=Collectives(by_kind=by_kind, unknown_trip_count_loops=list(stats.unknown_trip_count_loops)),
        memory=memory_metrics(compiled.memory_analysis(), platform),
        cost=cost_metrics(compiled.cost_analysis()),
        **fields,
    )


def lower_and_compile(
    fn: Callable[..., Any], *args: Any, compiler_options: Mapping[str, Any] | None = None, **kwargs: Any
) -> tuple[jax.stages.Compiled, Timing]:
    """Lower and compile `fn` (jitted, or wrapped here with `jax.jit`) on abstract or concrete args.
    ``compiler_options`` (XLA / libtpu option name -> value) go to `Lowered.compile`; the backend
    rejects a name it does not know (`No such compile option`)."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    start = time.perf_counter()
    lowered = jitted.lower(*args, **kwargs)  # type: ignore[attr-defined]
    lowered_at = time.perf_counter()
    compiled = _compile(lowered, compiler_options) if compiler_options else lowered.compile()
    done = time.perf_counter()
    return compiled, Timing(lower_seconds=lowered_at - start, compile_seconds=done - lowered_at)


class CompilerOptionError(ValueError):
    """A compiler option the backend does not know: ``target.compiler_options.<name>: <reason>``."""


_NO_SUCH_OPTION = re.compile(r"No such compile option: '([^']+)'")


def _compile(lowered: jax.stages.Lowered, options: Mapping[str, Any]) -> jax.stages.Compiled:
    try:
        return lowered.compile(compiler_options=dict(options))
    except Exception as e:
        m = _NO_SUCH_OPTION.search(str(e))
        if m is None:
            raise
        known = ", ".join(sorted(options))
        raise CompilerOptionError(
            f"target.compiler_options.{m.group(1)}: the compiler of this target has no such "
            f"option (options given: {known})"
        ) from e
