"""The worker's model side: a :class:`~harness.run.stage.Stage` over an :class:`ltx2.StageProgram`,
and the variant's config, mesh and devices it is built on (:func:`open_model`).

Every compile of a stage gets the variant's ``target.compiler_options`` (the run compiles with them too:
the launcher puts them in the backend's flags, :func:`harness.run.launcher.worker_env`).
A compiled stage keeps its optimized HLO text (:attr:`JaxStage.hlo_text`), parsed once
(:func:`harness.metrics.hlo.parse`) for every analysis that reads the scheduled program: static
metrics, attribution of FLOPs, bytes and collectives to the model's named
scopes (``static["attribution"]``), and the table that maps a trace's ops to scopes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
from jax.sharding import Mesh

from harness import targets
from harness.families import Static
from harness.metrics.compiled.attribution import Scopes, instruction_scopes, static_by_scope
from harness.metrics.compiled.collective_cause import ParamLayout, ShardingFacts
from harness.metrics.compiled.static import CompilerOptionError, analyze_compiled, lower_and_compile
from harness.metrics.hlo import HloModule, collective_instructions, matmul_flops, memory_traffic_bytes, parse
from harness.model import build_config, config_dict, model_workload
from harness.plan.manifest import Target
from harness.run.spec import WorkerSpec
from ltx2 import PipelineConfig, StageProgram, StageUnavailable, Workload, build_mesh, build_stage, get_strategy, scopes


@dataclass
class JaxStage:
    """An :class:`ltx2.StageProgram` to compile (static metrics), prepare (concrete inputs) and run."""

    program: StageProgram
    seed: int = 0
    args: tuple[Any, ...] | None = None
    hlo_text: str | None = None  # the compiled program's optimized HLO, once compiled
    uses_jax: bool = True
    mesh: Mesh | None = None
    compiler_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the variant's target's
    _parsed: tuple[str, HloModule] | None = dataclasses.field(default=None, repr=False)

    @property
    def hlo(self) -> HloModule | None:
        """:attr:`hlo_text` parsed, once per text (the worker may set the text from its compile cache)."""
        if self.hlo_text is None:
            return None
        if self._parsed is None or self._parsed[0] is not self.hlo_text:
            self._parsed = (self.hlo_text, parse(self.hlo_text))
        return self._parsed[1]

    @property
    def name(self) -> str:
        return self.program.name

    @property
    def notes(self) -> list[str]:
        return list(self.program.notes)

    @property
    def calls_per_video(self) -> int:
        return self.program.calls_per_video

    def static(self) -> Static:
        """Collectives, memory and cost of the program, plus what the HLO text and the model say
        (matmul FLOPs with loop trip counts, memory traffic, analytic FLOPs, extra) and the
        attribution of FLOPs, bytes and collectives to model scopes."""
        p = self.program
        compiled, timing = lower_and_compile(p.fn, *p.abstract_args, compiler_options=self.compiler_options)
        self.hlo_text = compiled.as_text() or ""
        module = self.hlo
        assert module is not None
        return analyze_compiled(
            compiled,
            module,
            timing=timing,
            analytic_flops=p.analytic_flops,
            matmul_flops=matmul_flops(module),
            memory_traffic_bytes=memory_traffic_bytes(module),
            attribution=static_by_scope(module, scopes.scope_path, sharding_facts(p, self.mesh)),
            **p.extra,
        )

    def trace_filter(self) -> tuple[set[str] | None, dict[str, str] | None, Scopes]:
        """HLO module name, collective instruction kinds and instruction scopes, to read this
        stage's ops from a trace (a host loop's ops are its step program's: the same module)."""
        if self.hlo_text is None:
            compiled, _ = lower_and_compile(
                self.program.fn, *self.program.abstract_args, compiler_options=self.compiler_options
            )
            self.hlo_text = compiled.as_text() or ""
        module = self.hlo
        assert module is not None
        names = instruction_scopes(module, scopes.scope_path)
        return ({names.module} if names.module else None), collective_instructions(module), names

    def prepare(self) -> None:
        self.args = jax.block_until_ready(self.program.make_args(self.seed))

    def run(self) -> Any:
        if self.args is None:
            raise RuntimeError(f"stage {self.name}: run() before prepare()")
        return jax.block_until_ready(self.program.run(*self.args))


# --------------------------------------------------------------------------- a worker's model side


def device_mesh(target: Target, compile_only: bool) -> tuple[Mesh, dict[str, Any]]:
    """The mesh for a variant (Auto axes), and what the worker sees of the machine.

    Compile-only for TPU or GPU uses devices described by the target's topology (no
    hardware needed; :func:`harness.targets.compile_devices`).
    """
    shape = dict(target.mesh)  # resolved by the runner: axis -> size
    n = math.prod(shape.values())
    if compile_only and target.platform != "cpu":
        if not target.topology:
            example = {"tpu": "v6e:2x4", "gpu": "h100:1x1x8"}.get(target.platform, "...")
            raise RuntimeError(
                f"compile-only analysis for {target.platform} needs target.topology "
                f"(e.g. {example!r}): no {target.platform} devices here"
            )
        devices: list[Any] = targets.compile_devices(target.platform, target.topology)
    else:
        devices = list(jax.devices())
    if len(devices) < n:
        raise RuntimeError(f"mesh {shape} needs {n} devices, found {len(devices)} ({jax.default_backend()})")
    if jax.process_count() > 1 and len(devices) != n:
        raise RuntimeError(
            f"mesh {shape} spans {n} devices, the {jax.process_count()} processes have {len(devices)}: "
            "a multi-process mesh must use every process's devices"
        )
    mesh = build_mesh(shape, devices=devices[:n])
    machine = {"backend": jax.default_backend(), "device_kind": devices[0].device_kind, "device_count": len(devices)}
    return mesh, machine


@dataclass(frozen=True)
class ModelStages:
    """A worker's model: the variant's config (built once), its workload, mesh and machine."""

    cfg: PipelineConfig
    workload: Workload
    mesh: Mesh
    machine: dict[str, Any]
    seed: int = 0
    unavailable: tuple[type[BaseException], ...] = (StageUnavailable, CompilerOptionError)  # the message says it all
    device_memory: tuple[int | None, str] = (None, "")  # bytes per device and where that comes from
    compiler_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def build(self, name: str) -> JaxStage:
        return JaxStage(
            build_stage(name, self.cfg, self.workload, self.mesh),
            self.seed,
            mesh=self.mesh,
            compiler_options=self.compiler_options,
        )

    def context(self) -> contextlib.AbstractContextManager[Any]:
        return jax.set_mesh(self.mesh)

    @property
    def config_resolved(self) -> dict[str, Any]:
        return config_dict(self.cfg)


def open_model(spec: WorkerSpec) -> ModelStages:
    mesh, machine = device_mesh(spec.target, spec.compile_only)
    cfg = build_config(spec.preset, spec.config_overrides)
    memory = (None, "") if spec.compile_only else targets.device_memory(jax.local_devices()[0], mesh.size)
    return ModelStages(
        cfg,
        model_workload(spec.workload),
        mesh,
        machine,
        spec.seed,
        device_memory=memory,
        compiler_options=dict(spec.target.compiler_options),
    )


# --------------------------------------------------------------------------- sharding facts


def _axes(entry: Any) -> tuple[str, ...]:
    return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def sharding_facts(program: StageProgram, mesh: Mesh | None) -> ShardingFacts | None:
    """The mesh, the strategy's activation rules and every parameter of the program (path, shape,
    logical axes from its metadata -- each named by the rule that places it, so a kernel's ``mlp_in``
    reads ``embed`` under a strategy that leaves ``mlp_in`` to its parent -- mesh axes from its
    sharding): what names a collective's rule."""
    if mesh is None:
        return None
    strategy = get_strategy(program.strategy)
    params = []
    is_param = lambda x: hasattr(x, "get_metadata")  # noqa: E731 - an nnx Variable (value + logical axes)
    leaves, _ = jax.tree_util.tree_flatten_with_path(program.abstract_args, is_leaf=is_param)
    for path, leaf in leaves:
        if not hasattr(leaf, "get_metadata") or not hasattr(leaf, "get_value"):
            continue  # an input, not a parameter: no logical axes to read
        value, logical = leaf.get_value(), leaf.get_metadata().get("logical_axes")
        spec = tuple(getattr(getattr(value, "sharding", None), "spec", ()))
        if logical is None or len(logical) != len(value.shape):
            continue
        axes = tuple(_axes(spec[i]) if i < len(spec) else () for i in range(len(value.shape)))
        name = jax.tree_util.keystr(path[1:], simple=True, separator=".")
        named = tuple(None if n is None else strategy.rule_name(n) for n in logical)
        params.append(ParamLayout(name, tuple(value.shape), named, axes))
    rules = {k: tuple(v) for k, v in strategy.rules.items() if k.startswith("activation_")}
    return ShardingFacts(
        program.strategy,
        tuple((str(a), int(n)) for a, n in mesh.shape.items()),
        tuple(params),
        rules,
        scopes.attributes(),
    )
