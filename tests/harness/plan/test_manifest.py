"""Manifest parsing and validation: every bad manifest gets one exact error (file, key, line), whether the
TOML alone shows it (harness.plan.manifest, no model import) or the model does (expansion, harness.plan.variants)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.expansion import load_sweep
from harness.plan.manifest import SCHEMA_VERSION, ManifestError, Target, load_manifest
from harness.plan.toml import format_path, locate
from tests.harness.plan.manifest_cases import BAD, BASE


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "key", "line", "reason"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_manifest_exact_error(tmp_path: Path, text: str, key: str, line: int | None, reason: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ManifestError) as info:
        load_sweep(path)
    err = info.value
    assert (err.file, err.key, err.line, err.reason) == (str(path), key, line, reason)
    where = f"{path}:{line}" if line is not None else str(path)
    assert str(err) == f"{where}: {key}: {reason}"


def test_toml_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE + "[run\nrepeats = 3\n")
    with pytest.raises(ManifestError) as info:
        load_manifest(path)
    assert info.value.line == 12
    assert str(info.value).startswith(f"{path}:12: invalid TOML: ")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read"):
        load_manifest(tmp_path / "nope.toml")


def test_same_settings_twice_is_an_error(tmp_path: Path) -> None:
    text = BASE + '[[variants]]\nname = "a"\n[[variants]]\nname = "b"\n'
    with pytest.raises(ManifestError) as info:
        load_sweep(_write(tmp_path, text))
    assert info.value.key == "variants[1].overrides"
    assert re.fullmatch(r"variant 'b' resolves to the same settings as 'a' \(id [0-9a-f]{12}\)", info.value.reason)


def test_good_manifest_round_trip(tmp_path: Path) -> None:
    text = (
        BASE
        + """\
frame_rate = 25
stages = ["denoise_step"]
[run]
repeats = 3
warmup = 0
timeout_s = 60
trace = true
metrics = ["static", "measured", "trace"]
[gate]
timing_ratio = 1.2
alpha = 0.01
baseline = "reports/baselines/x.jsonl"
[gate.tolerances]
static.memory = 0.01
"static.collectives.count" = 0
[model.overrides]
transformer.scan_layers = false
"""
    )
    m = load_manifest(_write(tmp_path, text))
    assert m.schema_version == SCHEMA_VERSION and m.name == "m"
    assert m.target == Target("cpu", "auto", (("data", -1),), None, 8)
    assert m.target.mesh_shape == {"data": 8}
    assert m.model.preset == "tiny" and dict(m.model.overrides) == {"transformer.scan_layers": False}
    assert (m.workload.height, m.workload.frame_rate, m.workload.stages) == (64, 25.0, ("denoise_step",))
    assert m.run.metrics == ("static", "measured", "trace") and m.run.timeout_s == 60.0 and m.run.warmup == 0
    assert dict(m.gate.tolerances) == {"static.memory": 0.01, "static.collectives.count": 0.0}
    assert (m.gate.timing_ratio, m.gate.alpha, m.gate.baseline) == (1.2, 0.01, "reports/baselines/x.jsonl")
    assert len(m.sha256) == 64


def test_cpu_device_count_defaults_to_the_mesh(tmp_path: Path) -> None:
    text = BASE.replace("devices = 8\n", "").replace("{ data = -1 }", "{ data = 2, tensor = 2 }")
    assert load_manifest(_write(tmp_path, text)).target.devices == 4


def test_tpu_topology_sets_the_device_count(tmp_path: Path) -> None:
    text = BASE.replace("devices = 8", 'platform = "tpu"\ntopology = "v6e:2x4"')
    target = load_manifest(_write(tmp_path, text)).target
    assert (target.devices, target.mesh_shape) == (8, {"data": 8})


@pytest.mark.parametrize(
    "platform,topology,devices",
    [
        ("tpu", "tpu7x:2x2x1", 8),  # 4 Ironwood chips, two TensorCores (devices) each
        ("gpu", "h100:1x1x8", 8),  # slices x hosts x GPUs per host
        ("tpu", "v5p:2x2x1", 4),  # no spec in harness.targets: one device per chip
    ],
)
def test_topology_device_counts(tmp_path: Path, platform: str, topology: str, devices: int) -> None:
    text = BASE.replace("devices = 8", f'platform = "{platform}"\ntopology = "{topology}"')
    assert load_manifest(_write(tmp_path, text)).target.devices == devices


def test_format_path_and_locate() -> None:
    assert (
        format_path(("variants", 2, "overrides", "transformer.sharding"))
        == 'variants[2].overrides."transformer.sharding"'
    )
    text = "[a]\nx = 1\n[[v]]\nn = 1\n[[v]]\nn = 2\no = { 'k.j' = 3, m = 4 }\n"
    assert locate(text, ("a", "x")) == 2
    assert locate(text, ("v", 1, "n")) == 6
    assert locate(text, ("v", 1, "o", "m")) == 7
    assert locate(text, ("v", 1, "o", "k.j")) == 7
    assert locate(text, ("v", 1, "missing")) == 5
    assert locate(text, ("nowhere",)) is None


def test_the_toml_alone_does_not_ask_the_model(tmp_path: Path) -> None:
    """Preset, stage names and config overrides are the model's to judge: the manifest parser keeps them
    as written, expansion rejects them."""
    text = BASE.replace('"tiny"', '"huge"') + 'stages = ["decode"]\n[model.overrides]\n"transformer.nope" = 1\n'
    m = load_manifest(_write(tmp_path, text))
    assert (m.model.preset, m.workload.stages, dict(m.model.overrides)) == (
        "huge",
        ("decode",),
        {"transformer.nope": 1},
    )
    with pytest.raises(ManifestError, match="unknown preset 'huge'"):
        load_sweep(_write(tmp_path, text))


def test_parsing_a_manifest_imports_neither_the_model_nor_jax(tmp_path: Path) -> None:
    path = _write(tmp_path, BASE)
    code = (
        "import sys; from harness.plan.manifest import load_manifest; m = load_manifest(sys.argv[1]); "
        "bad = [n for n in ('jax', 'ltx2', 'torch') if n in sys.modules]; assert not bad, bad; print(m.name)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "m"


def test_references_declared_defaulted_and_only_between_like_workloads(tmp_path: Path) -> None:
    """Declared references win; otherwise [report] reference if it runs the same preset and sizes,
    else the first earlier variant that does; a variant with a different workload gets none."""
    text = (
        BASE
        + """[report]
reference = "ref"
[[variants]]
name = "first"
[[variants]]
name = "ref"
overrides = { "workload.steps" = 3 }
[[variants]]
name = "knob"
overrides = { "workload.steps" = 3, "transformer.scan_layers" = false }
[[variants]]
name = "other"
overrides = { "text_encoder.batching" = "separate" }
[[variants]]
name = "declared"
reference = "knob"
overrides = { "workload.stages" = ["guided_step"], "workload.steps" = 3, "transformer.attention_impl" = "blocked" }
[[variants]]
name = "bigger"
overrides = { "workload.height" = 128 }
[[variants]]
name = "text-only"
overrides = { "workload.stages" = ["text_encode"], "workload.steps" = 3 }
"""
    )
    refs = {v.name: v.reference for v in load_sweep(_write(tmp_path, text)).variants}
    assert refs == {
        "first": None,
        "ref": None,
        "knob": "ref",
        "other": "first",
        "declared": "knob",
        "bigger": None,
        "text-only": None,  # the same sizes, but no stage in common with any variant before it
    }
    # and a variant that runs only the text stage is nobody's reference (it came first in nightly.toml)
    text_first = '[[variants]]\nname = "text"\noverrides = { "workload.stages" = ["text_encode"] }\n'
    first = text.replace('[[variants]]\nname = "first"\n', text_first + '[[variants]]\nname = "first"\n', 1)
    refs = {v.name: v.reference for v in load_sweep(_write(tmp_path, first)).variants}
    assert refs["text"] is None and refs["first"] is None and refs["other"] == "first"
