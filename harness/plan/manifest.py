"""Manifests: TOML -> validated, frozen dataclasses (``schema_version = 1``). No model import.

A manifest says what to run (target, model preset + config overrides, workload),
how to measure it (``[run]``), how to gate it (``[gate]``), how to report it (``[report]``) and
which variants to run (``[[variants]]`` and/or a ``[matrix]`` of named axes). This module checks
what the TOML alone can say (keys, types, ranges, the mesh against the device count);
:mod:`harness.expansion` expands the variants, resolves their references and asks the model about
the rest. Each problem is a :class:`ManifestError` naming the file, the dotted key path and, when
it can be found in the text, the line.

Override keys (``[model] overrides``, ``[[variants]] overrides``, ``[matrix]`` axes)
are dotted paths. ``model.preset``, ``target.<field>`` and ``workload.<field>``
change the manifest's own settings for one variant (only in variants and the
matrix); every other key is a field of the ``ltx2`` config, e.g.
``transformer.scan_layers`` or ``pipeline.num_inference_steps``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import targets
from harness.catalogue import split_tolerance_key
from harness.plan.overrides import (
    Matrix,
    Model,
    VariantSpec,
    parse_matrix,
    parse_model,
    parse_variants,
)
from harness.plan.reference import Reference, check_rungs, parse_reference
from harness.plan.search_space import SearchSpace, parse_search
from harness.plan.toml import (
    Invalid,
    KeyPath,
    NotUTF8,
    at_most,
    check_finite,
    check_keys,
    choice,
    decode,
    flatten,
    format_path,
    get,
    is_kind,
    locate,
    option_table,
    positive,
    str_list,
    type_name,
)

SCHEMA_VERSION = 1
PLATFORMS = ("cpu", "tpu", "gpu")
MODES = ("auto", "measure", "compile")
METRIC_FAMILIES = ("static", "measured", "trace", "accuracy")  # accuracy: the CPU probe of compile-only variants
# The largest workload sizes a manifest may ask for: far beyond any LTX-2 workload (experiments/ goes up
# to 768x512 px, 121 frames, 1024 text tokens, 40 steps), and small enough that every count derived
# from them (latent grid, tokens, buffer bytes) stays well inside 64-bit integers.
WORKLOAD_LIMITS: dict[str, float] = {
    "height": 16384,
    "width": 16384,
    "num_frames": 16384,
    "frame_rate": 1000.0,
    "batch": 1024,
    "steps": 10000,
    "text_tokens": 131072,
}


class ManifestError(ValueError):
    """A manifest problem: ``<file>:<line>: <key path>: <reason>``."""

    def __init__(self, file: str, key: str, line: int | None, reason: str):
        self.file, self.key, self.line, self.reason = file, key, line, reason
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {key}: {reason}" if key else f"{where}: {reason}")


# --------------------------------------------------------------------------- sections


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


class _Section:
    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (tuples become lists)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class Target(_Section):
    """Where variants run: platform, mesh (axis -> size, -1 = the rest), device count."""

    platform: str = "cpu"
    mode: str = "auto"  # auto: measure if the platform's devices are present, else compile only
    mesh: tuple[tuple[str, int], ...] = (("data", -1),)
    topology: str | None = None  # what to compile for without the hardware: "v6e:2x4", "tpu7x:2x2x1", "h100:1x1x8"
    devices: int | None = None  # device count; on cpu the number of simulated devices
    processes: int = 1  # JAX processes of one variant (jax.distributed); each has devices / processes
    # XLA / libtpu compile options (name -> value), sorted by name: given to every compile of the variant
    compiler_options: tuple[tuple[str, bool | int | float | str], ...] = ()
    spec: str | None = None  # a calibrated timeline spec file (python -m harness calibrate) predictions use

    @property
    def mesh_shape(self) -> dict[str, int]:
        """Axis -> size, with the -1 axis resolved when the device count is known."""
        if self.devices is None:
            return dict(self.mesh)
        fixed = math.prod(s for _, s in self.mesh if s != -1)
        return {a: (self.devices // fixed if s == -1 else s) for a, s in self.mesh}

    @functools.cached_property
    def hardware(self) -> targets.Slice | None:
        """The topology, parsed once: hardware name, chips per dimension, the generation's record."""
        return targets.check_topology(self.topology, self.platform) if self.topology else None

    def resolved(self) -> Target:
        """The same target with the mesh's -1 axis resolved (what a worker builds)."""
        return dataclasses.replace(self, mesh=tuple(self.mesh_shape.items()))

    def to_dict(self) -> dict[str, Any]:
        out = {**super().to_dict(), "mesh": dict(self.mesh), "compiler_options": dict(self.compiler_options)}
        if self.spec is None:
            del out["spec"]  # only when set: records of targets without one are unchanged
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Target:
        mesh, options = tuple(d["mesh"].items()), tuple(sorted((d.get("compiler_options") or {}).items()))
        return cls(**{**d, "mesh": mesh, "processes": int(d.get("processes", 1)), "compiler_options": options})


@dataclass(frozen=True)
class Workload(_Section):
    """What one run computes: video size, batch, denoising steps, which stages to time."""

    height: int = 512
    width: int = 768
    num_frames: int = 121
    frame_rate: float = 24.0
    batch: int = 1
    steps: int = 40
    text_tokens: int = 1024
    stages: tuple[str, ...] = ("denoise_step",)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Workload:
        return cls(**{**d, "stages": tuple(d["stages"])})


@dataclass(frozen=True)
class Run(_Section):
    repeats: int = 5
    warmup: int = 1
    timeout_s: float = 600.0
    trace: bool = False
    metrics: tuple[str, ...] = ("static", "measured")
    max_load: float | None = None  # cores other processes may keep busy when timing starts (None: no wait)
    max_load_wait_s: float = 300.0  # how long to wait for that before refusing to time

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Run:
        return cls(**{**d, "metrics": tuple(d["metrics"])})


@dataclass(frozen=True)
class Gate(_Section):
    """Regression thresholds: relative tolerance per metric path, timing ratio and test level."""

    tolerances: Mapping[str, float] = field(default_factory=dict)
    timing_ratio: float = 1.10
    alpha: float = 0.05
    baseline: str | None = None


@dataclass(frozen=True)
class Report(_Section):
    """How reports show the sweep: the default reference variant (see the module docstring)."""

    reference: str | None = None


@dataclass(frozen=True)
class Manifest:
    path: Path
    sha256: str
    target: Target
    model: Model
    workload: Workload
    run: Run
    gate: Gate
    variants: tuple[VariantSpec, ...] = ()
    report: Report = field(default_factory=Report)
    matrix: Matrix | None = None
    search: SearchSpace | None = None  # the layout space of `harness search` (harness/plan/search_space.py)
    reference: Reference | None = None  # published numbers to show beside ours (harness/plan/reference.py)
    schema_version: int = SCHEMA_VERSION
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    source: str = field(default="", repr=False, compare=False)
    origins: Mapping[KeyPath, KeyPath] = field(default_factory=dict, repr=False, compare=False)

    @property
    def name(self) -> str:
        return self.path.stem

    def error(self, path: KeyPath, reason: str) -> ManifestError:
        """A located error for a key path of this manifest (flattened override keys included)."""
        path = self.origins.get(path, path)
        return ManifestError(str(self.path), format_path(path), locate(self.source, path), reason)


# --------------------------------------------------------------------------- section parsers


def topology_devices(topology: str, platform: str) -> int:
    try:
        return targets.check_topology(topology, platform).devices
    except ValueError as e:
        raise Invalid(("topology",), str(e)) from None


def _mesh(raw: Any) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, dict):
        raise Invalid(("mesh",), f"expected a table of axis = size, got {type_name(raw)}")
    if not raw:
        raise Invalid(("mesh",), "needs at least one axis")
    rest = None
    for axis, size in raw.items():
        if not is_kind(size, "int") or (size < 1 and size != -1):
            raise Invalid(("mesh", axis), f"axis size must be a positive integer or -1, got {size!r}")
        if size == -1:
            if rest is not None:
                raise Invalid(("mesh", axis), f"at most one axis may be -1 (already {rest!r})")
            rest = axis
    return tuple(raw.items())


_SPEC_CONSTANTS = ("peak_flops_per_s", "hbm_bytes_per_s", "op_overhead_s")


def _spec_file(path: str) -> str:
    """A calibrated spec file (``python -m harness calibrate --out``), checked readable and shaped
    like one; the path as given (relative paths are from where the harness runs)."""
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as e:
        raise Invalid(("spec",), f"cannot read spec file {path!r}: {e.strerror}") from None
    except ValueError as e:
        raise Invalid(("spec",), f"spec file {path!r} is not JSON: {e}") from None
    constants = ((raw.get("spec") if isinstance(raw, dict) else None) or {}).get("constants")
    missing = [k for k in _SPEC_CONSTANTS if not isinstance(constants, dict) or k not in constants]
    if missing:
        raise Invalid(
            ("spec",),
            f"{path!r} is not a calibrated spec file (no spec.constants {', '.join(missing)}); write one with "
            "python -m harness calibrate",
        )
    return path


def parse_target(raw: Mapping[str, Any]) -> Target:
    check_keys(raw, ("platform", "mode", "mesh", "topology", "devices", "processes", "compiler_options", "spec"))
    platform = choice(get(raw, "platform", "str", "cpu"), "platform", PLATFORMS, "platform")
    mode = choice(get(raw, "mode", "str", "auto"), "mode", MODES, "mode")
    mesh = _mesh(raw.get("mesh", {"data": -1}))
    topology = get(raw, "topology", "str", None)
    devices = get(raw, "devices", "int", None)
    if devices is not None:
        positive(devices, "devices")
    if topology is None and platform != "cpu":
        known = ", ".join(targets.known_topologies(platform))
        raise Invalid(
            ("topology",),
            f"a {platform} target needs a topology, e.g. topology = "
            f"{targets.TOPOLOGY_EXAMPLES[platform]!r} (known: {known}): what to compile for, and on the "
            "hardware what to expect",
        )
    if topology is not None:
        if platform == "cpu":
            raise Invalid(("topology",), "a topology names TPU or GPU hardware; platform is 'cpu'")
        n = topology_devices(topology, platform)
        if devices is not None and devices != n:
            raise Invalid(("devices",), f"topology {topology!r} has {n} devices, devices = {devices}")
        devices = n
    fixed = math.prod(s for _, s in mesh if s != -1)
    has_rest = any(s == -1 for _, s in mesh)
    if platform == "cpu" and devices is None:
        devices = 1 if has_rest else fixed
    if devices is not None:
        shape = ", ".join(f"{a}={s}" for a, s in mesh)
        if has_rest and devices % fixed:
            raise Invalid(("mesh",), f"mesh {{{shape}}} needs a multiple of {fixed} devices, target has {devices}")
        if not has_rest and fixed != devices:
            raise Invalid(("mesh",), f"mesh {{{shape}}} spans {fixed} devices, target has {devices}")
    processes = positive(get(raw, "processes", "int", 1), "processes")
    if processes > 1 and (devices is None or devices % processes):
        raise Invalid(
            ("processes",),
            f"{processes} processes must split the target's devices evenly "
            f"(devices = {devices}): each process gets devices / processes",
        )
    # whether the compiler knows an option is the compiler's to say: an unknown one fails the compile, naming it
    options = option_table(raw.get("compiler_options", {}), "compiler_options")
    spec = get(raw, "spec", "str", None)
    return Target(
        platform, mode, mesh, topology, devices, processes, options, None if spec is None else _spec_file(spec)
    )


def parse_workload(raw: Mapping[str, Any]) -> Workload:
    """Sizes and stage names as written; which stages exist is the model's to say (variants)."""
    d = Workload()
    check_keys(raw, tuple(d.to_dict()))
    sizes = {
        k: positive(get(raw, k, "float" if k == "frame_rate" else "int", getattr(d, k)), k)
        for k in ("height", "width", "num_frames", "frame_rate", "batch", "steps", "text_tokens")
    }
    for key, value in sizes.items():
        at_most(value, key, WORKLOAD_LIMITS[key], "larger workloads overflow token counts and buffer sizes")
    stages = str_list(raw, "stages", None, d.stages)
    if not stages:
        raise Invalid(("stages",), "needs at least one stage")
    return Workload(**sizes, stages=stages)


def parse_run(raw: Mapping[str, Any]) -> Run:
    d = Run()
    check_keys(raw, tuple(d.to_dict()))
    return Run(
        repeats=positive(get(raw, "repeats", "int", d.repeats), "repeats"),
        warmup=positive(get(raw, "warmup", "int", d.warmup), "warmup", zero_ok=True),
        timeout_s=positive(get(raw, "timeout_s", "float", d.timeout_s), "timeout_s"),
        trace=get(raw, "trace", "bool", d.trace),
        metrics=str_list(raw, "metrics", METRIC_FAMILIES, d.metrics),
        max_load=_max_load(raw),
        max_load_wait_s=positive(
            get(raw, "max_load_wait_s", "float", d.max_load_wait_s), "max_load_wait_s", zero_ok=True
        ),
    )


def _max_load(raw: Mapping[str, Any]) -> float | None:
    value = get(raw, "max_load", "float", None)
    if value is not None:
        check_finite(value, ("max_load",))
        positive(value, "max_load")
    if value is not None and "measured" not in str_list(raw, "metrics", METRIC_FAMILIES, Run().metrics):
        raise Invalid(("max_load",), "waits for a quiet machine before timing: needs 'measured' in run.metrics")
    return value


def parse_gate(raw: Mapping[str, Any]) -> Gate:
    d = Gate()
    check_keys(raw, tuple(d.to_dict()))
    tolerances = get(raw, "tolerances", "table", {})
    for metric, tol in flatten(tolerances).items():
        if not is_kind(tol, "float") or tol < 0:
            raise Invalid(("tolerances", metric), f"tolerance must be a number >= 0, got {tol!r}")
        try:
            split_tolerance_key(metric)  # a stage prefix is the model's to check (variants)
        except ValueError as e:
            raise Invalid(("tolerances", metric), str(e)) from None
    ratio = get(raw, "timing_ratio", "float", d.timing_ratio)
    if ratio < 1.0:
        raise Invalid(("timing_ratio",), f"must be >= 1.0 (slowdown factor), got {ratio!r}")
    alpha = get(raw, "alpha", "float", d.alpha)
    if not 0.0 < alpha < 1.0:
        raise Invalid(("alpha",), f"must be in (0, 1), got {alpha!r}")
    tolerances = {k: float(v) for k, v in flatten(tolerances).items()}
    return Gate(tolerances, ratio, alpha, get(raw, "baseline", "str", None))


# --------------------------------------------------------------------------- loading

_TOP_KEYS = (
    "schema_version",
    "target",
    "model",
    "workload",
    "run",
    "gate",
    "report",
    "variants",
    "matrix",
    "search",
    "reference",
)


def parse_report(raw: Mapping[str, Any]) -> Report:
    check_keys(raw, ("reference",))
    return Report(get(raw, "reference", "str", None))


def load_manifest(path: str | Path) -> Manifest:
    """Read and validate a manifest's TOML; any problem raises :class:`ManifestError`."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ManifestError(str(path), "", None, f"cannot read: {e.strerror}") from None
    try:
        text = decode(data)
    except NotUTF8 as e:
        raise ManifestError(str(path), "", e.line, str(e)) from None
    return parse_manifest(text, path, sha256=hashlib.sha256(data).hexdigest())


def parse_manifest(text: str, path: str | Path = "<manifest>", sha256: str | None = None) -> Manifest:
    """A manifest from its text; ``sha256`` of the file's bytes (default: of the text as UTF-8)."""
    path = Path(path)
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ManifestError(str(path), "", int(m.group(1)) if m else None, f"invalid TOML: {e}") from None
    origins: dict[KeyPath, KeyPath] = {}
    stub = Manifest(path, "", Target(), Model(""), Workload(), Run(), Gate(), source=text, origins=origins)
    try:
        check_finite(raw)
        return _build(raw, path, text, sha256 or hashlib.sha256(text.encode()).hexdigest(), origins)
    except Invalid as e:
        raise stub.error(e.path, e.reason) from None


def _section(raw: Mapping[str, Any], name: str, parser: Any) -> Any:
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise Invalid((name,), f"expected a table, got {type_name(value)}")
    try:
        return parser(value)
    except Invalid as e:
        raise Invalid((name,) + e.path, e.reason) from None


def _build(raw: dict[str, Any], path: Path, text: str, sha256: str, origins: dict[KeyPath, KeyPath]) -> Manifest:
    check_keys(raw, _TOP_KEYS)
    version = get(raw, "schema_version", "int")
    if version != SCHEMA_VERSION:
        raise Invalid(
            ("schema_version",), f"unsupported schema version {version} (this harness reads {SCHEMA_VERSION})"
        )
    if "model" not in raw:
        raise Invalid(("model",), "missing required section")
    manifest = Manifest(  # keyword arguments evaluate in order: errors come in file-section order
        path=path,
        sha256=sha256,
        target=_section(raw, "target", parse_target),
        model=_section(raw, "model", lambda r: parse_model(r, origins)),
        workload=_section(raw, "workload", parse_workload),
        run=_section(raw, "run", parse_run),
        gate=_section(raw, "gate", parse_gate),
        report=_section(raw, "report", parse_report),
        variants=parse_variants(raw["variants"], origins) if "variants" in raw else (),
        matrix=parse_matrix(raw["matrix"], origins) if "matrix" in raw else None,
        search=_section(raw, "search", parse_search) if "search" in raw else None,
        reference=_section(raw, "reference", parse_reference) if "reference" in raw else None,
        raw=raw,
        source=text,
        origins=origins,
    )
    if manifest.reference is not None:
        try:
            check_rungs(manifest.reference, tuple(v.name for v in manifest.variants))
        except Invalid as e:
            raise Invalid(("reference",) + e.path, e.reason) from None
    return manifest
