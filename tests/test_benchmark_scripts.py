"""The benchmark scripts under benchmarks/: gpu_step.py on CPU at the tiny preset: argument checks, workload and FLOP
arithmetic, and one end-to-end run of ours and diffusers eager (torch.compile needs a C++
toolchain and minutes of inductor time on CPU: not run here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_step.py"


def _load():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_step", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_step"] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def test_full_size_workload_and_flops() -> None:
    gpu = _load()
    args = gpu.parse_args([])
    w = gpu.workload(args)
    assert (w.grid, w.video_tokens, w.audio_frames, w.text_tokens) == ((16, 16, 24), 6144, 126, 1024)
    from ltx2.config import TransformerConfig

    assert gpu.step_flops(args) == TransformerConfig.ltx2_19b().forward_flops(6144, 126, 1024, batch_size=2)
    achieved, util = gpu.mfu(989 * 10**12, 2.0, 989.0)
    assert achieved == pytest.approx(494.5) and util == pytest.approx(0.5)
    assert gpu.mfu(10**12, 1.0, None) == (1.0, None)


@pytest.mark.parametrize(
    "argv", [["--impls", "jax,tensorrt"], ["--rounds", "0"], ["--dtype", "float16"], ["--preset", "huge"]]
)
def test_bad_arguments_exit_with_usage(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        _load().parse_args(argv)
    assert e.value.code == 2


def test_bad_grid_is_refused() -> None:
    gpu = _load()
    with pytest.raises(ValueError, match="multiples of 32"):
        _ = gpu.workload(gpu.parse_args(["--height", "500"])).grid


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
