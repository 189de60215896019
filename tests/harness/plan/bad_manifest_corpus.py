"""The bad-manifest corpus: valid manifests and one-line edits of them that must each be rejected.

Read by ``test_bad_manifests.py``; each case is (case id, valid manifest, line edited (1-based), its new
text, key named, line named (None: no line), reason fragment).
"""

from __future__ import annotations

VALID = {
    "cpu": b"""\
schema_version = 1
[target]
platform = "cpu"
mode = "auto"
devices = 8
mesh = { data = -1 }
[model]
preset = "tiny"
overrides = { "transformer.scan_layers" = true }
[workload]
height = 64
width = 64
num_frames = 9
frame_rate = 24.0
batch = 1
steps = 4
text_tokens = 16
stages = ["denoise_step"]
[run]
repeats = 3
warmup = 1
timeout_s = 60.0
trace = false
metrics = ["static", "measured"]
[gate]
timing_ratio = 1.1
alpha = 0.05
[gate.tolerances]
"static.memory" = 0.02
"collectives.count" = 0
[[variants]]
name = "replicated"
overrides = { "transformer.sharding" = "replicated" }
[[variants]]
name = "unrolled"
overrides = { "transformer.sharding" = "replicated", "transformer.scan_layers" = false }
[matrix]
"workload.steps" = [2, 8]
"transformer.sharding" = ["replicated"]
exclude = [{ "workload.steps" = 8 }]
""",
    "tpu": b"""\
schema_version = 1
[target]
platform = "tpu"
mode = "compile"
topology = "v6e:2x4"
mesh = { data = 2, fsdp = 4 }
[model]
preset = "tiny"
[workload]
height = 64
width = 64
num_frames = 9
text_tokens = 16
""",
    "gpu": b"""\
schema_version = 1
[target]
platform = "gpu"
mode = "compile"
topology = "h100:1x1x8"
[model]
preset = "tiny"
[workload]
height = 64
width = 64
num_frames = 9
text_tokens = 16
""",
    "min": b"""\
schema_version = 1
[target]
devices = 2
[model]
preset = "test:ok"
[workload]
stages = ["denoise_step"]
""",
}

# (case id, valid manifest, line edited (1-based), its new text, key named, line named (None: no line), reason fragment)
CASES: list[tuple[str, str, int, bytes, str, int | None, str]] = [
    # --- the file itself
    ("toml-syntax", "cpu", 20, b"repeats = ", "", 20, "invalid TOML"),
    ("latin1-comment", "cpu", 19, b"[run]  # r\xe9glages", "", 19, "not UTF-8"),
    ("binary-file", "cpu", 1, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "", 1, "not UTF-8"),
    ("no-schema-version", "cpu", 1, b"", "schema_version", None, "missing required key"),
    ("future-schema", "cpu", 1, b"schema_version = 2", "schema_version", 1, "unsupported schema version 2"),
    ("schema-version-string", "cpu", 1, b'schema_version = "1"', "schema_version", 1, "expected an integer"),
    ("schema-version-float", "cpu", 1, b"schema_version = 1.0", "schema_version", 1, "expected an integer"),
    ("unknown-section", "cpu", 2, b"[targets]", "targets", 2, "unknown key"),
    # --- [target]
    ("unknown-platform", "cpu", 3, b'platform = "cuda"', "target.platform", 3, "unknown platform 'cuda'"),
    (
        "tpu-without-topology",
        "cpu",
        3,
        b'platform = "tpu"',
        "target.topology",
        2,
        "a tpu target needs a topology, e.g. topology = 'v6e:2x4' (known: v4, v5e, v5p, v6e, tpu7x)",
    ),
    ("unknown-mode", "cpu", 4, b'mode = "fast"', "target.mode", 4, "unknown mode 'fast'"),
    ("zero-devices", "cpu", 5, b"devices = 0", "target.devices", 5, "must be > 0"),
    ("devices-string", "cpu", 5, b'devices = "8"', "target.devices", 5, "expected an integer"),
    ("devices-nan", "cpu", 5, b"devices = nan", "target.devices", 5, "not a finite number"),
    ("mesh-zero-axis", "cpu", 6, b"mesh = { data = 0 }", "target.mesh.data", 6, "positive integer or -1"),
    ("mesh-two-rest-axes", "cpu", 6, b"mesh = { data = -1, tensor = -1 }", "target.mesh.tensor", 6, "at most one"),
    ("mesh-unknown-axis", "cpu", 6, b"mesh = { dp = -1 }", "target.mesh", 6, "unknown mesh axes ['dp']"),
    ("mesh-too-small", "cpu", 6, b"mesh = { data = 4 }", "target.mesh", 6, "spans 4 devices, target has 8"),
    ("mesh-not-a-table", "cpu", 6, b"mesh = 8", "target.mesh", 6, "expected a table of axis = size"),
    ("tpu-unknown-generation", "tpu", 5, b'topology = "v99:2x4"', "target.topology", 5, "unknown TPU generation 'v99'"),
    ("tpu-topology-form", "tpu", 5, b'topology = "v6e-8"', "target.topology", 5, "bad topology 'v6e-8'"),
    ("tpu-gpu-topology", "tpu", 5, b'topology = "h100:1x1x8"', "target.topology", 5, "'h100' is a gpu target"),
    ("tpu-mesh-vs-topology", "tpu", 6, b"mesh = { data = 2, fsdp = 2 }", "target.mesh", 6, "spans 4 devices"),
    ("tpu-devices-vs-topology", "tpu", 4, b"devices = 4", "target.devices", 4, "has 8 devices, devices = 4"),
    (
        "compiler-options-not-a-table",
        "tpu",
        4,
        b'mode = "compile"\ncompiler_options = "--xla_foo=true"',
        "target.compiler_options",
        5,
        "expected a table of option = value",
    ),
    (
        "compiler-option-with-dashes",
        "tpu",
        4,
        b'mode = "compile"\ncompiler_options = { "--xla_foo" = true }',
        "target.compiler_options.--xla_foo",
        5,
        "without the leading --",
    ),
    (
        "compiler-option-array",
        "tpu",
        4,
        b'mode = "compile"\ncompiler_options = { xla_foo = [1] }',
        "target.compiler_options.xla_foo",
        5,
        "expected a boolean, number or string, got an array",
    ),
    ("gpu-unknown-model", "gpu", 5, b'topology = "a100:1x1x8"', "target.topology", 5, "unknown GPU 'a100'"),
    ("gpu-topology-dims", "gpu", 5, b'topology = "h100:8"', "target.topology", 5, "<slices>x<hosts>x<gpus"),
    # --- [model]
    ("unknown-preset", "cpu", 8, b'preset = "huge"', "model.preset", 8, "unknown preset 'huge'"),
    ("preset-not-a-string", "cpu", 8, b"preset = 5", "model.preset", 8, "expected a string"),
    (
        "unknown-config-key",
        "cpu",
        9,
        b'overrides = { "transformer.scan_layer" = true }',
        'model.overrides."transformer.scan_layer"',
        9,
        "has no field 'scan_layer'",
    ),
    (
        "config-override-type",
        "cpu",
        9,
        b'overrides = { "transformer.scan_layers" = 1 }',
        'model.overrides."transformer.scan_layers"',
        9,
        "expected bool",
    ),
    (
        "config-override-nan",
        "cpu",
        9,
        b'overrides = { "guidance.guidance_scale" = nan }',
        'model.overrides."guidance.guidance_scale"',
        9,
        "not a finite number",
    ),
    (
        "config-override-inf",
        "cpu",
        9,
        b'overrides = { "scheduler.shift" = -inf }',
        'model.overrides."scheduler.shift"',
        9,
        "not a finite number",
    ),
    (
        "setting-in-model-overrides",
        "cpu",
        9,
        b'overrides = { "workload.batch" = 2 }',
        'model.overrides."workload.batch"',
        9,
        "in their own section",
    ),
    # --- [workload]
    ("height-off-grid", "cpu", 11, b"height = 100", "workload.height", 11, "does not fit the latent grid"),
    ("width-off-grid", "cpu", 12, b"width = 100", "workload.width", 12, "does not fit the latent grid"),
    ("frames-off-grid", "cpu", 13, b"num_frames = 10", "workload.num_frames", 13, "does not fit the latent grid"),
    ("frame-rate-nan", "cpu", 14, b"frame_rate = nan", "workload.frame_rate", 14, "not a finite number"),
    ("frame-rate-inf", "cpu", 14, b"frame_rate = inf", "workload.frame_rate", 14, "not a finite number"),
    ("frame-rate-negative", "cpu", 14, b"frame_rate = -24.0", "workload.frame_rate", 14, "must be > 0"),
    ("frame-rate-huge", "cpu", 14, b"frame_rate = 1e300", "workload.frame_rate", 14, "at most"),
    ("frame-rate-string", "cpu", 14, b'frame_rate = "24"', "workload.frame_rate", 14, "expected a number"),
    ("zero-batch", "cpu", 15, b"batch = 0", "workload.batch", 15, "must be > 0"),
    ("huge-batch", "cpu", 15, b"batch = 4294967296", "workload.batch", 15, "at most"),
    ("huge-steps", "cpu", 16, b"steps = 9223372036854775807", "workload.steps", 16, "at most"),
    ("huge-frames", "cpu", 13, b"num_frames = 9223372036854775801", "workload.num_frames", 13, "at most"),
    ("huge-height", "cpu", 11, b"height = 1099511627776", "workload.height", 11, "at most"),
    ("huge-text-tokens", "cpu", 17, b"text_tokens = 4611686018427387904", "workload.text_tokens", 17, "at most"),
    ("unknown-stage", "cpu", 18, b'stages = ["decode"]', "workload.stages[0]", 18, "unknown stage 'decode'"),
    ("no-stages", "cpu", 18, b"stages = []", "workload.stages", 18, "needs at least one stage"),
    (
        "duplicate-stage",
        "cpu",
        18,
        b'stages = ["denoise_step", "denoise_step"]',
        "workload.stages",
        18,
        "duplicate entries",
    ),
    # --- [run]
    ("zero-repeats", "cpu", 20, b"repeats = 0", "run.repeats", 20, "must be > 0"),
    ("fractional-repeats", "cpu", 20, b"repeats = 2.5", "run.repeats", 20, "expected an integer"),
    ("negative-warmup", "cpu", 21, b"warmup = -1", "run.warmup", 21, "must be >= 0"),
    ("timeout-nan", "cpu", 22, b"timeout_s = nan", "run.timeout_s", 22, "not a finite number"),
    ("timeout-inf", "cpu", 22, b"timeout_s = inf", "run.timeout_s", 22, "not a finite number"),
    ("timeout-zero", "cpu", 22, b"timeout_s = 0", "run.timeout_s", 22, "must be > 0"),
    ("trace-string", "cpu", 23, b'trace = "yes"', "run.trace", 23, "expected a boolean"),
    ("unknown-metric", "cpu", 24, b'metrics = ["static", "power"]', "run.metrics[1]", 24, "unknown metric 'power'"),
    # --- [gate]
    ("timing-ratio-nan", "cpu", 26, b"timing_ratio = nan", "gate.timing_ratio", 26, "not a finite number"),
    ("timing-ratio-inf", "cpu", 26, b"timing_ratio = inf", "gate.timing_ratio", 26, "not a finite number"),
    ("timing-ratio-below-one", "cpu", 26, b"timing_ratio = 0.9", "gate.timing_ratio", 26, "must be >= 1.0"),
    ("alpha-nan", "cpu", 27, b"alpha = nan", "gate.alpha", 27, "not a finite number"),
    ("alpha-out-of-range", "cpu", 27, b"alpha = 1.5", "gate.alpha", 27, "must be in (0, 1)"),
    (
        "tolerance-nan",
        "cpu",
        29,
        b'"static.memory" = nan',
        'gate.tolerances."static.memory"',
        29,
        "not a finite number",
    ),
    (
        "tolerance-inf",
        "cpu",
        30,
        b'"collectives.count" = inf',
        'gate.tolerances."collectives.count"',
        30,
        "not a finite number",
    ),
    ("tolerance-negative", "cpu", 29, b'"static.memory" = -0.1', 'gate.tolerances."static.memory"', 29, ">= 0"),
    ("tolerance-string", "cpu", 29, b'"static.memory" = "2%"', 'gate.tolerances."static.memory"', 29, ">= 0"),
    (
        "tolerance-typo",
        "cpu",
        29,
        b'"static.memroy" = 0.02',
        'gate.tolerances."static.memroy"',
        29,
        "matches no metric",
    ),
    (
        "tolerance-unknown-stage",
        "cpu",
        29,
        b'"decode.static.memory" = 0.02',
        'gate.tolerances."decode.static.memory"',
        29,
        "unknown stage 'decode'",
    ),
    (
        "tolerance-wrong-family",
        "cpu",
        30,
        b'"trace.collectives.count" = 0',
        'gate.tolerances."trace.collectives.count"',
        30,
        "matches no metric",
    ),
    # --- [[variants]]
    ("variant-empty-name", "cpu", 32, b'name = ""', "variants[0].name", 32, "must not be empty"),
    ("variant-duplicate-name", "cpu", 35, b'name = "replicated"', "variants[1].name", 35, "duplicate variant name"),
    ("variant-unknown-key", "cpu", 35, b'nme = "unrolled"', "variants[1].nme", 35, "unknown key"),
    (
        "variant-unknown-strategy",
        "cpu",
        33,
        b'overrides = { "transformer.sharding" = "diagonal" }',
        'variants[0].overrides."transformer.sharding"',
        33,
        "unknown sharding strategy 'diagonal'",
    ),
    (
        "variant-frame-rate-nan",
        "cpu",
        33,
        b'overrides = { "workload.frame_rate" = nan }',
        'variants[0].overrides."workload.frame_rate"',
        33,
        "not a finite number",
    ),
    (
        "variant-unknown-setting",
        "cpu",
        33,
        b'overrides = { "workload.fps" = 30 }',
        'variants[0].overrides."workload.fps"',
        33,
        "unknown key",
    ),
    (
        "variant-width-off-grid",
        "cpu",
        33,
        b'overrides = { "transformer.sharding" = "replicated", "workload.width" = 100 }',
        'variants[0].overrides."workload.width"',
        33,
        "does not fit the latent grid",
    ),
    (
        "variant-mesh",
        "cpu",
        33,
        b'overrides = { "target.mesh" = { data = 3 } }',
        'variants[0].overrides."target.mesh"',
        33,
        "spans 3 devices, target has 8",
    ),
    (
        "variant-huge-frames",
        "cpu",
        33,
        b'overrides = { "workload.num_frames" = 9223372036854775807 }',
        'variants[0].overrides."workload.num_frames"',
        33,
        "at most",
    ),
    (
        "variant-same-settings",
        "cpu",
        36,
        b'overrides = { "transformer.sharding" = "replicated" }',
        "variants[1].overrides",
        36,
        "resolves to the same settings as 'replicated'",
    ),
    (
        "rule-unknown-logical-axis",
        "cpu",
        33,
        b'overrides = { "sharding.rules.mlp_inn" = [] }',
        'variants[0].overrides."sharding.rules.mlp_inn"',
        33,
        "unknown logical axis 'mlp_inn'",
    ),
    (
        "rule-unknown-mesh-axis",
        "cpu",
        33,
        b'overrides = { "sharding.rules.mlp_in" = ["model"] }',
        'variants[0].overrides."sharding.rules.mlp_in"',
        33,
        "unknown mesh axes ['model']",
    ),
    (
        "rule-repeated-mesh-axis",
        "cpu",
        33,
        b'overrides = { "sharding.rules.qkv_in" = ["fsdp", "fsdp"] }',
        'variants[0].overrides."sharding.rules.qkv_in"',
        33,
        "repeats a mesh axis",
    ),
    (
        "rule-not-axes",
        "cpu",
        33,
        b'overrides = { "sharding.rules.mlp_in" = true }',
        'variants[0].overrides."sharding.rules.mlp_in"',
        33,
        "a rule is a list of mesh axes",
    ),
    (
        "rule-axis-not-a-string",
        "cpu",
        33,
        b'overrides = { "sharding.rules.mlp_in" = [1] }',
        'variants[0].overrides."sharding.rules.mlp_in"',
        33,
        "expected a mesh axis name or a list of them",
    ),
    (
        "rules-not-a-table",
        "cpu",
        33,
        b'overrides = { "sharding.rules" = ["mlp_in"] }',
        'variants[0].overrides."sharding.rules"',
        33,
        "sharding rules are written sharding.rules.<logical axis>",
    ),
    (
        "rule-in-model-overrides",
        "cpu",
        9,
        b'overrides = { "sharding.rules.qkv_in" = ["tensr"] }',
        'model.overrides."sharding.rules.qkv_in"',
        9,
        "unknown mesh axes ['tensr']",
    ),
    ("variants-empty", "min", 1, b"schema_version = 1\nvariants = []", "variants", 2, "is empty"),
    ("variants-not-tables", "min", 1, b'schema_version = 1\nvariants = ["a"]', "variants[0]", 2, "expected a table"),
    # --- [matrix]
    ("matrix-scalar-axis", "cpu", 38, b'"workload.steps" = 2', 'matrix."workload.steps"', 38, "non-empty array"),
    ("matrix-empty-axis", "cpu", 38, b'"workload.steps" = []', 'matrix."workload.steps"', 38, "non-empty array"),
    (
        "matrix-nan-value",
        "cpu",
        39,
        b'"workload.frame_rate" = [24.0, nan]',
        'matrix."workload.frame_rate"[1]',
        39,
        "not a finite number",
    ),
    (
        "matrix-duplicate-values",
        "cpu",
        38,
        b'"workload.steps" = [2, 2]',
        'matrix."workload.steps"',
        38,
        "duplicate values",
    ),
    ("matrix-unknown-setting", "cpu", 39, b'"workload.fps" = [24]', 'matrix."workload.fps"', 39, "unknown key"),
    (
        "exclude-not-an-axis",
        "cpu",
        40,
        b'exclude = [{ "workload.batch" = 1 }]',
        'matrix.exclude[0]."workload.batch"',
        40,
        "not a matrix axis",
    ),
    (
        "exclude-not-a-value",
        "cpu",
        40,
        b'exclude = [{ "workload.steps" = 3 }]',
        'matrix.exclude[0]."workload.steps"',
        40,
        "is not a value of this axis",
    ),
    (
        "exclude-everything",
        "cpu",
        40,
        b'exclude = [{ "transformer.sharding" = "replicated" }]',
        "matrix.exclude",
        40,
        "excludes every point",
    ),
]
