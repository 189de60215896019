"""The compile-only static metrics cache: an unchanged variant is not recompiled, anything that changes the
program misses."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.families import Memory, Static
from harness.plan.manifest import Run, Target, Workload
from harness.run.compile_cache import CompileCache, cache_key, code_hash
from harness.run.spec import WorkerSpec
from harness.run.worker import static_metrics


class _CountingStage:
    name, uses_jax, calls_per_video, notes = "denoise_step", True, 4, []
    hlo_text: str | None = None

    def __init__(self) -> None:
        self.compiles = 0

    def static(self) -> Static:
        self.compiles += 1
        return Static(platform="tpu", memory=Memory(peak_bytes=10))

    def prepare(self) -> None: ...

    def run(self) -> None: ...


def _spec(tmp_path: Path, mesh: tuple[tuple[str, int], ...] = (("fsdp", 2), ("tensor", 4))) -> WorkerSpec:
    return WorkerSpec(
        variant_name="v",
        variant_id="v",
        preset="small",
        config_overrides={"transformer.sharding": "trillium"},
        target=Target("tpu", "auto", mesh, "v6e:2x4", 8),
        mode="compile",
        workload=Workload(height=64, stages=("denoise_step",)),
        run=Run(),
        trace_dir=str(tmp_path / "traces"),
        cache_dir=str(tmp_path),
    )


def test_compile_cache_hits_for_an_unchanged_variant(tmp_path: Path) -> None:
    stage, notes = _CountingStage(), []
    first = static_metrics("denoise_step", stage, _spec(tmp_path), notes)
    second = static_metrics("denoise_step", stage, _spec(tmp_path), notes)
    assert stage.compiles == 1 and first == second
    assert any("compile cache" in n for n in notes)
    assert first["target"]["calls_per_video"] == 4 and first["target"]["fits"] is True
    static_metrics("denoise_step", stage, _spec(tmp_path, (("fsdp", 4), ("tensor", 2))), notes)
    assert stage.compiles == 2  # another layout is another program


def test_measured_runs_do_not_use_the_cache(tmp_path: Path) -> None:
    stage = _CountingStage()
    spec = dataclasses.replace(_spec(tmp_path), mode="measure")
    static_metrics("denoise_step", stage, spec, [])
    static_metrics("denoise_step", stage, spec, [])
    assert stage.compiles == 2


def test_cache_key_ignores_the_stage_list_only(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    other = dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, stages=("denoise_step", "upsample")))
    assert cache_key(spec, "denoise_step") == cache_key(other, "denoise_step")
    assert cache_key(spec, "denoise_step") != cache_key(spec, "video_decode")
    taller = dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, height=128))
    assert cache_key(spec, "denoise_step") != cache_key(taller, "denoise_step")
    bf16 = dataclasses.replace(spec, config_overrides={**spec.config_overrides, "transformer.dtype": "bfloat16"})
    assert cache_key(spec, "denoise_step") != cache_key(bf16, "denoise_step")
    cache = CompileCache(tmp_path / "c")
    assert cache.get("missing") is None
    cache.put("k", {"a": 1})
    assert cache.get("k") == {"a": 1}


def test_code_hash_follows_the_analysis_code_not_the_prediction_code(tmp_path: Path) -> None:
    """A change under harness/metrics re-keys every entry; a change to the simulator or the predicted
    XSpace writer does not (a hit simulates the cached program again)."""
    files = {
        "ltx2/model.py": "a = 1\n",
        "harness/run/jax_stage.py": "b = 1\n",
        "harness/targets.py": "",
        "harness/run/compile_cache.py": "",
        "harness/metrics/compiled/static.py": "c = 1\n",
        "harness/metrics/timeline/simulate.py": "d = 1\n",
        "harness/metrics/xprof/xplane_write.py": "e = 1\n",
        "harness/metrics/xprof/predicted.py": "f = 1\n",
    }

    def tree(name: str, **changed: str) -> Path:
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(changed.get(rel.replace("/", "_").removesuffix(".py"), text))
        return root

    base = code_hash(tree("base"))
    assert code_hash(tree("sim", harness_metrics_timeline_simulate="d = 2\n")) == base
    assert code_hash(tree("xs", harness_metrics_xprof_xplane_write="e = 2\n")) == base
    assert code_hash(tree("px", harness_metrics_xprof_predicted="f = 2\n")) == base
    assert code_hash(tree("static", harness_metrics_compiled_static="c = 2\n")) != base
    assert code_hash(tree("model", ltx2_model="a = 2\n")) != base
