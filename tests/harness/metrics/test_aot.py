"""Compile-only analysis: target specs, roofline, OOM results, matmul FLOPs, and (marked ``aot``, needs
the [tpu-aot] extra) real compiles for a TPU v6e 2x4 slice (the compile cache: run/test_compile_cache.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from harness import targets
from harness.families import Static
from harness.metrics.compiled.aot import analyze, oom_static, parse_oom, wire_bytes
from harness.metrics.hlo import matmul_flops, parse

REPO = Path(__file__).resolve().parents[3]
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None
needs_libtpu = pytest.mark.skipif(not HAS_LIBTPU, reason="needs the [tpu-aot] extra (libtpu): nox -s aot")
V6E = targets.SPECS["v6e"]

# libtpu's own words for a program that does not fit, as it prints them.
OOM_MESSAGE = (
    "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. "
    "Used 40.00G of 31.25G hbm. Exceeded hbm capacity by 8.75G."
)
OOM_TEMPS = (
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries "
    "(136.97G) exceeds available HBM (31.25G)."
)


# --------------------------------------------------------------------------- targets


def test_a_topology_parsed_once_counts_devices_per_chip() -> None:
    assert targets.check_topology("v6e:2x4", "tpu").devices == 8
    v7x = targets.check_topology("tpu7x:2x2x1", "tpu")
    assert (v7x.name, v7x.dims, v7x.devices, str(v7x)) == ("tpu7x", (2, 2, 1), 8, "tpu7x:2x2x1")  # 2 TensorCores
    assert targets.check_topology("h100:1x1x8", "gpu").devices == 8
    assert targets.check_topology("v5p:2x2x1", "tpu").spec is None  # libtpu knows it; no figures here
    assert targets.check_topology("h200:1x1x1", "gpu").spec.hbm_bytes > targets.SPECS["h100"].hbm_bytes
    with pytest.raises(ValueError, match="bad topology 'v6e-8'"):
        targets.parse_topology("v6e-8")


def test_roofline_is_the_max_of_its_terms() -> None:
    # 918 TFLOP/s, 1.64 TB/s HBM, 224 GB/s ICI per v6e chip
    r = targets.roofline(V6E, flops=918e12, hbm_bytes=1.64e12 / 2, collective_bytes=224e9 / 4)
    assert r["compute_s"] == pytest.approx(1.0) and r["hbm_s"] == pytest.approx(0.5)
    assert r["interconnect_s"] == pytest.approx(0.25)
    assert (r["step_s"], r["bound_by"]) == (pytest.approx(1.0), "compute")
    assert r["step_serial_s"] == pytest.approx(1.75)
    assert r["assumptions"] == list(targets.ROOFLINE_ASSUMPTIONS)


def test_wire_bytes_of_ring_collectives() -> None:
    assert wire_bytes("all-gather", 1.0, 8.0) == 7.0  # receives the 7 shards it lacks
    assert wire_bytes("reduce-scatter", 8.0, 1.0) == 7.0
    assert wire_bytes("all-reduce", 8.0, 8.0) == 16.0
    assert wire_bytes("collective-permute", 3.0, 3.0) == 3.0


@pytest.mark.parametrize("message,required", [(OOM_MESSAGE, 40 * 2**30), (OOM_TEMPS, int(136.97 * 2**30))])
def test_out_of_memory_compile_is_a_result(message: str, required: int) -> None:
    assert parse_oom(message) == {"required_bytes": required, "available_bytes": int(31.25 * 2**30)}
    static = oom_static(RuntimeError(message), "tpu")
    assert static is not None and static.memory is None and static.oom is not None
    result = analyze(static, V6E, calls_per_video=40, devices=8)
    assert result["fits"] is False and result["memory"]["needed_bytes"] == required
    assert result.roofline is None
    assert oom_static(RuntimeError("INVALID_ARGUMENT: bad sharding"), "tpu") is None


def test_analyze_scales_per_call_to_per_video() -> None:
    static = {
        "collectives": {
            "by_kind": {
                "all-gather": {"count": 3, "operand_bytes": 100, "result_bytes": 800},
                "all-reduce": {"count": 0, "operand_bytes": 0, "result_bytes": 0},
            }
        },
        "memory": {"argument_bytes": 1000, "output_bytes": 10, "temp_bytes": 500, "peak_bytes": 1510},
        "cost": {"flops": 1.0, "bytes_accessed": 50.0},
        "matmul_flops": 918e9,
        "analytic_flops": 8.0,
    }
    result = analyze(Static.from_dict(static), V6E, calls_per_video=40, devices=8)
    assert result["collectives_per_call"] == {
        "all-gather": {"count": 3, "bytes": 100, "result_bytes": 800, "wire_bytes": 700}
    }
    assert result["collectives_per_video"]["all-gather"]["bytes"] == 4000
    assert result["fits"] is True and result["memory"]["needed_bytes"] == 1510
    assert result["flops_per_device"] == 918e9  # HLO matmul FLOPs win over the cost model's loop-once count
    assert result["hbm_traffic_bytes"] == 1010  # at least every argument and output once
    assert result["roofline"]["compute_s"] == pytest.approx(1e-3)
    assert result["roofline_per_video_s"] == pytest.approx(40 * result["roofline"]["step_s"])


@pytest.mark.skipif(importlib.util.find_spec("jax_plugins") is not None, reason="a jax plugin is installed")
def test_missing_gpu_extra_names_it() -> None:
    with pytest.raises(
        targets.MissingExtra,
        match=r"compiling for GPU topology 'h100:1x1x8' without a GPU needs "
        r"the optional extra \[gpu-aot\]",
    ):
        targets.compile_devices("gpu", "h100:1x1x8")


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith(("libtpu", "jax_plugins")) else real(name, *a),
    )
    with pytest.raises(
        targets.MissingExtra,
        match=r"needs the optional extra \[tpu-aot\]: pip install -e "
        r"'\.\[tpu-aot\]'",
    ):
        targets.compile_devices("tpu", "v6e:2x4")
    with pytest.raises(targets.MissingExtra, match=r"\[gpu-aot\]"):
        targets.compile_devices("gpu", "h100:1x1x8")


# --------------------------------------------------------------------------- matmul FLOPs


def test_matmul_flops_applies_loop_trip_counts() -> None:
    layers, m, k = 5, 16, 32

    def f(x, ws):  # type: ignore[no-untyped-def]
        return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws)[0]

    x, ws = jax.ShapeDtypeStruct((m, k), jnp.float32), jax.ShapeDtypeStruct((layers, k, k), jnp.float32)
    compiled = jax.jit(f).lower(x, ws).compile()
    assert matmul_flops(parse(compiled.as_text())) == layers * 2 * m * k * k


# --------------------------------------------------------------------------- real TPU compiles


SMALL_V6E = """
schema_version = 1
[target]
platform = "tpu"
mode = "auto"
topology = "v6e:2x4"
mesh = { fsdp = 2, context = 2, tensor = 2 }
[model]
preset = "small"
overrides = { "transformer.dtype" = "bfloat16", "transformer.param_dtype" = "bfloat16" }
[workload]
height = 256
width = 256
num_frames = 65
batch = 2
steps = 8
text_tokens = 128
stages = ["denoise_step"]
[run]
timeout_s = 600
metrics = ["static", "measured"]
[matrix]
"transformer.sharding" = ["replicated", "trillium", "context"]
"""


def _cpu_collectives(strategy: str) -> dict[str, int]:
    """The same variant compiled for 8 simulated CPU devices, in this process."""
    from harness.model import build_config
    from harness.plan.manifest import Target
    from harness.run.jax_stage import JaxStage, device_mesh
    from ltx2 import Workload, build_stage

    mesh, _ = device_mesh(Target("cpu", "measure", (("fsdp", 2), ("context", 2), ("tensor", 2)), None, 8), False)
    overrides = {
        "transformer.sharding": strategy,
        "transformer.dtype": "bfloat16",
        "transformer.param_dtype": "bfloat16",
    }
    wl = Workload(height=256, width=256, num_frames=65, frame_rate=24.0, batch=2, steps=8, text_tokens=128)
    with jax.set_mesh(mesh):
        static = JaxStage(build_stage("denoise_step", build_config("small", overrides), wl, mesh)).static()
    return {k: c["count"] for k, c in static["collectives"]["by_kind"].items() if c["count"]}


@pytest.mark.aot
@pytest.mark.slow
@needs_libtpu
def test_small_model_compiles_for_v6e_and_caches(tmp_path: Path) -> None:
    manifest = tmp_path / "small_v6e.toml"
    manifest.write_text(SMALL_V6E)
    cmd = [sys.executable, "-m", "harness", "sweep", str(manifest), "--reports", str(tmp_path / "reports")]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "reports/small_v6e/results.jsonl").read_text().splitlines()]
    by_name = {r["variant"]["name"].split("=")[1]: r for r in records}
    for name, r in by_name.items():
        entry = r["stages"]["denoise_step"]
        assert (r["status"], r["target"]["mode_used"], r["machine"]["device_kind"]) == ("ok", "compile", "TPU v6 lite")
        assert entry["measured"] is None and any("compile-only" in n for n in entry["notes"])
        t = entry["static"]["target"]
        assert t["fits"] is True and 0 < t["memory"]["peak_bytes"] < V6E.hbm_bytes
        assert t["memory"]["argument_bytes"] > 0 and t["flops_per_device"] > 0
        assert t["calls_per_video"] == 8 and t["roofline"]["step_s"] > 0
        tpu = {k: int(c["count"]) for k, c in t["collectives_per_call"].items()}
        cpu = _cpu_collectives(f"{name}")
        # The backends lower collectives differently (CPU has no reduce-scatter, TPU adds permutes),
        # but a layout that needs no communication needs none anywhere, and one that gathers does both.
        assert bool(tpu) == bool(cpu), (name, tpu, cpu)
        assert ("all-gather" in tpu) == ("all-gather" in cpu), (name, tpu, cpu)
    assert not by_name["replicated"]["stages"]["denoise_step"]["static"]["target"]["collectives_per_call"]
    assert by_name["trillium"]["stages"]["denoise_step"]["static"]["target"]["collectives_per_call"]
    # Second run of the unchanged manifest: every variant comes from the compile cache.
    again = subprocess.run(
        cmd + ["--rerun", "--sweep-id", "again"], cwd=REPO, capture_output=True, text=True, timeout=900
    )
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = [json.loads(line) for line in (tmp_path / "reports/again/results.jsonl").read_text().splitlines()]
    for r in rerun:
        entry = r["stages"]["denoise_step"]
        assert any("compile cache" in n for n in entry["notes"])
        first = by_name[r["variant"]["name"].split("=")[1]]["stages"]["denoise_step"]["static"]
        assert entry["static"]["collectives"] == first["collectives"] and entry["static"]["memory"] == first["memory"]


def test_report_shows_the_target_analysis(tmp_path: Path) -> None:
    from harness.report import html, tables

    fits = {
        "collectives": {"by_kind": {"all-gather": {"count": 2, "operand_bytes": 2**30, "result_bytes": 2**33}}},
        "memory": {"argument_bytes": 5 * 2**30, "peak_bytes": 6 * 2**30},
        "matmul_flops": 1e12,
    }
    oom = oom_static(RuntimeError(OOM_TEMPS), "tpu")
    assert oom is not None
    entries = {
        name: {"status": "ok", "static": {**static, "target": analyze(Static.from_dict(static), V6E, 40, 8)}}
        for name, static in (("trillium", fits), ("replicated", oom))
    }
    from harness.metrics.timeline import rates

    entries["trillium"]["predicted"] = {"step_s": 0.01, "matmul_rates": rates.matmul_rates("v6e")}
    from tests.harness.fixtures import synthetic

    target = {
        "platform": "tpu",
        "mode": "auto",
        "mesh": {"fsdp": 8},
        "topology": "v6e:2x4",
        "devices": 8,
        "mode_used": "compile",
    }
    records = synthetic.records(
        [synthetic.minimal(name, {"denoise_step": entry}, target=target) for name, entry in entries.items()]
    )
    rows = {r.variant: r for r in tables.target_rows(records)}
    assert rows["trillium"].fits and rows["trillium"].collective_bytes_per_call == {"all-gather": 2**30}
    assert rows["trillium"].collective_bytes_per_video == 40 * 2**30
    assert rows["replicated"].fits is False and rows["replicated"].step_s is None
    # the matmul floor at the best measured GEMM rate (tpu7x's efficiency carried to v6e), the datasheet's beside
    flops = rows["trillium"].flops_per_device
    assert rows["trillium"].floor_datasheet_s == pytest.approx(flops / 918e12)
    assert rows["trillium"].floor_s == pytest.approx(flops / (918e12 * 956.3824592 / 1153.5))
    assert rows["replicated"].floor_s is None
    page = html.target_section(records)
    assert 'id="target-analysis"' in page and "all-gather / call" in page and "40 calls per video" in page
    assert "matmul floor / call (achievable)" in page and "(datasheet " in page
    assert "needs 137 GiB of 31.2 GiB" in page and "TPU v6 lite" in page and "perfect overlap" in page


@pytest.mark.aot
@pytest.mark.slow
@pytest.mark.skipif(not targets._installed("jax_plugins.xla_cuda12"), reason="needs the [gpu-aot] extra")
def test_small_model_compiles_for_h100(tmp_path: Path) -> None:
    text = SMALL_V6E.replace('platform = "tpu"', 'platform = "gpu"').replace("v6e:2x4", "h100:1x1x1")
    text = text.replace("{ fsdp = 2, context = 2, tensor = 2 }", "{ data = 1 }").split("[matrix]")[0]
    manifest = tmp_path / "small_h100.toml"
    manifest.write_text(text)
    cmd = [sys.executable, "-m", "harness", "sweep", str(manifest), "--reports", str(tmp_path), "--no-report"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(line) for line in (tmp_path / "small_h100/results.jsonl").read_text().splitlines()]
    static = record["stages"]["denoise_step"]["static"]
    assert (record["target"]["mode_used"], record["machine"]["device_kind"]) == ("compile", "NVIDIA H100 80GB HBM3")
    assert static["matmul_flops"] == static["analytic_flops"]  # one device: the HLO does exactly the model's matmuls
    assert static["target"]["fits"] is True and static["target"]["collectives_per_call"] == {}


def test_memory_traffic_counts_scan_slices_not_whole_stacks() -> None:
    from harness.metrics.hlo import memory_traffic_bytes

    layers, m, k = 6, 64, 256

    def f(x, ws, unroll):  # type: ignore[no-untyped-def]
        return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, ws, unroll=unroll)[0]

    x, ws = jax.ShapeDtypeStruct((m, k), jnp.float32), jax.ShapeDtypeStruct((layers, k, k), jnp.float32)
    scanned, unrolled = (
        memory_traffic_bytes(parse(jax.jit(f, static_argnums=2).lower(x, ws, u).compile().as_text()))
        for u in (1, layers)
    )
    # Each step touches its k x k slice of the stack (XLA:CPU copies the slice out, then the dot reads
    # it: 3 passes) and a few m x k activations, never the whole stack (layers x the stack).
    weights, activations = layers * k * k * 4, layers * m * k * 4
    assert 3 * weights <= scanned <= 3 * weights + 6 * activations < layers * weights
    assert weights <= unrolled <= 3 * weights + 6 * activations


SPLASH_V6E = """
import jax, jax.numpy as jnp
from jax.sharding import SingleDeviceSharding
from harness.targets import compile_devices
from ltx2.attention import dot_product_attention
device = compile_devices("tpu", "v6e:2x2")[0]
q = jax.ShapeDtypeStruct((1, 4096, 8, 128), jnp.bfloat16, sharding=SingleDeviceSharding(device))
for impl in ("xla", "splash"):
    c = jax.jit(lambda q, k, v: dot_product_attention(q, k, v, impl=impl)).lower(q, q, q).compile()
    print(impl, c.memory_analysis().temp_size_in_bytes, c.as_text().count("tpu_custom_call"))
"""


@pytest.mark.aot
@needs_libtpu
def test_splash_attention_compiles_for_v6e_without_the_score_matrix() -> None:
    """attention_impl="splash" lowers the Mosaic kernel for a TPU target from this CPU host; XLA's
    path materialises the [1, 8, 4096, 4096] float32 logits (512 MiB), the kernel keeps tiles in VMEM."""
    env = {**os.environ, **targets.compile_env("tpu"), "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", SPLASH_V6E], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = {impl: (int(temp), int(calls)) for impl, temp, calls in (ln.split() for ln in done.stdout.splitlines())}
    assert got["xla"][1] == 0 and got["splash"][1] == 1
    assert got["xla"][0] >= 512 * 2**20 and got["splash"][0] < got["xla"][0] / 16, got


GUIDED_V6E = SMALL_V6E.replace('stages = ["denoise_step"]', 'stages = ["guided_step", "denoise_loop"]').replace(
    '"transformer.sharding" = ["replicated", "trillium", "context"]', '"transformer.sharding" = ["trillium"]'
)


@pytest.mark.aot
@needs_libtpu
def test_guided_stages_compile_for_v6e(tmp_path: Path) -> None:
    """The guided step and loop build for a TPU target with no TPU: their inputs' shapes come from host
    values (the guidance scales were made with jnp on the default backend, a compile-only TPU topology
    that cannot run anything: every guided variant of v6e.toml failed building its stage)."""
    manifest = tmp_path / "guided_v6e.toml"
    manifest.write_text(GUIDED_V6E)
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "sweep",
        str(manifest),
        "--reports",
        str(tmp_path / "reports"),
        "--no-report",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (record,) = [json.loads(ln) for ln in (tmp_path / "reports/guided_v6e/results.jsonl").read_text().splitlines()]
    assert record["status"] == "ok" and record["target"]["mode_used"] == "compile"
    for stage in ("guided_step", "denoise_loop"):
        target = record["stages"][stage]["static"]["target"]
        assert target["fits"] is True and target["flops_per_device"] > 0, stage
    loop, step = (record["stages"][s]["static"]["target"]["flops_per_device"] for s in ("denoise_loop", "guided_step"))
    assert loop > 4 * step  # the loop runs the guided step 8 times (the text K/V made once per video are extra)
