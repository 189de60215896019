"""The deterministic gate of a compile-only target: per-scope metrics, predicted metrics gated under
the same model, a changed model reported apart (exit 3), the spec's and program's fingerprints."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest

from harness import cli
from harness.metrics.timeline import spec_for
from harness.metrics.timeline.identity import SIMULATOR_VERSION, identity, program_fingerprint, spec_identity
from harness.metrics.timeline.specs import Constant
from harness.plan.manifest import Gate
from harness.results import gate
from harness.results.compare import flatten_record
from tests.harness.fixtures import synthetic

STAGE = "denoise_step"
SCOPES = {
    "transformer/attn1/rope": {"bytes": 3.0e8, "flops": 0.0, "collectives": {}},
    "transformer/attn1/qkv": {
        "bytes": 5.0e9,
        "flops": 7.5e12,
        "collectives": {"all-gather": {"count": 48.0, "bytes": 1.2e9}},
    },
    "": {"bytes": 1.0e9, "flops": 0.0, "collectives": {}},
}


def tpu_record(*, model: str = "abc", program: str = "p1", deterministic: bool = True) -> dict:
    """A compile-only TPU stage as the worker records it: static with attribution, predicted with identity."""
    predicted = synthetic.predicted(0.100)
    predicted["critical_by_scope_ns"] = {"transformer/attn1/rope": 1.0e5, "transformer/attn1/qkv": 8.0e6, "": 2.0e7}
    predicted["identity"] = {
        "spec": model,
        "simulator_version": SIMULATOR_VERSION,
        "program": program,
        "deterministic": deterministic,
    }
    static = {
        "collectives": {"by_kind": {"all-gather": {"count": 48, "operand_bytes": 1.2e9, "result_bytes": 4.8e9}}},
        "memory": {"peak_bytes": 19_000_000_000},
        "cost": {"flops": 1.0e12},
        "matmul_flops": 5.0e13,
        "memory_traffic_bytes": 7.0e10,
        "attribution": {"by_scope": copy.deepcopy(SCOPES)},
    }
    return synthetic.minimal("v6e-best", {STAGE: {"static": static, "predicted": predicted}})


def run_gate(base: dict, head: dict) -> gate.GateResult:
    return gate.evaluate(synthetic.records([base]), synthetic.records([head]), Gate(), timings="off")


def test_a_compile_only_stage_flattens_to_scoped_and_predicted_metrics():
    flat = {m: v for (_, m), v in flatten_record(synthetic.records([tpu_record()])[0]).items()}
    assert flat["traffic.hbm_bytes"].value == 7.0e10 and flat["cost.matmul_flops"].value == 5.0e13
    assert flat["scope.transformer/attn1/rope.traffic_bytes"].value == 3.0e8
    assert flat["scope.transformer/attn1/qkv.collectives.all-gather.count"].value == 48
    assert flat["scope.(unattributed).traffic_bytes"].value == 1.0e9
    assert "scope.transformer/attn1/rope.flops" not in flat  # zeros are implied, not stored
    assert flat["predicted.scope.transformer/attn1/qkv.time_s"].value == pytest.approx(8.0e-3)
    assert flat["predicted.step_s"].model == f"abc/v{SIMULATOR_VERSION}" and flat["predicted.step_s"].program == "p1"


def test_the_same_program_and_model_passes_with_every_predicted_metric_gated():
    result = run_gate(tpu_record(), tpu_record())
    assert result.exit_code == gate.CLEAN
    predicted = [c for c in result.comparisons.comparisons if c.metric.startswith("predicted.")]
    assert len(predicted) == 7 and all(c.gated and c.verdict == "unchanged" for c in predicted)


def test_a_two_percent_slower_predicted_step_and_scope_fail_naming_them():
    head = tpu_record(program="p2")
    p = head["stages"][STAGE]["predicted"]
    p["step_s"] *= 1.02
    p["critical_by_scope_ns"]["transformer/attn1/rope"] *= 1.02
    result = run_gate(tpu_record(), head)
    assert result.exit_code == gate.REGRESSION
    assert {c.metric for c in result.failures} == {"predicted.step_s", "predicted.scope.transformer/attn1/rope.time_s"}
    assert any("predicted.scope.transformer/attn1/rope.time_s" in line for line in result.lines())


def test_more_traffic_or_a_new_collective_in_one_scope_fails_naming_the_scope():
    head = tpu_record(program="p2")
    scopes = head["stages"][STAGE]["static"]["attribution"]["by_scope"]
    scopes["transformer/attn1/rope"]["bytes"] *= 1.5
    scopes["transformer/attn1/rope"]["collectives"] = {"all-reduce": {"count": 1.0, "bytes": 1024.0}}
    failed = {c.metric for c in run_gate(tpu_record(), head).failures}
    assert failed == {
        "scope.transformer/attn1/rope.traffic_bytes",
        "scope.transformer/attn1/rope.collectives.all-reduce.count",  # 0 in the baseline (implied)
        "scope.transformer/attn1/rope.collectives.all-reduce.bytes",
    }


def test_a_changed_model_exits_3_and_is_never_a_regression():
    head = tpu_record(model="def")
    head["stages"][STAGE]["predicted"]["step_s"] *= 1.5
    result = run_gate(tpu_record(), head)
    assert result.exit_code == gate.MODEL_CHANGED and not result.failures
    text = "\n".join(result.lines())
    assert (
        f"MODEL CHANGED  v6e-best denoise_step: the model changed (abc/v{SIMULATOR_VERSION} -> def/v{SIMULATOR_VERSION}"
        in text
    )
    assert "python -m harness baseline update" in text and "(exit 3)" in text
    assert all(not c.gated for c in result.comparisons.comparisons if c.metric.startswith("predicted."))


def test_the_same_program_priced_differently_under_the_same_model_is_a_model_change():
    head = tpu_record()  # same spec, version and program fingerprint
    head["stages"][STAGE]["predicted"]["step_s"] *= 0.9  # faster, so no regression could catch it
    result = run_gate(tpu_record(), head)
    assert result.exit_code == gate.MODEL_CHANGED
    assert "without SIMULATOR_VERSION being bumped" in "\n".join(result.lines())


def test_a_regression_beside_a_model_change_exits_1_and_says_both():
    head = tpu_record(model="def", program="p2")
    head["stages"][STAGE]["static"]["attribution"]["by_scope"]["transformer/attn1/rope"]["bytes"] *= 2
    result = run_gate(tpu_record(), head)
    assert result.exit_code == gate.REGRESSION and [c.metric for c in result.failures] == [
        "scope.transformer/attn1/rope.traffic_bytes"
    ]
    assert any(line.startswith("MODEL CHANGED") for line in result.lines())


def test_a_static_metric_that_moved_for_the_same_program_is_a_model_change():
    """Measured: the same v6e program (one fingerprint) read 1.7 % more HBM traffic after the harness's
    traffic count changed; that is the harness, not the program."""
    head = tpu_record()  # the same program fingerprint
    head["stages"][STAGE]["static"]["memory_traffic_bytes"] *= 1.017
    result = run_gate(tpu_record(), head)
    assert result.exit_code == gate.MODEL_CHANGED and not result.failures
    assert "the same program (p1) measured differently" in "\n".join(result.lines())
    head["stages"][STAGE]["predicted"]["identity"]["program"] = "p2"  # another program: a regression
    assert [c.metric for c in run_gate(tpu_record(), head).failures] == ["traffic.hbm_bytes"]


def test_predictions_from_constants_measured_for_the_sweep_are_shown_not_gated():
    base, head = tpu_record(deterministic=False), tpu_record(deterministic=False, program="p2")
    head["stages"][STAGE]["predicted"]["step_s"] *= 1.5
    result = run_gate(base, head)
    assert result.exit_code == gate.CLEAN
    step = next(c for c in result.comparisons.comparisons if c.metric == "predicted.step_s")
    assert not step.gated and "measured for the sweep" in step.detail


def test_a_prediction_that_lost_its_identity_is_a_model_change():
    result = run_gate(tpu_record(), tpu_record(deterministic=False))
    assert result.exit_code == gate.MODEL_CHANGED
    step = next(c for c in result.comparisons.comparisons if c.metric == "predicted.step_s")
    assert step.model_changed.startswith(f"the model changed (abc/v{SIMULATOR_VERSION} -> ") and not step.gated


def test_spec_identity_covers_the_numbers_not_the_prose():
    spec = spec_for("v6e:2x4", "tpu")
    same = dataclasses.replace(spec, name="renamed", notes=("a note",))
    c = spec.constants["hbm_bytes_per_s"]
    cited = dataclasses.replace(
        spec, constants={**spec.constants, "hbm_bytes_per_s": dataclasses.replace(c, source="x")}
    )
    faster = dataclasses.replace(
        spec, constants={**spec.constants, "hbm_bytes_per_s": Constant(c.value * 1.01, c.unit, c.source)}
    )
    assert spec_identity(spec) == spec_identity(same) == spec_identity(cited) != spec_identity(faster)
    assert spec_identity(spec) != spec_identity(spec_for("tpu7x:2x2x1", "tpu"))
    ident = identity(spec, "HloModule m", deterministic=True)
    assert ident == {
        "spec": spec_identity(spec),
        "simulator_version": SIMULATOR_VERSION,
        "program": program_fingerprint("HloModule m"),
        "deterministic": True,
    }


def test_the_program_fingerprint_ignores_where_the_program_came_from_only():
    """Metadata and the module's source tables (paths, lines) are left out: the same program compiled from
    another checkout (measured: MaxDiffusion's loop from two trees, docs/gates.md) has one fingerprint."""
    head = 'HloModule jit_step, is_scheduled=true\n\nFileNames\n1 "{tree}/ltx2/rope.py"\n\nFileLocations\n'
    head += "1 {{file_name_id=1 line={line}}}\n\nENTRY %main {{\n"
    op = "  %add.1 = {t}[4]{{0}} add({t}[4]{{0}} %x, {t}[4]{{0}} %y), "
    op += 'metadata={{op_name="jit(f)/add" source_line={line}}}\n}}'

    def program(tree: str, line: int, t: str = "f32") -> str:
        return head.format(tree=tree, line=line) + op.format(t=t, line=line)

    a, b = program("/work/a", 12), program("/tmp/b", 40)
    assert a != b and program_fingerprint(a) == program_fingerprint(b) != program_fingerprint(
        program("/work/a", 12, "bf16")
    )


MANIFEST = """
schema_version = 1
[target]
platform = "cpu"
devices = 1
mesh = { data = 1 }
[model]
preset = "test:ok"
[run]
repeats = 1
warmup = 0
timeout_s = 60
metrics = ["static"]
[gate]
baseline = "BASELINE"
[[variants]]
name = "a"
[[variants]]
name = "b"
overrides = { "test.run_s" = 0.002 }
"""


def test_baseline_update_of_a_manifest_runs_it_and_writes_where_its_gate_reads(tmp_path, capsys):
    """One command re-baselines: `harness baseline update <manifest>`; the gate then passes."""
    baseline = tmp_path / "baselines" / "m.jsonl"
    manifest = tmp_path / "m.toml"
    manifest.write_text(MANIFEST.replace("BASELINE", str(baseline)))
    reports = str(tmp_path / "r")
    assert cli.main(["baseline", "update", str(manifest), "--reports", reports]) == 0
    assert f"wrote {baseline}: 2 variants" in capsys.readouterr().out
    names = [json.loads(line)["variant"]["name"] for line in baseline.read_text().splitlines()]
    assert names == ["a", "b"]
    assert cli.main(["gate", str(manifest), "--reports", reports]) == 0
