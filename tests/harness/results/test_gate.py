"""The perf gate: calibration on synthetic runs (seeded lognormal noise), exit codes, CLI."""

from __future__ import annotations

import copy
import json
import shlex
import shutil
from pathlib import Path

import pytest

from harness import cli
from harness.commands import gate as gate_command
from harness.plan.manifest import Gate
from harness.results import gate
from tests.harness.fixtures import synthetic

FIXTURES = Path(__file__).parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[3]
STEP = ("trillium-loop", "denoise_step")
AA_REPEATS = 20


def evaluate(base, head, *args, **kwargs):
    """The gate on synthetic runs (JSON objects the tests can edit, or records)."""
    return gate.evaluate(synthetic.records(base), synthetic.records(head), *args, **kwargs)


def pool(runs):
    return gate.pool_rounds([synthetic.records(r) for r in runs])


@pytest.fixture(scope="module")
def template():
    return synthetic.ok_template()


def aa_pair(template, i, **kw):
    return synthetic.synthetic_run(100 + 2 * i, template, **kw), synthetic.synthetic_run(101 + 2 * i, template, **kw)


# --------------------------------------------------------------------------- calibration


def test_aa_runs_pass(template):
    """The same code twice (5 % lognormal jitter, 12 samples): no false positive in 20 gate runs."""
    codes = [evaluate(*aa_pair(template, i)).exit_code for i in range(AA_REPEATS)]
    assert codes.count(gate.REGRESSION) == 0 and codes.count(gate.ERROR) == 0


def test_slowdown_of_25_percent_in_one_stage_fails_with_a_readable_line(template):
    base = synthetic.synthetic_run(1, template)
    head = synthetic.synthetic_run(2, template, slowdown={STEP: 1.25})
    result = evaluate(base, head)
    assert result.exit_code == gate.REGRESSION
    assert [(c.variant, c.stage, c.metric) for c in result.failures] == [(*STEP, "time")]
    line = result.lines()[0]
    assert line.startswith("REGRESSED  trillium-loop  denoise_step  time: baseline ")
    assert " ms, now " in line and "ratio 1.2" in line and "< 0.05" in line
    assert "Mann-Whitney (pairs of calls) p=" in line
    assert result.lines()[-1].startswith("gate FAILED: regression: 1 regressed, 0 problems")


def test_one_extra_all_gather_in_the_denoise_step_fails(template):
    base = synthetic.synthetic_run(1, template)
    head = synthetic.synthetic_run(2, template, extra={STEP: {"all-gather": 1}})
    result = evaluate(base, head)
    assert result.exit_code == gate.REGRESSION
    lines = [ln for ln in result.lines() if ln.startswith("REGRESSED")]
    assert (
        "REGRESSED  trillium-loop  denoise_step  collectives.all-gather.count: baseline 38, now 39, "
        "ratio 1.026x; must match exactly"
    ) in lines
    assert not any(" time:" in ln for ln in lines)


def test_detection_power_with_default_settings(template):
    """Defaults (ratio 1.10, alpha 0.05), 12 samples, 5 % jitter: a 15 % slowdown is caught in
    at least 19 of 20 runs; a real but small 5 % one only when noise pushes its measured ratio
    past the threshold (a few percent of runs)."""

    def caught(factor, i):
        base = synthetic.synthetic_run(500 + 2 * i, template)
        head = synthetic.synthetic_run(501 + 2 * i, template, slowdown={("naive", "denoise_step"): factor})
        return any(c.variant == "naive" and c.metric == "time" for c in evaluate(base, head).failures)

    assert sum(caught(1.15, i) for i in range(20)) >= 19
    assert sum(caught(1.05, i) for i in range(20)) <= 3


def test_recompile_increase_fails_whatever_the_tolerance(template):
    base = synthetic.synthetic_run(1, template)
    head = copy.deepcopy(base)
    head[0]["stages"]["denoise_step"]["measured"]["recompiles"]["count"] = 1
    result = evaluate(base, head, Gate(tolerances={"measured.recompiles": 5.0}))
    assert result.exit_code == gate.REGRESSION
    assert result.failures[0].metric == "recompiles" and "any increase fails" in result.lines()[0]


def test_memory_tolerance_comes_from_the_manifest(template):
    base = synthetic.synthetic_run(1, template)
    head = copy.deepcopy(base)
    head[0]["stages"]["denoise_step"]["static"]["memory"]["temp_bytes"] *= 1.04
    assert evaluate(base, head).exit_code == gate.REGRESSION  # default 2 %
    assert evaluate(base, head, Gate(tolerances={"static.memory": 0.05})).exit_code == gate.CLEAN


def test_improvements_pass(template):
    base = synthetic.synthetic_run(1, template)
    head = synthetic.synthetic_run(2, template, slowdown={STEP: 0.6})
    result = evaluate(base, head)
    assert result.exit_code == gate.CLEAN
    assert any(c.verdict == "improved" for c in result.comparisons.comparisons)


# --------------------------------------------------------------------------- could not run


def test_failed_variant_exits_2_even_with_a_regression(template):
    base = synthetic.synthetic_run(1, template)
    head = synthetic.failed(synthetic.synthetic_run(2, template, slowdown={STEP: 1.5}), "naive")
    result = evaluate(base, head)
    assert result.exit_code == gate.ERROR
    assert result.problems == ["variant naive failed: RuntimeError: boom"]
    assert any(ln.startswith("REGRESSED  trillium-loop") for ln in result.lines())  # still reported


@pytest.mark.parametrize("change", ["dropped", "renamed-settings", "too-few-samples", "lost-metric"])
def test_incomplete_comparisons_exit_2(template, change):
    base = synthetic.synthetic_run(1, template)
    head = synthetic.synthetic_run(2, template, n=3 if change == "too-few-samples" else 12)
    if change == "too-few-samples":
        base = synthetic.synthetic_run(1, template, n=3)
    if change == "dropped":
        head = head[1:]
    if change == "renamed-settings":
        head[0]["variant"]["id"] = "ffffffffffff"
    if change == "lost-metric":
        head[0]["stages"]["denoise_step"]["static"]["cost"] = None
    result = evaluate(base, head)
    assert result.exit_code == gate.ERROR
    expected = {
        "dropped": "is in the baseline but not in this run",
        "renamed-settings": "changed settings",
        "too-few-samples": "can never reach p < 0.05; need >= 8 repeats",
        "lost-metric": "in the baseline, missing from this run",
    }[change]
    assert any(expected in p for p in result.problems)


def test_different_machine_gates_only_deterministic_metrics(template):
    base = synthetic.synthetic_run(1, template)
    head = synthetic.synthetic_run(2, template, slowdown={STEP: 1.5})
    for r in head:
        r["machine"]["cpu"] = "Some Other CPU"
    result = evaluate(base, head)
    assert result.exit_code == gate.CLEAN and not result.timings_gated
    assert any("different machines" in n for n in result.notes)
    assert evaluate(base, head, timings="on").exit_code == gate.REGRESSION


# --------------------------------------------------------------------------- command line


def write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture
def workspace(tmp_path, template):
    """A manifest, a committed baseline for it (via `baseline update`) and a fresh run."""
    manifest = shutil.copy(FIXTURES / "sweep_cpu8.toml", tmp_path / "nightly.toml")
    base = write_jsonl(tmp_path / "base" / "results.jsonl", synthetic.synthetic_run(1, template))
    baselines = tmp_path / "baselines"
    assert cli.main(["baseline", "update", str(base), "--manifest", str(manifest), "--dir", str(baselines)]) == 0
    assert (baselines / "nightly-cpu-8dev.json").exists()
    return tmp_path, manifest, baselines


def gate_cli(manifest, results, baselines, *extra):
    return cli.main(["gate", str(manifest), "--results", str(results), "--baselines-dir", str(baselines), *extra])


def test_cli_clean_run_exits_0_and_writes_the_report(workspace, template, capsys):
    tmp, manifest, baselines = workspace
    head = write_jsonl(tmp / "head" / "results.jsonl", synthetic.synthetic_run(2, template))
    assert gate_cli(manifest, head, baselines) == 0
    out = capsys.readouterr().out
    assert "gate passed: 0 regressed, 0 problems" in out
    assert (tmp / "head" / "index.html").exists() and (tmp / "head" / "results.csv").exists()
    assert json.loads((tmp / "head" / "gate.json").read_text())["exit_code"] == 0


def test_cli_regression_exits_1_with_one_line_per_metric(workspace, template, capsys):
    tmp, manifest, baselines = workspace
    head = write_jsonl(
        tmp / "head" / "results.jsonl",
        synthetic.synthetic_run(2, template, slowdown={STEP: 1.25}, extra={STEP: {"all-gather": 1}}),
    )
    assert gate_cli(manifest, head, baselines) == 1
    out = capsys.readouterr().out
    failing = [ln for ln in out.splitlines() if ln.startswith("REGRESSED")]
    assert any("trillium-loop  denoise_step  time: baseline" in ln for ln in failing)
    assert any("collectives.all-gather.count: baseline 38, now 39" in ln for ln in failing)
    assert "gate FAILED: regression" in out
    report = (tmp / "head" / "index.html").read_text()
    assert 'class="verdict verdict-regressed"' in report
    failures = json.loads((tmp / "head" / "gate.json").read_text())["failures"]
    assert {f["metric"] for f in failures} >= {"time", "collectives.all-gather.count"}


def test_cli_failed_variant_exits_2(workspace, template, capsys):
    tmp, manifest, baselines = workspace
    head = write_jsonl(tmp / "head" / "results.jsonl", synthetic.failed(synthetic.synthetic_run(2, template), "naive"))
    assert gate_cli(manifest, head, baselines) == 2
    assert "GATE ERROR  variant naive failed" in capsys.readouterr().out


def test_cli_missing_baseline_exits_2(workspace, template, capsys):
    tmp, manifest, _ = workspace
    head = write_jsonl(tmp / "head" / "results.jsonl", synthetic.synthetic_run(2, template))
    assert gate_cli(manifest, head, tmp / "no-baselines") == 2
    err = capsys.readouterr().err
    assert "no baseline at" in err and "baseline update" in err


def test_cli_missing_baseline_hint_works_when_pasted(workspace, template, capsys):
    tmp, manifest, _ = workspace
    head = write_jsonl(tmp / "head" / "results.jsonl", synthetic.synthetic_run(2, template))
    empty = tmp / "no-baselines"
    assert gate_cli(manifest, head, empty) == 2
    err = capsys.readouterr().err
    (command,) = [line.strip() for line in err.splitlines() if line.startswith("  python -m harness")]
    argv = shlex.split(command)
    assert argv[:4] == ["python", "-m", "harness", "baseline"]
    assert cli.main(argv[3:]) == 0  # pasted: writes the file the gate reads
    assert gate_cli(manifest, head, empty) == 0


def test_the_hint_without_results_runs_the_manifest_first(tmp_path):
    args = cli.parser().parse_args(["gate", "experiments/nightly.toml", "--reports", str(tmp_path / "r")])
    hint = gate_command.missing_baseline(args, Path("reports/baselines/nightly.jsonl"))
    sweep, update = hint.splitlines()[1].strip().split(" && ")
    assert shlex.split(sweep)[3:] == [
        "sweep",
        "experiments/nightly.toml",
        "--reports",
        str(tmp_path / "r"),
        "--sweep-id",
        "nightly-gate",
    ]
    assert shlex.split(update)[3:] == [
        "baseline",
        "update",
        str(tmp_path / "r" / "nightly-gate" / "results.jsonl"),
        "--manifest",
        "experiments/nightly.toml",
        "--out",
        "reports/baselines/nightly.jsonl",
    ]
    for step in (sweep, update):
        cli.parser().parse_args(shlex.split(step)[3:])  # both are commands this CLI takes


def test_cli_gating_a_committed_file_writes_nothing_next_to_it(workspace, template, capsys):
    tmp, manifest, baselines = workspace
    committed = write_jsonl(tmp / "reports" / "baselines" / "nightly.jsonl", synthetic.synthetic_run(2, template))
    assert gate_cli(manifest, committed, baselines, "--reports", str(tmp / "reports")) == 0
    assert sorted(p.name for p in committed.parent.iterdir()) == ["nightly.jsonl"]
    assert {p.name for p in (tmp / "reports" / "nightly-gate").iterdir()} >= {"index.html", "results.csv", "gate.json"}
    assert cli.main(["report", str(committed), "--reports", str(tmp / "reports")]) == 0
    assert sorted(p.name for p in committed.parent.iterdir()) == ["nightly.jsonl"]
    assert (tmp / "reports" / "nightly-report" / "index.html").exists()


def test_cli_bad_manifest_exits_2(workspace, template, capsys):
    tmp, manifest, baselines = workspace
    bad = tmp / "bad.toml"
    bad.write_text(manifest.read_text().replace("timing_ratio = 1.10", "timing_ratio = 0.5"))
    head = write_jsonl(tmp / "head" / "results.jsonl", synthetic.synthetic_run(2, template))
    assert gate_cli(bad, head, baselines) == 2
    assert "timing_ratio" in capsys.readouterr().err


def test_cli_baseline_of_another_backend_exits_2(workspace, template, capsys):
    tmp, manifest, baselines = workspace
    other = tmp / "other.toml"
    other.write_text(manifest.read_text().replace("devices = 8", "devices = 4").replace("data = 2, ", ""))
    shutil.copy(baselines / "nightly-cpu-8dev.json", baselines / "other-cpu-4dev.json")
    head = write_jsonl(tmp / "head" / "results.jsonl", synthetic.synthetic_run(2, template))
    assert gate_cli(other, head, baselines) == 2
    assert "is for cpu-8dev, this manifest targets cpu-4dev" in capsys.readouterr().out


def test_cli_internal_error_is_2_not_1(workspace, template, monkeypatch, capsys):
    tmp, manifest, baselines = workspace
    head = write_jsonl(tmp / "head" / "results.jsonl", synthetic.synthetic_run(2, template))

    def broken(*args, **kwargs):
        raise ZeroDivisionError("bug in the gate")

    monkeypatch.setattr(gate, "evaluate", broken)
    assert gate_cli(manifest, head, baselines) == 2
    assert "internal error" in capsys.readouterr().err


# --------------------------------------------------------------------------- CI workflow


def test_nightly_workflow_runs_the_gate_and_keeps_the_report():
    yaml = pytest.importorskip("yaml")
    wf = yaml.safe_load((REPO / ".github" / "workflows" / "nightly.yml").read_text())
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert triggers["schedule"][0]["cron"] and "workflow_dispatch" in triggers
    steps = wf["jobs"]["gate"]["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@")
    assert steps[1]["uses"].startswith("actions/setup-python@") and steps[1]["with"]["python-version"] == "3.11"
    runs = [s.get("run") for s in steps]
    assert any((r or "").startswith('pip install "nox==') for r in runs)
    assert any("nox -s gate -- experiments/nightly.toml" in (r or "") for r in runs)
    assert steps[0]["with"]["fetch-depth"] == 0  # bisect reaches back to the baseline's commit
    assert any("nox -s gate -- experiments/nightly-tpu.toml" in (r or "") for r in runs)
    bisect, bisect_tpu = [s for s in steps if "harness bisect" in (s.get("run") or "")]
    assert bisect["if"] == "failure() && steps.gate.outputs.exit_code == '1'"
    assert "--from-gate reports/nightly-gate/gate.json" in bisect["run"] and "bisect baseline HEAD" in bisect["run"]
    assert bisect_tpu["if"] == "failure() && steps.gate_tpu.outputs.exit_code == '1'"
    assert "--manifest experiments/nightly-tpu.toml --from-gate reports/nightly-tpu-gate/gate.json" in bisect_tpu["run"]
    (readme_job,) = [s for s in steps if (s.get("run") or "").strip() == "nox -s sweep"]  # the README's main job
    assert readme_job["if"] == "success() || failure()"
    upload = steps[-1]
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["if"] == "always()"
    assert upload["with"]["path"].split()[0] == "reports/"  # the rest: test_history.py


# --------------------------------------------------------------------------- interleaved re-measurement


def test_pool_rounds_concatenates_samples_and_keeps_failures(template):
    r1, r2 = synthetic.synthetic_run(1, template, n=5), synthetic.synthetic_run(2, template, n=7)
    pooled = pool([r1, synthetic.failed(r2, "naive")])
    by = {r.variant.name: r.to_dict() for r in pooled}
    samples = by["trillium-loop"]["stages"]["denoise_step"]["measured"]["samples_s"]
    assert samples == (
        r1[2]["stages"]["denoise_step"]["measured"]["samples_s"]
        + r2[2]["stages"]["denoise_step"]["measured"]["samples_s"]
    )
    per_round = [r[2]["stages"]["denoise_step"]["measured"]["samples_s"] for r in (r1, r2)]
    assert by["trillium-loop"]["stages"]["denoise_step"]["measured"]["rounds_s"] == per_round
    assert by["naive"]["status"] == "failed"
    assert pool([synthetic.failed(r1, "naive"), r2])[1].status == "failed"


def test_interleaved_gate_ignores_one_busy_round_but_not_a_real_slowdown(template):
    base = pool([synthetic.synthetic_run(1, template), synthetic.synthetic_run(3, template)])
    busy = pool(
        [
            synthetic.synthetic_run(2, template, run_sigma=0.0, slowdown={STEP: 1.8}),
            synthetic.synthetic_run(4, template),
        ]
    )
    result = evaluate(base, busy)
    assert result.exit_code == gate.CLEAN
    c = next(c for c in result.comparisons.comparisons if (c.variant, c.metric) == (STEP[0], "time"))
    assert c.verdict == "noise" and "(not consistent)" in c.detail
    slow = pool(
        [
            synthetic.synthetic_run(2, template, slowdown={STEP: 1.25}),
            synthetic.synthetic_run(4, template, slowdown={STEP: 1.25}),
        ]
    )
    assert evaluate(base, slow).exit_code == gate.REGRESSION


INTERLEAVED_MANIFEST = """
schema_version = 1
[target]
platform = "cpu"
devices = 1
mesh = { data = 1 }
[model]
preset = "test:ok"
[run]
repeats = 6
warmup = 1
timeout_s = 60
metrics = ["static", "measured"]
[gate]
timing_ratio = 3.0
[[variants]]
name = "sleep"
overrides = { "test.run_s" = 0.002 }
"""


def test_cli_against_a_revision_interleaves_rounds(tmp_path, capsys):
    """--against HEAD: the committed tree and this one run alternately; samples pool per side. Timings
    are not judged (``--timings off``): an A/A verdict on 6 calls a round of a 2 ms sleep has no false-
    failure rate that can be computed on a loaded machine (a burst on both of one side's rounds fires
    it), so the exit code rests on the deterministic metrics alone; the timing test is tested on seeded
    samples above."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout")
    manifest = tmp_path / "aa.toml"
    manifest.write_text(INTERLEAVED_MANIFEST)
    args = ["--against", "HEAD", "--rounds", "2", "--timings", "off", "--reports", str(tmp_path / "r")]
    code = cli.main(["gate", str(manifest), *args])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert "round 1/2 base: sleep" in captured.err and "round 2/2 head: sleep" in captured.err
    pooled = [json.loads(line) for line in (tmp_path / "r" / "aa-gate" / "results.jsonl").read_text().splitlines()]
    measured = pooled[0]["stages"]["denoise_step"]["measured"]
    assert len(measured["samples_s"]) == 12 and [len(r) for r in measured["rounds_s"]] == [6, 6]
    assert "HEAD (re-measured, 2 interleaved rounds)" in (tmp_path / "r" / "aa-gate" / "index.html").read_text()
    assert cli.main(["gate", str(manifest), "--against", "no-such-rev", "--reports", str(tmp_path / "r")]) == 2


# --------------------------------------------------------------------------- machine classes


CLASSES = ("AMD EPYC", "Intel(R) Xeon(R) Processor")
TRILLIUM = "sharding=trillium,scan_layers=true"


def _committed(name: str, folder: Path = REPO / "reports" / "baselines") -> list[dict]:
    return [json.loads(line) for line in (folder / name).read_text().splitlines() if line]


def _two_classes() -> list[dict]:  # the AMD records the CPU baseline held until issue 45, then its own
    return _committed("nightly_amd_v1.jsonl", FIXTURES) + _committed("nightly.jsonl")


def _static(record: dict) -> dict:
    (entry,) = [e for e in record["stages"].values() if e.get("static")][:1]
    return entry["static"]


def test_a_cpu_programs_metrics_are_keyed_on_the_machine_class():
    """A CPU baseline holds trillium's step per machine class: the same program's traffic was 104,734,440
    bytes compiled on AMD EPYC, 104,664,808 on Intel Xeon (88,755,432 since issue 45; tolerance 0:
    an AMD-compiled figure read against the Intel record fails, as an AMD runner did against one)."""
    base = [r for r in _two_classes() if r["variant"]["name"] == TRILLIUM]  # gated alone
    amd, intel = ([r for r in base if r["machine"]["cpu"] == c] for c in CLASSES)
    assert len(amd) == len(intel) == 1 and base.index(intel[0]) > base.index(amd[0])  # Intel's is the later
    assert [_static(r[0])["memory_traffic_bytes"] for r in (amd, intel)] == [104_734_440, 88_755_432]
    # each run is compared with its own class's record: the AMD run passes though Intel's is later and lower
    assert evaluate(base, copy.deepcopy(amd), timings="off").exit_code == gate.CLEAN
    assert evaluate(base, copy.deepcopy(intel), timings="off").exit_code == gate.CLEAN
    head = copy.deepcopy(intel)
    _static(head[0])["memory_traffic_bytes"] = 104_734_440  # AMD's figure, read on the Intel runner
    assert [c.metric for c in evaluate(base, head, timings="off").failures] == ["traffic.hbm_bytes"]
    # a third class has no record of its own: its programs' memory, traffic and cost are shown, not gated
    head = copy.deepcopy(intel)  # compared with the latest record, Intel's
    head[0]["machine"]["cpu"] = "Some Other CPU"
    _static(head[0])["memory_traffic_bytes"] *= 1.0007
    other = evaluate(base, head, timings="off")
    assert other.exit_code == gate.CLEAN and other.failures == []
    (shown,) = [c for c in other.comparisons.comparisons if c.verdict == "regressed"]
    assert shown.metric == "traffic.hbm_bytes" and not shown.gated and "other machine class" in shown.detail
    assert any("shown, not gated: other machine class (baseline Intel(R) Xeon(R) Processor" in n for n in other.notes)
    # what does not depend on the host stays gated across classes: one all-gather more fails
    _static(head[0])["collectives"]["by_kind"]["all-gather"]["count"] += 1
    caught = evaluate(base, head, timings="off")
    assert [c.metric for c in caught.failures] == ["collectives.all-gather.count", "collectives.total.count"]


def test_the_baseline_record_of_the_runs_class_is_chosen():
    base = synthetic.records(_two_classes())
    amd, intel = ([r for r in base if r.variant.name == TRILLIUM and r.machine.cpu == c] for c in CLASSES)
    for run in (amd, intel):
        chosen = [r for r in gate.for_class(base, run) if r.variant.name == TRILLIUM]
        assert chosen == run
    elsewhere = synthetic.records([{**_committed("nightly.jsonl")[0], "machine": {"cpu": "Some Other CPU"}}])
    assert len(gate.for_class(base, elsewhere)) == len({r.variant.name for r in base})


def test_a_tpu_programs_metrics_are_gated_whatever_the_host():
    base = _committed("nightly-tpu.jsonl")[:1]
    assert base[0]["target"]["platform"] == "tpu"
    head = copy.deepcopy(base)
    head[0]["machine"]["cpu"] = "Some Other CPU"
    _static(head[0])["memory_traffic_bytes"] *= 1.0007  # another program: its fingerprint differs too
    for entry in head[0]["stages"].values():
        if (entry.get("predicted") or {}).get("identity"):
            entry["predicted"]["identity"]["program"] = "another program"
    assert base[0]["machine"]["cpu"] != "Some Other CPU"
    result = evaluate(base, head, timings="off")
    assert result.exit_code == gate.REGRESSION and [c.metric for c in result.failures] == ["traffic.hbm_bytes"]
    assert not any(c.other_class for c in result.comparisons.comparisons)
