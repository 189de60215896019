"""Every key a manifest may hold, described once: what it means, its type, an example, and what it sets.

The parsers (:mod:`harness.plan.manifest`, :mod:`~harness.plan.overrides`,
:mod:`~harness.plan.search_space`, :mod:`~harness.plan.reference`) decide what is accepted; this
table says what it means. The manifest reference of the documentation is generated from it
(:mod:`harness.docgen.manifest`), defaults read from the section dataclasses, and
``tests/harness/docgen/test_manifest_keys.py`` fails when a parser accepts a key this table does not
describe, or an example here does not parse. Data only: no model import.

A key path is dotted from the top of the file; ``variants[]`` is each ``[[variants]]`` table,
``<name>`` a name the user chooses (a matrix axis, a rung).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.plan.manifest import MODES, PLATFORMS, SCHEMA_VERSION
from harness.plan.reference import METRICS as REFERENCE_METRICS

HARNESS = "harness"  # a setting of the harness itself, not of the model


@dataclass(frozen=True)
class Key:
    """One manifest key: its TOML type, meaning, a TOML example, and the knob it sets.

    ``sets``: ``harness`` for the harness's own settings, else the ``ltx2`` name it reaches
    (``ltx2.Workload.height``, ``ltx2.PipelineConfig`` for config overrides). ``allowed``: the
    values the parser accepts, where they are a fixed list. ``default``: only where no section
    dataclass holds it (``None``: read the dataclass; ``"required"``: the key must be given)."""

    type: str
    doc: str
    example: str
    sets: str = HARNESS
    allowed: tuple[str, ...] = ()
    default: str | None = None


def _workload(name: str, type_: str, doc: str, value: str) -> Key:
    return Key(type_, doc, f"[workload]\n{name} = {value}", f"ltx2.Workload.{name}")


_REQ = "required"
SECTIONS: dict[str, str] = {
    "": "the top level",
    "target": "[target]: where the variants run",
    "model": "[model]: the preset and its config overrides",
    "workload": "[workload]: what one run computes",
    "run": "[run]: how each variant is measured",
    "gate": "[gate]: how `harness gate` judges a run against its baseline",
    "report": "[report]: how reports compare variants",
    "variants[]": "[[variants]]: the variants, one table each",
    "matrix": "[matrix]: a product of named axes",
    "search": "[search]: the layout space of `harness search`",
    "reference": "[reference]: published numbers shown beside ours",
    "reference.rungs.<name>": "[reference.rungs.<variant>]: one rung's published numbers",
}

KEYS: dict[str, Key] = {
    "schema_version": Key("int", "The manifest format; this harness reads this one only.", "", default=_REQ),
    "target": Key("table", "Where the variants run (the keys below).", "[target]\nplatform = 'cpu'"),
    "model": Key("table", "The model preset and its config overrides.", "", default=_REQ),
    "workload": Key("table", "Video size, batch, steps, and which stages to time.", "[workload]\nsteps = 2"),
    "run": Key("table", "Repeats, warm-up, time-out, tracing, metric families.", "[run]\nrepeats = 3"),
    "gate": Key("table", "Regression thresholds for `harness gate`.", "[gate]\ntiming_ratio = 1.5"),
    "report": Key("table", "How reports show the sweep.", "[report]\nreference = 'naive'"),
    "variants": Key(
        "array of tables",
        "The variants. Without it (and without [matrix]) the manifest's own settings run as one variant named `base`.",
        "[[variants]]\nname = 'naive'",
        default="one variant, base",
    ),
    "matrix": Key("table", "Named axes whose product (less `exclude`) becomes variants.", "[matrix]\n'a.b' = [1, 2]"),
    "search": Key("table", "The layout space `python -m harness search` explores.", "", default="none"),
    "reference": Key("table", "Published numbers to show beside ours, per rung.", "", default="none"),
    # --------------------------------------------------------------- [target]
    "target.platform": Key(
        "string", "The device platform.", "[target]\nplatform = 'tpu'\ntopology = 'v6e:2x4'", allowed=PLATFORMS
    ),
    "target.mode": Key(
        "string",
        "`measure` times on the devices; `compile` only compiles for them (static and predicted metrics, "
        "no hardware needed); `auto` measures where the platform's devices are present, else compiles.",
        "[target]\nmode = 'compile'",
        allowed=MODES,
    ),
    "target.mesh": Key(
        "table of axis = int",
        "The device mesh: axis name -> size; one axis may be -1 (the rest of the devices). Axis names are "
        "ltx2's mesh axes (data, fsdp, context, tensor, ...).",
        "[target]\nmesh = { fsdp = 2, context = 2, tensor = 2 }",
        "ltx2.build_mesh",
    ),
    "target.topology": Key(
        "string",
        "What to compile for without the hardware, and on it what to expect: `<generation>:<chips per dim>` "
        "(`v6e:2x4`, `tpu7x:2x2x1`, `h100:1x1x8`). Required for tpu and gpu; refused for cpu.",
        "[target]\nplatform = 'tpu'\ntopology = 'v6e:2x4'",
    ),
    "target.devices": Key(
        "int",
        "The device count; on cpu the number of simulated devices. With a topology it must equal the "
        "topology's count (and is derived from it when left out).",
        "[target]\ndevices = 8\nmesh = { data = -1 }",
        default="from the topology or the mesh",
    ),
    "target.processes": Key(
        "int",
        "JAX processes per variant (jax.distributed); each holds devices / processes devices.",
        "[target]\ndevices = 8\nprocesses = 2",
    ),
    "target.compiler_options": Key(
        "table of name = bool/int/float/string",
        "XLA / libtpu options given to every compile of the variant (and to a measured run's backend "
        "flags). Part of the variant id and the compile-cache key; an option the compiler does not know "
        "fails the stage naming it.",
        "[target.compiler_options]\nxla_tpu_enable_async_collective_fusion = true",
    ),
    "target.spec": Key(
        "string (path)",
        "A calibrated timeline spec file (`python -m harness calibrate --out`) that predictions use and "
        "cite instead of the built-in constants.",
        "",
        default="none: the built-in spec",
    ),
    # --------------------------------------------------------------- [model]
    "model.preset": Key(
        "string",
        "The ltx2 preset: `tiny` (tests), `small` (CPU benchmarks), `medium`, `ltx2_19b` (LTX-2.0 sizes), "
        "`ltx2_3_22b` (LTX-2.3).",
        "[model]\npreset = 'small'",
        "ltx2.PRESETS",
        default=_REQ,
    ),
    "model.overrides": Key(
        "table of dotted key = value",
        "Config overrides for every variant: `<component>.<field>` of ltx2.PipelineConfig (see the config "
        "override reference) or `sharding.rules.<logical axis>`.",
        "[model]\npreset = 'small'\noverrides = { 'transformer.scan_layers' = false }",
        "ltx2.PipelineConfig",
        default="{}",
    ),
    # --------------------------------------------------------------- [workload]
    "workload.height": _workload("height", "int", "Video height in pixels.", "256"),
    "workload.width": _workload("width", "int", "Video width in pixels.", "384"),
    "workload.num_frames": _workload("num_frames", "int", "Video frames.", "25"),
    "workload.frame_rate": _workload("frame_rate", "float", "Frames per second (sets the audio length).", "24.0"),
    "workload.batch": _workload("batch", "int", "Videos per run.", "1"),
    "workload.steps": _workload("steps", "int", "Denoising steps of the loop stages.", "2"),
    "workload.text_tokens": _workload("text_tokens", "int", "Prompt length in tokens.", "128"),
    "workload.stages": Key(
        "array of strings",
        "The stages each variant compiles and times: `denoise_step`, `denoise_loop`, `text_encode`, "
        "`video_decode`, `audio_decode`, `upsample`, ... (ltx2.STAGES).",
        "[workload]\nstages = ['denoise_step', 'video_decode']",
        "ltx2.STAGES",
    ),
    # --------------------------------------------------------------- [run]
    "run.repeats": Key("int", "Timed repeats per stage (after warm-up).", "[run]\nrepeats = 10"),
    "run.warmup": Key("int", "Untimed runs before the repeats (0 allowed).", "[run]\nwarmup = 2"),
    "run.timeout_s": Key(
        "float", "Seconds a variant may take before it is ended and failed.", "[run]\ntimeout_s = 900"
    ),
    "run.trace": Key("bool", "Record an XLA trace of each stage (jax.profiler).", "[run]\ntrace = true"),
    "run.metrics": Key(
        "array of strings",
        "Metric families to collect. `accuracy`: a compile-only TPU/GPU variant's numerics knobs probed on "
        "CPU at a small config against float32, beside plain bfloat16 (a measured variant with a reference "
        "records its accuracy against the reference's output whatever this says).",
        "[run]\nmetrics = ['static', 'measured', 'trace']",
        allowed=("static", "measured", "trace", "accuracy"),
    ),
    "run.max_load": Key(
        "float",
        "Cores other processes may keep busy when timing starts: each timed stage waits for that, then "
        "refuses (needs `measured` in run.metrics).",
        "[run]\nmax_load = 0.5",
        default="none: no wait",
    ),
    "run.max_load_wait_s": Key("float", "How long to wait for run.max_load.", "[run]\nmax_load_wait_s = 120"),
    # --------------------------------------------------------------- [gate]
    "gate.tolerances": Key(
        "table of metric = float",
        "Relative tolerance per metric name or prefix (optionally after a family and a stage: "
        "`denoise_step.static.memory`); a key that names no metric is an error.",
        "[gate.tolerances]\n'memory' = 0.05",
        default="{}: the metric catalogue's",
    ),
    "gate.timing_ratio": Key(
        "float",
        "A timing regresses past this slowdown (>= 1.0) and a significant test.",
        "[gate]\ntiming_ratio = 1.5",
    ),
    "gate.alpha": Key("float", "The Mann-Whitney test's level, in (0, 1).", "[gate]\nalpha = 0.01"),
    "gate.baseline": Key(
        "string (path)",
        "The baseline file.",
        "[gate]\nbaseline = 'reports/baselines/nightly.jsonl'",
        default="none: given on the command line",
    ),
    # --------------------------------------------------------------- [report]
    "report.reference": Key(
        "string",
        "The default reference variant of the others.",
        "[report]\nreference = 'naive'",
        default="none: the first comparable variant",
    ),
    # --------------------------------------------------------------- [[variants]]
    "variants[].name": Key("string", "The variant's name (unique).", "[[variants]]\nname = 'naive'", default=_REQ),
    "variants[].overrides": Key(
        "table of dotted key = value",
        "This variant's changes: config overrides as in model.overrides, and `model.preset`, "
        "`target.<field>`, `workload.<field>` for this variant alone.",
        "[[variants]]\nname = 'loop'\noverrides = { 'pipeline.diffusion_loop' = 'python' }",
        "ltx2.PipelineConfig",
    ),
    "variants[].description": Key(
        "string", "One line shown in reports.", "[[variants]]\nname = 'a'\ndescription = 'the fix'"
    ),
    "variants[].reference": Key(
        "string",
        "The variant this one is compared with in reports and `harness diff`.",
        "[[variants]]\nname = 'a'\n[[variants]]\nname = 'b'\nreference = 'a'",
    ),
    # --------------------------------------------------------------- [matrix]
    "matrix.<name>": Key(
        "array",
        "An axis: an override key (as in variants[].overrides) and its values.",
        "[matrix]\n'transformer.sharding' = ['naive', 'context']",
        "ltx2.PipelineConfig",
    ),
    "matrix.exclude": Key(
        "array of tables",
        "Partial assignments of axes to leave out of the product.",
        "[matrix]\n'a.b' = [1, 2]\n'c.d' = [3, 4]\nexclude = [{ 'a.b' = 1, 'c.d' = 3 }]",
        default="[]",
    ),
    # --------------------------------------------------------------- [search]
    "search.base": Key("string", "The strategy whose rules the unsearched logical axes keep.", "", "ltx2.get_strategy"),
    "search.meshes": Key("array of tables", "Candidate meshes (axis = size).", "", default=_REQ),
    "search.attention": Key(
        "array of strings",
        "transformer.attention_impl values to try.",
        "",
        "ltx2.TransformerConfig.attention_impl",
    ),
    "search.proxy_layers": Key(
        "int",
        "Compile candidates with this many blocks and scale per block.",
        "",
        "ltx2.TransformerConfig.num_layers",
    ),
    "search.confirm": Key("int", "With a proxy: how many finalists are compiled again at full depth.", ""),
    "search.rules": Key(
        "table of axis = arrays",
        "Logical axis -> candidate mesh-axes lists ([] = replicated).",
        "",
        "ltx2 sharding rules",
        default=_REQ,
    ),
    # --------------------------------------------------------------- [reference]
    "reference.source": Key("string", "Where the numbers were published.", "", default=_REQ),
    "reference.hardware": Key("string", "The hardware they were measured on.", "", default=_REQ),
    "reference.description": Key("string", "One line on the configuration.", "", default="''"),
    "reference.diffusion_stage": Key(
        "string", "Our stage that their diffusion time compares with.", "", default="'denoise_loop'"
    ),
    "reference.rungs": Key("table of tables", "One table per variant (rung) of this manifest.", "", default=_REQ),
    **{
        f"reference.rungs.<name>.{metric}": Key("float", doc, "", default="none")
        for metric, doc in REFERENCE_METRICS.items()
    },
    "reference.rungs.<name>.note": Key("string", "A remark on the rung.", "", default="''"),
}

# A whole manifest that uses the sections whose examples above are empty: the test parses it, and the
# reference page shows it.
FULL_EXAMPLE = f"""schema_version = {SCHEMA_VERSION}

[target]
platform = "tpu"
topology = "v6e:2x4"
mesh = {{ data = 2, tensor = 4 }}

[model]
preset = "ltx2_19b"

[[variants]]
name = "naive"
overrides = {{ "transformer.sharding" = "naive" }}

[search]
base = "naive"
meshes = [{{ fsdp = 2, tensor = 4 }}, {{ data = 2, context = 2, tensor = 2 }}]
attention = ["xla", "splash"]
proxy_layers = 4
confirm = 2
[search.rules]
heads = [["tensor"], []]

[reference]
source = "a published table"
hardware = "TPU v6e-8"
description = "their configuration"
diffusion_stage = "denoise_loop"
[reference.rungs.naive]
video_s = 12.5
all_gather_wasted_fraction = 0.5
note = "before the fix"
"""
