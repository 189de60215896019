"""Multi-process variants (``target.processes = N``): the same denoise step as 1 process x 8 devices and as
2 processes x 4 devices (jax.distributed over gloo) compiles to the same collectives and memory and computes
the same outputs; a process killed mid-run fails its variant, ends its sibling, and the sweep goes on;
the processes' results merge into one record."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.expansion import load_sweep
from harness.plan.manifest import ManifestError
from harness.run.distributed import merge_results
from harness.run.launcher import DEVICE_COUNT_FLAG, free_port, worker_env
from harness.run.runner import worker_spec
from tests.harness.run.test_interrupt import WAIT_S, live_members, start_sweep, wait_for

REPO = Path(__file__).resolve().parents[3]
MANIFEST = REPO / "experiments" / "multiprocess-cpu.toml"
DRIVER = Path(__file__).with_name("multiprocess_step.py")
# The same SPMD program on the same 8 device shards either way; only how collectives move data
# differs (in-process copies vs gloo over TCP), which may reorder the cross-device sums of an
# all-reduce. Outputs are O(1) (|x| <= 4 here): 1e-6 is ~2 ulps of fp32 at 4
# (ulp(4) = 4.8e-7), room for a reordered sum of a few terms; a wrong shard or a missing
# reduction is off by O(1).
OUTPUT_TOLERANCE = 1e-6


def _driver(processes: int, pid: int, coordinator: str, out: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": str(REPO),
        "XLA_FLAGS": f"{DEVICE_COUNT_FLAG}={8 // processes}",
    }
    argv = [sys.executable, str(DRIVER), str(MANIFEST), str(processes), str(pid), coordinator, str(out)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_one_process_of_8_and_two_of_4_compile_and_compute_the_same(tmp_path: Path) -> None:
    coordinator = f"127.0.0.1:{free_port()}"
    one, two = tmp_path / "one.npz", tmp_path / "two.npz"
    procs = [_driver(1, 0, "", one), _driver(2, 0, coordinator, two), _driver(2, 1, coordinator, two)]
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-3000:]
    static_one, static_two = (json.loads(Path(f"{f}.json").read_text()) for f in (one, two))
    assert sorted(static_one) == ["context", "replicated", "trillium"]
    for strategy in static_one:  # collective counts and bytes, memory per device, cost: all of it identical
        a, b = static_one[strategy], static_two[strategy]
        assert a["collectives"] == b["collectives"] and a["memory"] == b["memory"], strategy
        assert a == b, strategy
    assert static_one["context"]["collectives"] != static_one["replicated"]["collectives"]  # layouts do differ
    a, b = np.load(one), np.load(two)
    assert sorted(a.files) == sorted(b.files) and len(a.files) == 6
    for key in a.files:
        assert a[key].shape == b[key].shape and np.isfinite(a[key]).all(), key
        np.testing.assert_allclose(b[key], a[key], rtol=0, atol=OUTPUT_TOLERANCE, err_msg=key)


KILLED = """\
schema_version = 1
[target]
devices = 2
processes = 2
[model]
preset = "test:sleep"
[workload]
stages = ["denoise_step"]
[run]
repeats = 1
warmup = 1
timeout_s = 600
[[variants]]
name = "killed"
[[variants]]
name = "after"
overrides = { "model.preset" = "test:ok" }
"""


def running_processes(tmpdir: Path) -> dict[int, int]:
    """Process id -> pid of a 2-process variant's workers, once both are inside their stage."""
    pids: dict[int, int] = {}

    def both_running() -> bool:
        for i in (0, 1):
            for status in tmpdir.glob(f"harness-*/status-{i}.json"):
                try:
                    info = json.loads(status.read_text())
                except (OSError, ValueError):
                    continue
                if info.get("phase") == "warmup":
                    pids[i] = int(info["pid"])
        return len(pids) == 2

    wait_for("both processes of the variant to run", both_running)
    return pids


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")
def test_a_killed_sweeps_two_workers_both_end_themselves(tmp_path: Path) -> None:
    proc, tmpdir, _ = start_sweep(tmp_path, KILLED)
    pids: dict[int, int] = {}
    try:
        pids = running_processes(tmpdir)
        proc.kill()  # SIGKILL: the launcher cannot stop them; each worker's lifeline must
        proc.communicate(timeout=WAIT_S)
        for pid in pids.values():
            wait_for(f"worker group {pid} to end", lambda pid=pid: not live_members(pid))
        wait_for("the scratch folder to go", lambda: not list(tmpdir.glob("harness-*")))
    finally:
        for pid in pids.values():
            if live_members(pid):
                os.killpg(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")
def test_killing_one_process_fails_the_variant_ends_the_other_and_the_sweep_goes_on(tmp_path: Path) -> None:
    proc, tmpdir, reports = start_sweep(tmp_path, KILLED)
    pids: dict[int, int] = {}
    try:
        pids = running_processes(tmpdir)
        os.kill(pids[1], signal.SIGKILL)
        _, err = proc.communicate(timeout=WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in pids.values():
            if live_members(pid):
                os.killpg(pid, signal.SIGKILL)
    assert proc.returncode == 1, err
    for pid in pids.values():  # each worker led its own group: nothing of either is left
        wait_for(f"worker group {pid} to end", lambda pid=pid: not live_members(pid))
    assert not list(tmpdir.glob("harness-*"))
    records = [json.loads(line) for line in (reports / "hang" / "results.jsonl").read_text().splitlines()]
    by_name = {r["variant"]["name"]: r for r in records}
    killed = by_name["killed"]
    assert killed["status"] == "crashed"
    assert killed["error"].startswith(f"process 1 of 2 (pid {pids[1]}): worker killed by signal SIGKILL")
    assert "the other 1 process(es) were ended" in killed["error"]
    assert by_name["after"]["status"] == "ok"
    assert [p["process"] for p in by_name["after"]["stages"]["denoise_step"]["processes"]] == [0, 1]
    logs = sorted(p.name for p in (reports / "hang" / "logs").iterdir())
    ids = {r["variant"]["name"]: r["variant"]["id"] for r in records}
    assert logs == sorted(f"{ids[n]}{s}.log" for n in ids for s in ("", ".process-1"))


def _entry(wall: float, static: dict) -> dict:
    return {
        "status": "ok",
        "error": None,
        "notes": [],
        "static": static,
        "phases_s": {"run": wall},
        "measured": {"wall_s": {"median": wall}, "samples_s": [wall]},
        "trace": None,
    }


def test_merge_takes_the_slowest_process_and_rejects_differing_static_metrics() -> None:
    static = {"collectives": {"all-reduce": 2}, "timing": {"compile_s": 1.0}}
    slow_static = {**static, "timing": {"compile_s": 3.0}}  # compile times may differ
    merged = merge_results(
        [
            {"status": "ok", "stages": {"s": _entry(0.1, static)}},
            {"status": "ok", "stages": {"s": _entry(0.3, slow_static)}},
        ]
    )
    s = merged["stages"]["s"]
    assert merged["status"] == "ok" and merged["processes"] == 2
    assert s["measured"]["wall_s"]["median"] == 0.3 and s["measured"]["process"] == 1
    assert [p["wall_s"]["median"] for p in s["processes"]] == [0.1, 0.3]
    traced = [
        {
            **_entry(0.1, static),
            "trace": {
                "steps": 2,
                "log_dir": f"/t/p{i}",
                "devices": [{"device": d, "compute_ns": 10.0 * i + d} for d in (0, 1)],
            },
        }
        for i in (0, 1)
    ]
    t = merge_results([{"status": "ok", "stages": {"s": e}} for e in traced])["stages"]["s"]
    assert [(d["process"], d["device"], d["compute_ns"]) for d in t["trace"]["devices"]] == [
        (0, 0, 0.0),
        (0, 1, 1.0),
        (1, 0, 10.0),
        (1, 1, 11.0),
    ]
    assert t["trace"]["steps"] == 2 and [p["log_dir"] for p in t["trace_processes"]] == ["/t/p0", "/t/p1"]
    other = {"collectives": {"all-reduce": 3}, "timing": {}}
    bad = merge_results(
        [{"status": "ok", "stages": {"s": _entry(0.1, static)}}, {"status": "ok", "stages": {"s": _entry(0.1, other)}}]
    )
    assert bad["status"] == "failed" and bad["stages"]["s"]["status"] == "failed"
    assert "static metrics of process 1 differ from process 0's (collectives)" in bad["error"]


def test_processes_split_the_devices_and_keep_one_process_ids(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    path.write_text(KILLED.replace("devices = 2", "devices = 3"))
    with pytest.raises(ManifestError, match=r"processes.*2 processes must split the target's devices evenly"):
        load_sweep(path)
    path.write_text(KILLED)
    v = load_sweep(path).variants[0]
    env = worker_env(worker_spec(v, load_sweep(path).manifest.run, tmp_path), base={})
    assert f"{DEVICE_COUNT_FLAG}=1" in env["XLA_FLAGS"].split()  # 2 devices over 2 processes
    path.write_text(KILLED.replace("processes = 2\n", ""))
    one = load_sweep(path).variants[0]
    path.write_text(KILLED.replace("processes = 2\n", "processes = 1\n"))
    assert load_sweep(path).variants[0].id == one.id != v.id  # processes = 1 is the id variants always had


def test_a_hanging_variant_of_two_processes_times_out_saying_where_each_was(tmp_path: Path) -> None:
    from harness.run.launcher import LocalLauncher
    from harness.run.runner import SweepOptions, run_sweep

    path = tmp_path / "hang.toml"
    path.write_text(KILLED.replace("timeout_s = 600", "timeout_s = 1.5").split("[[variants]]")[0])
    result = run_sweep(
        load_sweep(path),
        SweepOptions(reports_dir=tmp_path / "reports"),
        stream=io.StringIO(),
        launcher=LocalLauncher(kill_grace_s=1.0),
    )
    (record,) = result.records
    assert record.status == "timeout"
    assert "all 2 ended (process 0 in denoise_step:warmup, process 1 in denoise_step:warmup)" in record.error
