"""Bad manifests for ``test_manifest.py``: each with the one exact error (key path, line, reason) it must get."""

from __future__ import annotations

from ltx2.sharding import strategy_names

# Lines 1-11; the cases below append to it or replace it.
BASE = """\
schema_version = 1
[target]
devices = 8
mesh = { data = -1 }
[model]
preset = "tiny"
[workload]
height = 64
width = 64
num_frames = 9
text_tokens = 16
"""
STRATEGIES = ", ".join(strategy_names())
PRESETS = "tiny, small, medium, ltx2_19b, ltx2_3_22b"
STAGES = "text_encode, denoise_step, guided_step, denoise_loop, video_decode, audio_decode, upsample"

# (case id, manifest text, key path, line or None, reason)
BAD: list[tuple[str, str, str, int | None, str]] = [
    ("no-schema-version", BASE.replace("schema_version = 1\n", ""), "schema_version", None, "missing required key"),
    (
        "future-schema",
        BASE.replace("schema_version = 1", "schema_version = 2"),
        "schema_version",
        1,
        "unsupported schema version 2 (this harness reads 1)",
    ),
    (
        "schema-version-type",
        BASE.replace("schema_version = 1", 'schema_version = "1"'),
        "schema_version",
        1,
        "expected an integer, got a string ('1')",
    ),
    (
        "unknown-section",
        BASE + "[targets]\nplatform = 'cpu'\n",
        "targets",
        12,
        "unknown key (allowed: schema_version, target, model, workload, run, gate, report, variants, matrix, "
        "search, reference)",
    ),
    ("no-model", BASE.replace('[model]\npreset = "tiny"\n', ""), "model", None, "missing required section"),
    (
        "unknown-target-key",
        BASE.replace("devices = 8", "device = 8"),
        "target.device",
        3,
        "unknown key (allowed: platform, mode, mesh, topology, devices, processes, compiler_options, spec)",
    ),
    (
        "devices-type",
        BASE.replace("devices = 8", 'devices = "8"'),
        "target.devices",
        3,
        "expected an integer, got a string ('8')",
    ),
    (
        "bad-platform",
        BASE.replace("[target]\n", '[target]\nplatform = "cuda"\n'),
        "target.platform",
        3,
        "unknown platform 'cuda' (known: cpu, tpu, gpu)",
    ),
    (
        "bad-mode",
        BASE.replace("[target]\n", '[target]\nmode = "fast"\n'),
        "target.mode",
        3,
        "unknown mode 'fast' (known: auto, measure, compile)",
    ),
    (
        "two-rest-axes",
        BASE.replace("{ data = -1 }", "{ data = -1, tensor = -1 }"),
        "target.mesh.tensor",
        4,
        "at most one axis may be -1 (already 'data')",
    ),
    (
        "zero-axis",
        BASE.replace("{ data = -1 }", "{ data = 0 }"),
        "target.mesh.data",
        4,
        "axis size must be a positive integer or -1, got 0",
    ),
    (
        "mesh-too-small",
        BASE.replace("{ data = -1 }", "{ data = 2, tensor = 2 }"),
        "target.mesh",
        4,
        "mesh {data=2, tensor=2} spans 4 devices, target has 8",
    ),
    (
        "mesh-indivisible",
        BASE.replace("{ data = -1 }", "{ data = -1, tensor = 3 }"),
        "target.mesh",
        4,
        "mesh {data=-1, tensor=3} needs a multiple of 3 devices, target has 8",
    ),
    (
        "mesh-axis-name",
        BASE.replace("{ data = -1 }", "{ dp = -1 }"),
        "target.mesh",
        4,
        "unknown mesh axes ['dp'] (known: data, fsdp, context, tensor)",
    ),
    (
        "topology-on-cpu",
        BASE.replace("devices = 8", 'topology = "v6e:2x4"'),
        "target.topology",
        3,
        "a topology names TPU or GPU hardware; platform is 'cpu'",
    ),
    (
        "bad-topology",
        BASE.replace("devices = 8", 'platform = "tpu"\ntopology = "v6e-8"'),
        "target.topology",
        4,
        "bad topology 'v6e-8' (expected e.g. 'v6e:2x4', 'tpu7x:2x2x1', 'h100:1x1x8')",
    ),
    (
        "tpu-topology-on-gpu",
        BASE.replace("devices = 8", 'platform = "gpu"\ntopology = "v6e:2x4"'),
        "target.topology",
        4,
        "'v6e' is a tpu target; platform is 'gpu'",
    ),
    (
        "gpu-topology-dims",
        BASE.replace("devices = 8", 'platform = "gpu"\ntopology = "h100:8"'),
        "target.topology",
        4,
        "a GPU topology is <gpu>:<slices>x<hosts>x<gpus per host>, got 'h100:8'",
    ),
    (
        "topology-vs-devices",
        BASE.replace("devices = 8", 'platform = "tpu"\ntopology = "v6e:2x2"\ndevices = 8'),
        "target.devices",
        5,
        "topology 'v6e:2x2' has 4 devices, devices = 8",
    ),
    (
        "unknown-preset",
        BASE.replace('"tiny"', '"huge"'),
        "model.preset",
        6,
        f"unknown preset 'huge' (known: {PRESETS})",
    ),
    (
        "unknown-strategy",
        BASE.replace('preset = "tiny"', 'preset = "tiny"\noverrides = { "transformer.sharding" = "diagonal" }'),
        'model.overrides."transformer.sharding"',
        7,
        f"unknown sharding strategy 'diagonal' (known: {STRATEGIES})",
    ),
    (
        "unknown-config-key",
        BASE + "[model.overrides]\ntransformer.scan_layer = true\n",
        "model.overrides.transformer.scan_layer",
        13,
        "unknown config key 'transformer.scan_layer': TransformerConfig has no field 'scan_layer'",
    ),
    (
        "unknown-component",
        BASE + '[model.overrides]\n"vae.tiling" = true\n',
        'model.overrides."vae.tiling"',
        13,
        "unknown config key 'vae.tiling' (components: transformer, connectors, text_encoder, gemma, "
        "video_vae, audio_vae, vocoder, upsampler, scheduler, guidance, pipeline)",
    ),
    (
        "override-type",
        BASE + '[model.overrides]\n"transformer.num_layers" = "two"\n',
        'model.overrides."transformer.num_layers"',
        13,
        "expected int, got str ('two')",
    ),
    (
        "override-invalid-value",
        BASE + '[model.overrides]\n"transformer.dtype" = "float8"\n',
        'model.overrides."transformer.dtype"',
        13,
        "TransformerConfig.dtype='float8': must be one of ('float32', 'bfloat16')",
    ),
    (
        "setting-in-model-overrides",
        BASE + '[model.overrides]\n"target.devices" = 4\n',
        'model.overrides."target.devices"',
        13,
        "set manifest settings in their own section, not in [model] overrides",
    ),
    (
        "unknown-stage",
        BASE + 'stages = ["denoise_step", "decode"]\n',
        "workload.stages[1]",
        12,
        f"unknown stage 'decode' (known: {STAGES})",
    ),
    (
        "duplicate-stage",
        BASE + 'stages = ["denoise_step", "denoise_step"]\n',
        "workload.stages",
        12,
        "duplicate entries",
    ),
    (
        "grid-mismatch",
        BASE.replace("height = 64", "height = 100"),
        "workload.height",
        8,
        "workload 64x100x9 does not fit the latent grid: width and height must be multiples of 32, "
        "frames of the form 8k + 1",
    ),
    ("negative-batch", BASE + "batch = -1\n", "workload.batch", 12, "must be > 0, got -1"),
    ("zero-repeats", BASE + "[run]\nrepeats = 0\n", "run.repeats", 13, "must be > 0, got 0"),
    (
        "unknown-metric",
        BASE + '[run]\nmetrics = ["static", "power"]\n',
        "run.metrics[1]",
        13,
        "unknown metric 'power' (known: static, measured, trace, accuracy)",
    ),
    ("trace-type", BASE + '[run]\ntrace = "yes"\n', "run.trace", 13, "expected a boolean, got a string ('yes')"),
    ("alpha-range", BASE + "[gate]\nalpha = 1.5\n", "gate.alpha", 13, "must be in (0, 1), got 1.5"),
    (
        "ratio-range",
        BASE + "[gate]\ntiming_ratio = 0.9\n",
        "gate.timing_ratio",
        13,
        "must be >= 1.0 (slowdown factor), got 0.9",
    ),
    (
        "tolerance-type",
        BASE + '[gate.tolerances]\n"static.memory" = "1%"\n',
        'gate.tolerances."static.memory"',
        13,
        "tolerance must be a number >= 0, got '1%'",
    ),
    ("variant-no-name", BASE + "[[variants]]\noverrides = {}\n", "variants[0].name", 12, "missing required key"),
    (
        "variant-unknown-key",
        BASE + '[[variants]]\nname = "a"\nnme = "b"\n',
        "variants[0].nme",
        14,
        "unknown key (allowed: name, overrides, description, reference)",
    ),
    (
        "unknown-reference",
        BASE + '[[variants]]\nname = "a"\n[[variants]]\nname = "b"\nreference = "c"\n'
        'overrides = { "workload.steps" = 3 }\n',
        "variants[1].reference",
        16,
        "no variant named 'c' (variants: a, b)",
    ),
    (
        "own-reference",
        BASE + '[[variants]]\nname = "a"\nreference = "a"\n',
        "variants[0].reference",
        14,
        "variant 'a' cannot be its own reference",
    ),
    (
        "unknown-report-reference",
        BASE + '[report]\nreference = "z"\n[[variants]]\nname = "a"\n',
        "report.reference",
        13,
        "no variant named 'z' (variants: a)",
    ),
    (
        "report-unknown-key",
        BASE + '[report]\nbaseline = "z"\n',
        "report.baseline",
        13,
        "unknown key (allowed: reference)",
    ),
    (
        "duplicate-variant",
        BASE + '[[variants]]\nname = "a"\n[[variants]]\nname = "a"\n',
        "variants[1].name",
        15,
        "duplicate variant name 'a' (also variants[0])",
    ),
    (
        "variant-strategy",
        BASE + '[[variants]]\nname = "a"\n[variants.overrides]\n"transformer.sharding" = "x"\n',
        'variants[0].overrides."transformer.sharding"',
        15,
        f"unknown sharding strategy 'x' (known: {STRATEGIES})",
    ),
    (
        "variant-mesh",
        BASE + '[[variants]]\nname = "a"\n[[variants]]\nname = "b"\noverrides = { "target.mesh" = { data = 3 } }\n',
        'variants[1].overrides."target.mesh"',
        16,
        "mesh {data=3} spans 3 devices, target has 8",
    ),
    (
        "variant-unknown-setting",
        BASE + '[[variants]]\nname = "a"\noverrides = { "workload.fps" = 30 }\n',
        'variants[0].overrides."workload.fps"',
        14,
        "unknown key (allowed: height, width, num_frames, frame_rate, batch, steps, text_tokens, stages)",
    ),
    (
        "variant-preset",
        BASE + '[[variants]]\nname = "a"\noverrides = { "model.preset" = "big" }\n',
        'variants[0].overrides."model.preset"',
        14,
        f"unknown preset 'big' (known: {PRESETS})",
    ),
    (
        "matrix-scalar-axis",
        BASE + '[matrix]\n"transformer.sharding" = "naive"\n',
        'matrix."transformer.sharding"',
        13,
        "an axis is a non-empty array of values, got 'naive'",
    ),
    (
        "matrix-strategy",
        BASE + '[matrix]\n"transformer.sharding" = ["replicated", "bogus"]\n',
        'matrix."transformer.sharding"',
        13,
        f"unknown sharding strategy 'bogus' (known: {STRATEGIES})",
    ),
    (
        "matrix-duplicate-values",
        BASE + '[matrix]\n"transformer.scan_layers" = [true, true]\n',
        'matrix."transformer.scan_layers"',
        13,
        "duplicate values",
    ),
    (
        "exclude-not-axis",
        BASE + '[matrix]\n"transformer.sharding" = ["naive"]\nexclude = [{ "transformer.dtype" = "float32" }]\n',
        'matrix.exclude[0]."transformer.dtype"',
        14,
        "not a matrix axis (axes: transformer.sharding)",
    ),
    (
        "exclude-not-value",
        BASE + '[matrix]\n"transformer.sharding" = ["naive"]\nexclude = [{ "transformer.sharding" = "context" }]\n',
        'matrix.exclude[0]."transformer.sharding"',
        14,
        "'context' is not a value of this axis",
    ),
    (
        "matrix-name-clash",
        BASE + '[[variants]]\nname = "sharding=replicated"\n[matrix]\n"transformer.sharding" = ["replicated"]\n',
        "matrix",
        14,
        "duplicate variant name 'sharding=replicated'",
    ),
    (
        "indivisible-batch",
        BASE + '[model.overrides]\n"transformer.sharding" = "naive"\n',
        "workload.batch",
        7,
        "batch (1) do not divide into 8 shards (activation_batch over data under strategy 'naive')",
    ),
    (
        "indivisible-tokens",
        BASE + '[[variants]]\nname = "a"\n'
        'overrides = { "transformer.sharding" = "context", "target.mesh" = { context = 8 } }\n',
        'variants[0].overrides."transformer.sharding"',
        14,
        "audio tokens (9) do not divide into 8 shards (activation_length over context under strategy 'context')",
    ),
]
