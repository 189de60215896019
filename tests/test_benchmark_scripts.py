"""The benchmark scripts under benchmarks/: gpu_step.py on CPU at the tiny preset: argument checks, workload and FLOP
arithmetic, and one end-to-end run of ours and diffusers eager (torch.compile needs a C++
toolchain and minutes of inductor time on CPU: not run here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_step
from tests.benchmarks import table

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_step.py"


def test_full_size_workload_and_flops() -> None:
    args = gpu_step.parse_args([])
    w = gpu_step.workload(args)
    assert (w.grid, w.video_tokens, w.audio_frames, w.text_tokens) == ((16, 16, 24), 6144, 126, 1024)
    from ltx2.config import TransformerConfig

    assert gpu_step.step_flops(args) == TransformerConfig.ltx2_19b().forward_flops(6144, 126, 1024, batch_size=2)
    achieved, util = gpu_step.mfu(989 * 10**12, 2.0, 989.0)
    assert achieved == pytest.approx(494.5) and util == pytest.approx(0.5)
    assert gpu_step.mfu(10**12, 1.0, None) == (1.0, None)


@pytest.mark.parametrize(
    "argv", [["--impls", "jax,tensorrt"], ["--rounds", "0"], ["--dtype", "float16"], ["--preset", "huge"]]
)
def test_bad_arguments_exit_with_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        gpu_step.parse_args(argv)
    assert e.value.code == 2


def test_bad_grid_is_refused() -> None:
    with pytest.raises(ValueError, match="multiples of 32"):
        _ = gpu_step.workload(gpu_step.parse_args(["--height", "500"])).grid


@pytest.mark.slow  # two fresh interpreters importing jax + torch + diffusers, compile: 1-3 min on 2 cores
def test_tiny_run_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "step.json"
    sizes = ["--preset", "tiny", "--frames", "9", "--height", "64", "--width", "64", "--text-tokens", "16"]
    runs = ["--dtype", "float32", "--impls", "jax,diffusers", "--rounds", "2", "--warmup", "1"]
    argv = [*sizes, *runs, "--json", str(out)]
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "grid (2, 2, 2), 8 video + 9 audio + 16 text tokens" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result["results"]) == {"jax", "diffusers"}
    for r in result["results"].values():
        assert len(r["samples_s"]) == 2 and r["median_s"] > 0 and r["mfu"] is None  # fp32 on CPU: no peak
    assert result["analytic_flops"] > 0


def test_bench_table_rates_against_the_measured_matmul_peak() -> None:
    def entry(component: str, gflop: float, jax_s: float, torch_s: float, **extra: object) -> dict:
        info = dict(
            component=component,
            preset="p",
            dtype="float32",
            analytic_gflop=gflop,
            jax_median_s=jax_s,
            torch_median_s=torch_s,
            paired_time_ratio_median=jax_s / torch_s,
            jax_trace_lower_s=0.5,
            jax_compile_s=1.0,
            jax_peak_bytes=2**20,
            torch_peak_bytes=2**21,
            torch_threads=2,
            **extra,
        )
        return {"name": component, "extra_info": info, "stats": {"rounds": 5}}

    # torch's matmul is the faster side: 17.18 GFLOP in 0.1 s -> the peak is 171.8 GFLOP/s
    matmul = entry("matmul", 17.18, 0.125, 0.1, matmul_reference="2048x2048 float32 matmul")
    rows = [matmul, entry("step", 92.0, 0.8, 0.9)]
    rate, name = table.matmul_peak(rows)
    assert rate == pytest.approx(171.8) and name == "2048x2048 float32 matmul"
    md = table.markdown_table(rows, {"cpu": {"brand_raw": "X", "count": 2}})
    step = next(line for line in md.splitlines() if line.startswith("| step"))
    assert "| 0.89 | 1.12x | 115.0 (67%) | 102.2 | 1.5 | 1.0 | 2.0 | 5 |" in step, step
    assert "Matmul peak: 171.8 GFLOP/s (the faster library's 2048x2048 float32 matmul)" in md
    assert table.matmul_peak(rows[1:]) is None  # no reference case: rates without a fraction
    assert "| 115.0 | 102.2 |" in table.markdown_table(rows[1:], {})


# ---------------------------------------------------------------------------- the guided step's scripts

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(name: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *argv], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    ("name", "argv", "says"),
    [
        ("guided_step_static", ["--variants", "old,fast"], "unknown variants ['fast']"),
        ("guided_ab", ["--variants", "default,turbo"], "unknown variants ['turbo']"),
        ("guided_ab", ["--rounds", "0"], "--rounds must be >= 1"),
    ],
)
def test_guided_scripts_refuse_bad_arguments(name: str, argv: list[str], says: str) -> None:
    done = _run(name, *argv)
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_guided_static_variants_are_the_knob_settings() -> None:
    """Both scripts read one table; its ``default`` is PipelineOptions' defaults (printed by --help)."""
    from ltx2.pipeline_config import PipelineOptions

    o = PipelineOptions()
    assert "default" in _run("guided_ab", "--help").stdout
    static = _run("guided_step_static", "--list").stdout
    assert f"default: {(o.guidance_batching, o.stg_fork, o.text_kv_cache)}" in static
    assert "old: ('sequential', False, False)" in static


@pytest.mark.slow  # a fresh interpreter compiling two tiny guided steps: ~1 min on 2 busy cores
def test_guided_static_tiny_run(tmp_path: Path) -> None:
    out = tmp_path / "static.json"
    argv = ["--preset", "tiny", "--variants", "old,default", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(BENCH / "guided_step_static.py"), *argv], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["variant"]: r for r in json.loads(out.read_text())}
    # tiny: 2 blocks, STG at block 1 -> the fork drops 1 of 8 row-blocks; the text cache all text projections.
    assert 0 < rows["default"]["matmul_flops"] < 0.9 * rows["old"]["matmul_flops"]
    assert rows["old"]["text_kv_per_video_matmul_flops"] is None and rows["default"]["text_kv_per_video_matmul_flops"]
    assert "| default | batched | True | True |" in proc.stdout
