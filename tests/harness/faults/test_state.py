"""Corrupt state (a results file with garbage in the middle, compile-cache entries cut short or from another
version, a baseline cut short), a worker out of memory or out of time, and two sweeps sharing one reports
folder and compile cache: each detected, named, skipped or rebuilt, and the sweep goes on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from faultbench import MANIFEST, SWEEP_ID, VARIANTS, Bench

from harness import cli
from harness.families import Memory, Static
from harness.plan.manifest import Run, Target, Workload
from harness.results import baseline as bl
from harness.results import store
from harness.run.compile_cache import CompileCache, cache_key
from harness.run.spec import WorkerSpec
from harness.run.worker import static_metrics

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="finds processes and files through /proc")


def test_results_file_with_garbage_in_the_middle(bench: Bench) -> None:
    assert bench.sweep().code == 0
    lines = bench.results.read_text().splitlines(keepends=True)
    lines[1] = lines[1][: len(lines[1]) // 2] + "\0\0 garbage\n"  # record b damaged in place
    bench.results.write_text("".join(lines))
    again = bench.sweep()
    assert again.code == 0 and "Traceback" not in again.err
    warned = [ln for ln in again.err.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1 and f"{bench.results}: skipped 1 line(s)" in warned[0] and "line 2: not JSON" in warned[0]
    assert "[2/3] b" in again.err and "ok record exists" in again.err  # b runs again, a and c are kept
    kept = bench.results.read_text().splitlines(keepends=True)
    assert kept[1] == lines[1]  # the damaged line is left for a person to look at, not lost
    records = [store.parse(json.loads(ln), "x") for i, ln in enumerate(kept) if i != 1]
    assert sorted(r.variant.name for r in records) == sorted(VARIANTS) and all(r.ok for r in records)


class _Stage:
    name, uses_jax, calls_per_video, notes = "denoise_step", True, 1, []
    hlo_text: str | None = "HloModule m"

    def __init__(self) -> None:
        self.compiles = 0

    def static(self) -> Static:
        self.compiles += 1
        return Static(platform="tpu", memory=Memory(peak_bytes=10))


def _spec(cache: Path) -> WorkerSpec:
    return WorkerSpec(
        variant_name="v",
        variant_id="v",
        preset="small",
        config_overrides={},
        target=Target("tpu", "auto", (("fsdp", 8),), "v6e:2x4", 8),
        mode="compile",
        workload=Workload(height=64, stages=("denoise_step",)),
        run=Run(),
        trace_dir=str(cache / "traces"),
        cache_dir=str(cache),
    )


def _entry(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# How an entry is damaged, and what the line about it says.
DAMAGES = {
    "cut-short": (lambda p: p.write_bytes(p.read_bytes()[:-7]), "unreadable (cut short or corrupt"),
    "empty": (lambda p: p.write_bytes(b""), "unreadable (cut short or corrupt"),
    "other-library-version": (
        lambda p: p.write_text(json.dumps({**_entry(p), "versions": {"jax": "0.0.1"}})),
        "written by another harness or library version (versions {'jax': '0.0.1'}",
    ),
    "other-cache-version": (
        lambda p: p.write_text(json.dumps({**_entry(p), "cache_version": 2})),
        "another harness or library version (cache_version 2, here 3",
    ),
    "old-format": (lambda p: p.write_text(json.dumps(_entry(p)["static"])), "not a cache entry"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_compile_cache_entry_is_named_and_rebuilt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    spec, stage = _spec(tmp_path), _Stage()
    first = static_metrics("denoise_step", stage, spec, [])
    path = CompileCache(tmp_path).path(cache_key(spec, "denoise_step"))
    capsys.readouterr()
    harm, says = DAMAGES[damage]
    harm(path)
    again = static_metrics("denoise_step", stage, spec, [])
    assert stage.compiles == 2 and again == first  # a miss: compiled again, same result
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"compile cache: {path}: ") and says in err[0], err
    assert _entry(path)["static"] == CompileCache(tmp_path).get(cache_key(spec, "denoise_step"))  # rebuilt whole
    static_metrics("denoise_step", stage, spec, [])
    assert stage.compiles == 2  # and used from then on


def test_a_cut_short_program_in_the_cache_is_named_and_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache, key = CompileCache(tmp_path), "k"
    cache.put_hlo(key, "HloModule m\n" * 1000)
    cache.hlo_path(key).write_bytes(cache.hlo_path(key).read_bytes()[:40])
    assert cache.get_hlo(key) is None
    assert f"compile cache: {cache.hlo_path(key)}: unreadable (cut short or corrupt" in capsys.readouterr().err
    assert not cache.hlo_path(key).exists()


def test_a_full_disk_under_the_compile_cache_is_said_and_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import faultinject

    faultinject.install({"op": "open", "path": f"{tmp_path}/*.tmp", "nth": 0, "action": "ENOSPC"}, monkeypatch.setattr)
    spec, stage = _spec(tmp_path), _Stage()
    static = static_metrics("denoise_step", stage, spec, [])  # the compile's result is not lost
    assert static["memory"] == {"peak_bytes": 10}
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all("no space left on device (ENOSPC) writing" in e for e in err), err
    assert "entry not cached" in err[0] and f"{tmp_path}/" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no entry, no temporary file


WRITER = """\
import sys
from harness.run.compile_cache import CompileCache
cache, n = CompileCache(sys.argv[1]), int(sys.argv[2])
value = {"blob": "x" * 200_000}
for i in range(n):
    cache.put(f"k{i % 3}", value)
    got = cache.get(f"k{(i + 1) % 3}")
    assert got is None or got == value, "torn entry"
"""


def test_two_processes_share_one_compile_cache(tmp_path: Path) -> None:
    """Two sweeps compiling the same programs at once: every read is a miss or the whole entry, never half."""
    cmd = [sys.executable, "-c", WRITER, str(tmp_path), "40"]
    procs = [subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert errs == ["", ""]  # no entry was ever found damaged
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k0.json", "k1.json", "k2.json"]


def test_two_sweeps_with_different_ids_at_once(bench: Bench) -> None:
    other = [*bench.args()[:-1], "other"]
    first = bench.spawn(bench.args())
    second = bench.spawn(other)
    outs = [p.communicate(timeout=240) for p in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outs
    for sweep_id in (SWEEP_ID, "other"):
        records = store.load_records(bench.reports / sweep_id / "results.jsonl")
        assert sorted(r.variant.name for r in records) == sorted(VARIANTS) and all(r.ok for r in records)
    bench.assert_nothing_left()


def test_a_worker_out_of_memory_is_a_failed_record(bench: Bench) -> None:
    """RLIMIT_AS a few MiB above what the worker has at start: its next imports fail (MemoryError, or
    the loader's refused mmap of a shared library, whichever the worker meets first)."""
    failed = bench.sweep(HARNESS_FAULT_RLIMIT_AS=str(4 << 20))
    assert failed.code == 1 and "error:" not in failed.err and "Traceback" not in failed.err
    records = bench.assert_whole()
    assert [r.status for r in records] == ["crashed"] * len(VARIANTS)  # the sweep went on after each
    assert all((r.error or "").startswith("worker ran out of memory") for r in records), [r.error for r in records]
    bench.assert_nothing_left()
    bench.assert_completes()


def test_a_worker_out_of_time_is_a_timeout_record(bench: Bench) -> None:
    bench.manifest.write_text(MANIFEST.replace("timeout_s = 120", "timeout_s = 8"))
    b = f"*/harness-{bench.variant_id('b')}-*/status.json*"  # variant b hangs inside its stage
    failed = bench.sweep(worker_fault={"op": "open", "path": b, "nth": 3, "action": "hang"})
    assert failed.code == 1 and "error:" not in failed.err and "Traceback" not in failed.err
    records = bench.assert_whole()
    assert [(r.variant.name, r.status) for r in records] == [("a", "ok"), ("b", "timeout"), ("c", "ok")]
    assert (records[1].error or "").startswith("timed out after 8 s in denoise_step:")
    bench.assert_nothing_left()
    bench.assert_completes()


def test_a_baseline_cut_short(tmp_path: Path, bench: Bench, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.sweep().code == 0
    path = bl.write(tmp_path / "base.json", bl.build(store.load_records(bench.results), source="x"))
    path.write_bytes(path.read_bytes()[:-100])
    capsys.readouterr()
    code = cli.main(["gate", str(bench.manifest), "--results", str(bench.results), "--baseline", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == [err.splitlines()[0]] and err.startswith(f"GATE ERROR  {path}: not a readable baseline")
    assert "cut short" in err and "git checkout --" in err


def test_a_half_written_trace_folder_from_a_killed_run_is_skipped(tmp_path: Path) -> None:
    """A variant killed mid-trace leaves a cut-short xplane; its re-run captures and reads its own, fresh one."""
    import jax
    import jax.numpy as jnp

    from harness.metrics.measured.trace import analyze_trace, capture_trace

    old = tmp_path / "plugins" / "profile" / "2020_01_01_00_00_00"
    old.mkdir(parents=True)
    (old / "host.xplane.pb").write_bytes(b"\x0a\x05ab")  # a protobuf cut off inside its first field
    step = jax.jit(lambda x: x * 2 + 1)
    x = jnp.ones(64)
    step(x).block_until_ready()
    fresh = capture_trace(lambda: step(x), tmp_path, steps=2)
    assert fresh.parent != old and fresh.stat().st_size > 0
    assert analyze_trace(fresh).to_dict()["devices"]
