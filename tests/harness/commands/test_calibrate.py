"""python -m harness calibrate on a real CPU trace: a spec file a manifest can name; a trace of
another program refused; target.spec checked where the manifest names it and used by the worker."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from harness.cli import main
from harness.metrics.measured.trace import capture_trace
from harness.plan.manifest import ManifestError, Run, Target, Workload, load_manifest
from harness.run.predicted import timeline_spec
from harness.run.spec import WorkerSpec
from tests.harness.plan.manifest_cases import BASE

SIZES = [(32 * (i + 1), 64 * (i + 1), 48 * (i + 1)) for i in range(10)]


def _program(scale: int = 1) -> tuple[str, object, list[jax.Array], list[jax.Array]]:
    def f(xs: list[jax.Array], ws: list[jax.Array]) -> list[jax.Array]:
        # sin after a dot stays an op of its own on XLA:CPU (tanh fuses into the dot): memory-class ops
        ys = [jnp.tanh(x @ w) if i % 2 == 0 else jnp.sin(x @ w) for i, (x, w) in enumerate(zip(xs, ws, strict=True))]
        return [jnp.sum(y * 2.0 + 1.0, axis=0) for y in ys]

    xs = [jnp.ones((m * scale, k), jnp.float32) for m, k, _ in SIZES]
    ws = [jnp.ones((k, n), jnp.float32) for _, k, n in SIZES]
    jf = jax.jit(f)
    return jf.lower(xs, ws).compile().as_text(), jf, xs, ws


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("calibrate")
    text, jf, xs, ws = _program()
    (folder / "prog.hlo").write_text(text)
    jax.block_until_ready(jf(xs, ws))
    with jax.profiler.trace(str(folder / "trace")):
        for _ in range(3):
            jax.block_until_ready(jf(xs, ws))
    trace = Path(glob.glob(str(folder / "trace" / "**" / "*.xplane.pb"), recursive=True)[0])
    base = folder / "base.json"
    base.write_text(
        json.dumps(
            {
                "matmul_flops_per_s": 1e10,
                "copy_bytes_per_s": 3e9,
                "op_overhead_s": 5e-6,
                "source": "measured: a test's starting point",
            }
        )
    )
    return folder / "prog.hlo", trace, base


def test_calibrate_writes_a_spec_file_from_a_trace(traced: tuple[Path, Path, Path], tmp_path: Path, capsys) -> None:
    hlo, trace, base = traced
    out = tmp_path / "fit.json"
    argv = ["calibrate", "--program", str(hlo), "--trace", str(trace), "--base", str(base), "--out", str(out)]
    assert main([*argv, "--min-ops", "5"]) == 0
    raw = json.loads(out.read_text())
    assert set(raw["fit"]) == {"matmul", "memory"} and raw["fit"]["matmul"]["n"] >= 5
    assert raw["traces"][0]["trace"] == str(trace) and len(raw["traces"][0]["fingerprint"]) == 64
    peak = raw["spec"]["constants"]["peak_flops_per_s"]
    assert peak["value"] > 0 and peak["source"].startswith("fitted: 1 trace(s)")
    assert raw["weighting"] == "count" and "Theil-Sen fit" in peak["source"]
    assert "link_bytes_per_s and collective_latency_s from the base spec" in capsys.readouterr().out
    # the slopes weighted by time: named in the file and each source
    timed = tmp_path / "time.json"
    assert main([*argv[:-1], str(timed), "--min-ops", "5", "--weighting", "time"]) == 0
    raw_time = json.loads(timed.read_text())
    assert raw_time["weighting"] == "time"
    assert "time-weighted fit" in raw_time["spec"]["constants"]["peak_flops_per_s"]["source"]
    with pytest.raises(SystemExit) as refused:  # argparse refuses another weighting
        main([*argv, "--min-ops", "5", "--weighting", "mean"])
    assert refused.value.code == 2
    # too few ops of a class: refused, naming it
    assert main([*argv, "--min-ops", "500"]) == 2
    assert "too few instructions to fit (need 500 per class): matmul (" in capsys.readouterr().err


def test_a_trace_of_another_program_is_refused(traced: tuple[Path, Path, Path], tmp_path: Path, capsys) -> None:
    _, trace, base = traced
    other = tmp_path / "other.hlo"
    other.write_text(_program(scale=2)[0])  # the same code at other sizes: another compile
    argv = ["calibrate", "--program", str(other), "--trace", str(trace), "--base", str(base)]
    assert main([*argv, "--out", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert "compiled differently" in err or "not a trace of this program" in err
    assert not (tmp_path / "x.json").exists()


def test_a_manifest_names_a_spec_file_and_the_worker_prices_on_it(
    traced: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    hlo, trace, base = traced
    out = tmp_path / "fit.json"
    argv = ["--program", str(hlo), "--trace", str(trace), "--base", str(base), "--out", str(out)]
    assert main(["calibrate", *argv, "--min-ops", "5"]) == 0
    manifest = tmp_path / "m.toml"
    manifest.write_text(BASE.replace("devices = 8", f"devices = 8\nspec = {json.dumps(str(out))}"))
    parsed = load_manifest(manifest).target
    assert parsed.spec == str(out) and parsed.to_dict()["spec"] == str(out)
    assert "spec" not in Target().to_dict()  # unset: records as before
    target = Target("cpu", "measure", (("data", 1),), None, 1, spec=str(out))
    spec = WorkerSpec("v", "v", "tiny", {}, target, "measure", Workload(), Run(), str(tmp_path / "traces" / "v"))
    tl, calibration = timeline_spec(spec, [])
    fitted = json.loads(out.read_text())["spec"]["constants"]["peak_flops_per_s"]["value"]
    assert calibration is None and tl.value("peak_flops_per_s") == fitted
    assert tl.notes[-1] == f"calibrated spec file: {out}"

    manifest.write_text(BASE.replace("devices = 8", 'devices = 8\nspec = "no/such/fit.json"'))
    with pytest.raises(ManifestError) as info:
        load_manifest(manifest)
    assert info.value.key == "target.spec" and info.value.line is not None
    assert "cannot read spec file 'no/such/fit.json'" in info.value.reason
    (tmp_path / "bad.json").write_text('{"spec": {"constants": {}}}')
    manifest.write_text(BASE.replace("devices = 8", f"devices = 8\nspec = {json.dumps(str(tmp_path / 'bad.json'))}"))
    with pytest.raises(ManifestError, match="not a calibrated spec file"):
        load_manifest(manifest)


def test_a_shared_cpu_base_turns_the_fitted_per_op_speeds_into_shared_ones(
    traced: tuple[Path, Path, Path], tmp_path: Path, capsys
) -> None:
    """A base measured with 8 devices on 2 cores (per-device rates the same as the one-device base's,
    so the same instructions fall in each class): the written spec is the one-device fit times the
    base's measured sharing (rates x 0.5, the overhead x 2), on 8 devices."""
    hlo, trace, base = traced
    alone_out, shared_out, shared_base = tmp_path / "alone.json", tmp_path / "shared.json", tmp_path / "8dev.json"
    raw = json.loads(base.read_text())
    single = {"matmul_flops_per_s": 2e10, "copy_bytes_per_s": 6e9, "op_overhead_s": 2.5e-6}
    shared_base.write_text(json.dumps({**raw, "devices": 8, "cores": 2, "single": single}))
    argv = ["calibrate", "--program", str(hlo), "--trace", str(trace), "--min-ops", "5"]
    assert main([*argv, "--base", str(base), "--out", str(alone_out)]) == 0
    assert main([*argv, "--base", str(shared_base), "--out", str(shared_out)]) == 0
    alone = json.loads(alone_out.read_text())["spec"]["constants"]
    written = json.loads(shared_out.read_text())
    shared = written["spec"]["constants"]
    for name, ratio in (("peak_flops_per_s", 0.5), ("hbm_bytes_per_s", 0.5), ("op_overhead_s", 2.0)):
        assert shared[name]["value"] == pytest.approx(alone[name]["value"] * ratio, rel=1e-12)
        assert f"x {ratio:.4g}, its 8-devices-at-once / one-device ratio measured on 2 cores" in shared[name]["source"]
    assert len(written["spec"]["topology"]["device_coords"]) == 8
    assert "shared by 8 devices on 2 cores: the ratio from the base's micro-benchmarks" in written["notes"][-1]
    # a shared base without its one-device values cannot be turned: refused, naming the file
    shared_base.write_text(json.dumps({**raw, "devices": 8, "cores": 2}))
    assert main([*argv, "--base", str(shared_base), "--out", str(tmp_path / "x.json")]) == 2
    assert f"{shared_base}: no one-device value single.matmul_flops_per_s" in capsys.readouterr().err


def test_traces_with_step_windows_give_the_sharing_ratio(
    traced: tuple[Path, Path, Path], tmp_path: Path, capsys
) -> None:
    """A trace captured as the sweep captures it (step annotations): the written spec shares the fitted
    per-op speeds by the fitted spec's predicted step over the traced step's wall (both recorded in
    the file), not by the micro-benchmarks."""
    hlo, _, base = traced
    _, jf, xs, ws = _program()
    jax.block_until_ready(jf(xs, ws))
    trace = capture_trace(lambda: jf(xs, ws), tmp_path / "steps", steps=3)
    raw = json.loads(base.read_text())
    single = {"matmul_flops_per_s": 2e10, "copy_bytes_per_s": 6e9, "op_overhead_s": 2.5e-6}
    (tmp_path / "8dev.json").write_text(json.dumps({**raw, "devices": 8, "cores": 2, "single": single}))
    argv = ["calibrate", "--program", str(hlo), "--trace", str(trace), "--min-ops", "5"]
    assert main([*argv, "--base", str(base), "--out", str(tmp_path / "alone.json")]) == 0
    assert main([*argv, "--base", str(tmp_path / "8dev.json"), "--out", str(tmp_path / "shared.json")]) == 0
    alone = json.loads((tmp_path / "alone.json").read_text())["spec"]["constants"]
    written = json.loads((tmp_path / "shared.json").read_text())
    step = written["traces"][0]["step"]
    assert step["steps"] == 3 and step["busy_ns"] > 0 and step["wall_ns"] > 0  # independent ops may overlap
    ratio = step["fitted_pred_ns"] / step["wall_ns"]
    assert ratio > 0
    constants = written["spec"]["constants"]
    assert constants["peak_flops_per_s"]["value"] == pytest.approx(alone["peak_flops_per_s"]["value"] * ratio)
    assert constants["op_overhead_s"]["value"] == pytest.approx(alone["op_overhead_s"]["value"] / ratio)
    how = "the fitted spec's predicted step / the traced step's wall, median over 1 traced program(s)"
    assert f"{how} (8 devices on 2 cores)" in constants["hbm_bytes_per_s"]["source"]
    assert f"the ratio from the traces' steps ({ratio:.4g})" in written["notes"][-1]
