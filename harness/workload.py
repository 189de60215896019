"""The narrow surface between the harness and the model.

Given a preset, config overrides, a workload and a mesh, build one :class:`Stage`
per pipeline stage. A stage knows how to compile itself ahead of time (static
metrics), to make its inputs, and to run once (blocking). The worker times it.

``ltx2`` is imported lazily (inside functions), so manifests validate and sweeps
plan without importing JAX in the parent process.

Test-only workloads: presets named ``test:<behaviour>`` build :class:`TestStage`
objects that never import JAX. They exist so the harness's own tests can check
crash isolation in a fraction of a second per subprocess; they are not listed in
error messages and never appear in ``experiments/``. See :data:`TEST_PRESETS`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# Model presets, by the name of their constructor in ltx2.config.
PRESETS: tuple[str, ...] = ("tiny", "small", "ltx2_19b", "ltx2_3_22b")

# Test-only presets -> what their single stage does when run.
TEST_PRESETS: dict[str, str] = {
    "test:ok": "sleeps test.run_s (default 1 ms) per call",
    "test:raise": "raises RuntimeError when run (a Python error inside a stage)",
    "test:kill": "kills its own process with SIGKILL when run (a crash, as the OOM killer does)",
    "test:sleep": "sleeps test.sleep_s (default 1 h) per call (a hang, for timeouts)",
}


class StageUnavailable(NotImplementedError):
    """A stage the current model code cannot build yet."""


def preset_names() -> list[str]:
    return list(PRESETS)


def is_test_preset(preset: str) -> bool:
    return preset in TEST_PRESETS


def check_preset(preset: str) -> str:
    if preset not in PRESETS and preset not in TEST_PRESETS:
        raise ValueError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
    return preset


# --------------------------------------------------------------------------- config


def base_config(preset: str) -> dict[str, Any]:
    """The preset's component configs by override prefix (``transformer``, ``video_vae``, ``pipeline``...):
    the fields of :class:`ltx2.pipeline_config.PipelineConfig`."""
    from ltx2.pipeline_config import PipelineConfig

    cfg = PipelineConfig.preset(preset)
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def _coerce(current: Any, value: Any, key: str) -> Any:
    """A TOML value converted to the type of the field it replaces."""
    if isinstance(current, bool) or isinstance(value, bool):
        if not (isinstance(current, bool) and isinstance(value, bool)):
            raise TypeError(f"expected {type(current).__name__}, got {type(value).__name__} ({value!r})")
        return value
    if isinstance(current, int | float) and isinstance(value, int | float):
        if isinstance(current, int) and not isinstance(value, int):
            raise TypeError(f"expected int, got {type(value).__name__} ({value!r})")
        return type(current)(value)
    if isinstance(current, tuple) and isinstance(value, list):
        return tuple(value)
    if current is None or isinstance(value, type(current)):
        return value
    if isinstance(value, str) and not isinstance(current, str | int | float | tuple | list):
        return value  # dtype-like fields accept their name; the config validates it
    raise TypeError(f"expected {type(current).__name__}, got {type(value).__name__} ({value!r})")


def _replace_path(obj: Any, parts: list[str], value: Any, key: str) -> Any:
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise KeyError(f"unknown config key {key!r}: {type(obj).__name__} has no fields")
    names = [f.name for f in dataclasses.fields(obj)]
    name = parts[0]
    if name not in names:
        raise KeyError(f"unknown config key {key!r}: {type(obj).__name__} has no field {name!r}")
    current = getattr(obj, name)
    new = _coerce(current, value, key) if len(parts) == 1 else _replace_path(current, parts[1:], value, key)
    return dataclasses.replace(obj, **{name: new})


def _check_strategy(key: str, value: Any) -> None:
    if key.rsplit(".", 1)[-1] == "sharding":
        from ltx2.sharding import strategy_names

        if value not in strategy_names():
            raise ValueError(f"unknown sharding strategy {value!r} (known: {', '.join(strategy_names())})")


def apply_overrides(config: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Component configs with dotted overrides applied (each replace re-validates the config)."""
    config = dict(config)
    for key, value in overrides.items():
        component, *rest = key.split(".")
        if component not in config or not rest:
            raise KeyError(f"unknown config key {key!r} (components: {', '.join(config)})")
        _check_strategy(key, value)
        config[component] = _replace_path(config[component], rest, value, key)
    return config


def check_override(preset: str, key: str, value: Any) -> Any:
    """Validate one config override against the preset; returns the value normalised."""
    if is_test_preset(preset):
        if not key.startswith("test."):
            raise KeyError(f"test presets take only test.* keys, got {key!r}")
        return value
    config = apply_overrides(base_config(preset), {key: value})
    component, *rest = key.split(".")
    obj = config[component]
    for part in rest:
        obj = getattr(obj, part)
    return list(obj) if isinstance(obj, tuple) else obj


def build_config(preset: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Component configs with overrides applied, checked together (linked fields such as latent
    channels must still agree across components)."""
    from ltx2.pipeline_config import PipelineConfig

    config = apply_overrides(base_config(preset), overrides)
    PipelineConfig(**config)
    return config


def check_mesh_axes(preset: str, axes: Sequence[str]) -> None:
    """Mesh axis names must be ones the sharding strategies are written against."""
    if is_test_preset(preset):
        return
    from ltx2.sharding import MESH_AXES

    unknown = [a for a in axes if a not in MESH_AXES]
    if unknown:
        raise ValueError(f"unknown mesh axes {unknown} (known: {', '.join(MESH_AXES)})")


# Stages whose sequence-sharded inputs must divide their mesh axes.
TRANSFORMER_STAGES = ("denoise_step", "denoise_loop")


def check_workload(
    preset: str, overrides: Mapping[str, Any], wl: Mapping[str, Any], mesh: Mapping[str, int]
) -> None:
    """The workload must fit the latent grid, and its sharded dims must divide their mesh axes."""
    if is_test_preset(preset) or not set(wl.get("stages", TRANSFORMER_STAGES)) & set(TRANSFORMER_STAGES):
        return  # decoders and the text encoder place inputs by shape (indivisible dims stay whole)
    from ltx2.sharding import get_strategy

    cfg = build_config(preset, overrides)["transformer"]
    tokens = token_counts(cfg, wl)
    strategy = get_strategy(cfg.sharding)
    dims = (("batch", wl["batch"], "activation_batch"), ("video tokens", tokens["video_tokens"], "activation_length"),
            ("audio tokens", tokens["audio_tokens"], "activation_length"),
            ("text tokens", tokens["text_tokens"], "activation_text_length"))  # fmt: skip
    for what, size, logical in dims:
        axes = [a for a in strategy.mesh_axes(logical) if mesh.get(a, 1) > 1]
        shards = math.prod(mesh[a] for a in axes)
        if size % shards:
            raise ValueError(f"{what} ({size}) do not divide into {shards} shards ({logical} over "
                             f"{' x '.join(axes)} under strategy {strategy.name!r})")


def config_dict(config: Mapping[str, Any]) -> dict[str, Any]:
    """JSON-friendly resolved config for the record (dtypes and other objects as strings)."""

    def plain(v: Any) -> Any:
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        return v if isinstance(v, bool | int | float | str) or v is None else str(v)

    return {name: plain(c) for name, c in config.items()}


# --------------------------------------------------------------------------- stages


class Stage(Protocol):
    """One pipeline stage, ready to compile and run."""

    name: str
    uses_jax: bool
    notes: list[str]

    def static(self) -> dict[str, Any]:
        """Compile ahead of time (abstract inputs) and return the static metrics."""
        ...

    def prepare(self) -> None:
        """Make concrete inputs (random weights and data) on the devices."""
        ...

    def run(self) -> Any:
        """One call of the stage, blocked until the result is ready."""
        ...


@dataclass
class BuildContext:
    """Everything a stage builder gets."""

    preset: str
    overrides: Mapping[str, Any]
    workload: Mapping[str, Any]  # manifest.Workload.to_dict()
    mesh: Any = None  # jax.sharding.Mesh (None for test presets)
    compile_only: bool = False
    seed: int = 0


def build_stage(stage: str, ctx: BuildContext) -> Stage:
    """The stage's runnable form; stages the model cannot build yet raise :class:`StageUnavailable`."""
    if is_test_preset(ctx.preset):
        return TestStage(stage, TEST_BEHAVIOUR[ctx.preset], dict(ctx.overrides))
    from harness.pipeline_stages import BUILDERS

    builder = {**BUILDERS, **_BUILDERS}.get(stage)
    if builder is None:
        raise StageUnavailable(f"no stage named {stage!r}")
    return builder(ctx)


def token_counts(cfg: Any, wl: Mapping[str, Any]) -> dict[str, int]:
    """Latent grid and token counts of a workload under a transformer config.

    Video: ``F = (frames - 1) / t + 1``, ``H = height / h``, ``W = width / w`` with the VAE
    scale factors ``(t, h, w)``, then patchified. Audio (diffusers ``LTX2Pipeline``):
    ``round(frames / frame_rate * sampling_rate / hop_length / audio_scale_factor)`` latent frames.
    """
    st, sh, sw = cfg.vae_scale_factors
    frames, height, width = wl["num_frames"], wl["height"], wl["width"]
    if (frames - 1) % st or height % (sh * cfg.patch_size) or width % (sw * cfg.patch_size):
        raise ValueError(f"workload {width}x{height}x{frames} does not fit the latent grid: width and "
                         f"height must be multiples of {sw * cfg.patch_size}, frames of the form "
                         f"{st}k + 1")
    f, h, w = (frames - 1) // st + 1, height // sh, width // sw
    if f % cfg.patch_size_t:
        raise ValueError(f"{f} latent frames are not a multiple of patch_size_t={cfg.patch_size_t}")
    audio_frames = round(frames / wl["frame_rate"] * cfg.audio_sampling_rate / cfg.audio_hop_length
                         / cfg.audio_scale_factor)
    audio_frames = max(audio_frames // cfg.audio_patch_size_t, 1) * cfg.audio_patch_size_t
    return {
        "latent_frames": f, "latent_height": h, "latent_width": w,
        "video_tokens": (f // cfg.patch_size_t) * (h // cfg.patch_size) * (w // cfg.patch_size),
        "audio_frames": audio_frames, "audio_tokens": audio_frames // cfg.audio_patch_size_t,
        "text_tokens": wl["text_tokens"],
    }  # fmt: skip


@dataclass
class JaxStage:
    """A jitted function with abstract (sharded ShapeDtypeStruct) and concrete arguments."""

    name: str
    fn: Any  # jax.jit-wrapped
    abstract_args: tuple[Any, ...]
    make_args: Callable[[], tuple[Any, ...]]
    analytic_flops: float | None = None
    calls_per_video: int = 1  # how often one video runs this program (denoising steps for a step)
    extra: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    uses_jax: bool = True
    args: tuple[Any, ...] | None = None

    hlo_text: str | None = None

    def static(self) -> dict[str, Any]:
        import dataclasses as dc

        from harness.metrics.hlo import matmul_flops, memory_traffic_bytes
        from harness.metrics.static import analyze_compiled, lower_and_compile

        compiled, timing = lower_and_compile(self.fn, *self.abstract_args)
        self.hlo_text = compiled.as_text() or ""
        out = dc.replace(analyze_compiled(compiled), timing=timing).to_dict()
        return {**out, "analytic_flops": self.analytic_flops, "matmul_flops": matmul_flops(self.hlo_text),
                "memory_traffic_bytes": memory_traffic_bytes(self.hlo_text), **self.extra}

    def trace_filter(self) -> tuple[set[str] | None, dict[str, str] | None]:
        """HLO module name and collective instruction kinds, to read this stage's ops from a trace."""
        from harness.metrics.hlo import collective_instructions

        if self.hlo_text is None:
            self.hlo_text = self.fn.lower(*self.abstract_args).compile().as_text() or ""
        first = self.hlo_text.split("\n", 1)[0].split()
        module = first[1].rstrip(",") if len(first) > 1 and first[0] == "HloModule" else None
        return ({module} if module else None), collective_instructions(self.hlo_text)

    def prepare(self) -> None:
        import jax

        self.args = jax.block_until_ready(self.make_args())

    def run(self) -> Any:
        import jax

        if self.args is None:
            raise RuntimeError(f"stage {self.name}: run() before prepare()")
        return jax.block_until_ready(self.fn(*self.args))


HOST_INIT_BYTES = 64 * 2**20
INIT_STD = 0.02


@functools.cache
def _device_normal(shape: tuple[int, ...], dtype: Any, sharding: Any) -> Callable[[Any], Any]:
    import jax

    return jax.jit(lambda key: (jax.random.normal(key, shape) * INIT_STD).astype(dtype), out_shardings=sharding)


def random_state(abstract: Any, seed: int) -> Any:
    """Random N(0, 0.02) arrays shaped and sharded like a tree of ``ShapeDtypeStruct``s.

    Speed does not depend on weight values, so this stands in for the modules' own
    initialisers, which compile hundreds of tiny programs (tens of seconds on CPU). Small
    leaves come from NumPy on the host; large ones are generated in place, already sharded,
    so a full-size model never has to fit in one device or the host.
    """
    import jax
    import numpy as np

    rng = np.random.default_rng(seed)
    keys = iter(jax.random.split(jax.random.key(seed), len(jax.tree.leaves(abstract))))

    def leaf(a: Any) -> Any:
        key = next(keys)
        if a.size * a.dtype.itemsize <= HOST_INIT_BYTES:
            host = (rng.standard_normal(a.shape, dtype=np.float32) * INIT_STD).astype(a.dtype)
            return jax.device_put(host, a.sharding)
        return _device_normal(tuple(a.shape), a.dtype, a.sharding)(key)

    return jax.tree.map(leaf, abstract)


def abstract_state(make: Callable[[], Any], strategy: str, mesh: Any) -> tuple[Any, Any]:
    """(graphdef, state of sharded ``ShapeDtypeStruct``s) of an NNX module: nothing is allocated."""
    import jax
    from flax import nnx

    from ltx2.sharding import param_shardings

    graphdef, state = nnx.split(nnx.eval_shape(make))
    shardings = param_shardings(state, strategy, mesh)

    def sds(sharding: Any, var: Any) -> Any:  # the shardings tree is a prefix of the state tree
        return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), var)

    return graphdef, jax.tree.map(sds, shardings, state)


def _denoise_inputs(cfg: Any, tokens: Mapping[str, int], batch: int) -> list[tuple[tuple[int, ...], Any, tuple]]:
    """(shape, dtype, logical axes) of the step's inputs after the weights."""
    import jax.numpy as jnp

    B, L, A, S = batch, tokens["video_tokens"], tokens["audio_tokens"], tokens["text_tokens"]
    dt, f32 = jnp.dtype(cfg.dtype), jnp.float32
    text_c, audio_text_c = ((cfg.caption_channels, cfg.caption_channels) if cfg.use_prompt_embeddings
                            else (cfg.inner_dim, cfg.audio_inner_dim))  # fmt: skip
    seq = ("activation_batch", "activation_length", None)
    text = ("activation_batch", "activation_text_length", None)
    rows = ("activation_batch",)
    return [
        ((B, L, cfg.in_channels), dt, seq), ((B, A, cfg.audio_in_channels), dt, seq),  # latents
        ((B, S, text_c), dt, text), ((B, S, audio_text_c), dt, text),  # prompt embeddings
        ((B, S), f32, ("activation_batch", None)),  # text keep-mask
        ((B,), f32, rows), ((B,), f32, rows), ((), f32, ()),  # timestep, sigma, sigma step
    ]  # fmt: skip


def _build_denoise_step(ctx: BuildContext) -> Stage:
    """One transformer forward and an Euler update of both latents (no guidance yet).

    Inputs follow ``LTX2Pipeline``'s call of the transformer: patchified video ``[B, L, C]`` and
    audio ``[B, A, Ca]`` latents, text embeddings ``[B, S, caption_channels]`` (LTX-2.3:
    ``[B, S, D]`` / ``[B, S, Da]``), keep-masks ``[B, S]``, timestep and sigma ``[B]``. ``B`` is
    the workload batch: the transformer's batch rows (CFG doubles them in the pipeline).
    """
    import jax
    import numpy as np
    from flax import nnx

    from ltx2.sharding import input_sharding
    from ltx2.transformer import LTX2Transformer

    cfg = build_config(ctx.preset, ctx.overrides)["transformer"]
    wl, tokens = ctx.workload, token_counts(cfg, ctx.workload)
    inputs = _denoise_inputs(cfg, tokens, wl["batch"])
    shardings = [input_sharding(names, cfg.sharding, ctx.mesh) for _, _, names in inputs]
    graphdef, state = abstract_state(lambda: LTX2Transformer(cfg, rngs=nnx.Rngs(ctx.seed)), cfg.sharding, ctx.mesh)
    grid = dict(num_frames=tokens["latent_frames"], height=tokens["latent_height"], width=tokens["latent_width"],
                fps=float(wl["frame_rate"]), audio_num_frames=tokens["audio_frames"])  # fmt: skip

    def step(state, x, a, text, audio_text, mask, timestep, sigma, dsigma):  # type: ignore[no-untyped-def]
        v, va = nnx.merge(graphdef, state)(x, a, text, audio_text, timestep, sigma=sigma, encoder_attention_mask=mask,
                                           audio_encoder_attention_mask=mask, **grid)  # fmt: skip
        return x + dsigma * v.astype(x.dtype), a + dsigma * va.astype(a.dtype)

    def make_args() -> tuple[Any, ...]:
        rng = np.random.default_rng(ctx.seed + 1)
        host = [rng.standard_normal(shape, np.float32).astype(d) for shape, d, _ in inputs[:4]]
        host += [np.ones(inputs[4][0], np.float32), np.full(inputs[5][0], 900.0, np.float32),
                 np.full(inputs[6][0], 0.9, np.float32), np.asarray(-0.1, np.float32)]  # fmt: skip
        return (random_state(state, ctx.seed), *map(jax.device_put, host, shardings))

    abstract_inputs = [jax.ShapeDtypeStruct(shape, d, sharding=s)
                       for (shape, d, _), s in zip(inputs, shardings, strict=True)]
    B, L, A, S = wl["batch"], tokens["video_tokens"], tokens["audio_tokens"], tokens["text_tokens"]
    return JaxStage(
        "denoise_step", jax.jit(step), (state, *abstract_inputs), make_args,
        analytic_flops=float(cfg.forward_flops(L, A, S, B)), calls_per_video=wl["steps"], extra={"tokens": tokens},
        notes=["denoise_step = one transformer forward + Euler update; guidance passes are in the batch"],
    )  # fmt: skip


_BUILDERS: dict[str, Callable[[BuildContext], Stage]] = {"denoise_step": _build_denoise_step}


# --------------------------------------------------------------------------- test workloads


def _test_ok(overrides: Mapping[str, Any]) -> None:
    time.sleep(float(overrides.get("test.run_s", 0.001)))


def _test_raise(overrides: Mapping[str, Any]) -> None:
    raise RuntimeError("test workload raised on purpose")


def _test_kill(overrides: Mapping[str, Any]) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _test_sleep(overrides: Mapping[str, Any]) -> None:
    time.sleep(float(overrides.get("test.sleep_s", 3600.0)))


TEST_BEHAVIOUR: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "test:ok": _test_ok,
    "test:raise": _test_raise,
    "test:kill": _test_kill,
    "test:sleep": _test_sleep,
}


@dataclass
class TestStage:
    """A JAX-free stage whose run() does what its test preset says (tests only)."""

    __test__ = False  # not a pytest class

    name: str
    behaviour: Callable[[Mapping[str, Any]], None]
    overrides: dict[str, Any]
    uses_jax: bool = False
    notes: list[str] = field(default_factory=lambda: ["test workload: no model, no JAX"])

    def static(self) -> dict[str, Any]:
        return {"platform": "test", "flops": float(self.overrides.get("test.flops", 1.0))}

    def prepare(self) -> None:
        pass

    def run(self) -> None:
        self.behaviour(self.overrides)
