"""Run a manifest's variants, one subprocess each, and append one record per variant.

Each variant runs in ``python -m harness.worker`` in its own process group, with
the environment it needs set before JAX starts (``XLA_FLAGS`` simulated device
count on CPU, ``JAX_PLATFORMS``), so device counts, XLA flags, compile caches and
memory never leak between variants. A worker that raises, exits non-zero, dies
from a signal (the OOM killer) or runs past ``run.timeout_s`` (its whole process
group is killed) becomes a failed record carrying the error text, and the sweep
goes on. A sweep resumes: variants with an ok record in the results file are
skipped unless ``rerun`` is set.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness import records, targets
from harness.manifest import Manifest, Run, Target
from harness.progress import Progress, summary_table
from harness.variants import Variant, select

REPO_ROOT = Path(__file__).resolve().parent.parent
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
ERROR_TAIL_LINES = 40
CACHE_DIR = "aot-cache"  # under the reports directory: compile-only static metrics, shared by sweeps
_JAX_PLATFORM = {"cpu": "cpu", "tpu": "tpu", "gpu": "cuda"}


@dataclass(frozen=True)
class SweepOptions:
    reports_dir: Path = Path("reports")
    sweep_id: str | None = None  # default: the manifest's file name without .toml
    rerun: bool = False
    only: tuple[str, ...] = ()  # variant names or id prefixes; empty = all
    python: str = sys.executable
    cache_dir: Path | None = None  # compile-only static metrics cache; default <reports_dir>/aot-cache
    poll_s: float = 0.1
    kill_grace_s: float = 3.0


@dataclass
class SweepResult:
    sweep_id: str
    results_path: Path
    records: list[dict[str, Any]] = field(default_factory=list)  # written by this run
    skipped: list[Variant] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r["status"] == "ok" for r in self.records)


# --------------------------------------------------------------------------- per variant


def resolve_mode(target: Target) -> str:
    """``measure`` or ``compile``: ``auto`` measures where the platform's devices are present."""
    if target.mode != "auto":
        return target.mode
    return "measure" if targets.hardware_present(target.platform) else "compile"


def variant_env(variant: Variant, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The worker's environment: the parent's, plus the device set-up this variant needs."""
    env = dict(os.environ if base is None else base)
    target = variant.target
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    if target.platform == "cpu":
        flags.append(f"{DEVICE_COUNT_FLAG}={target.devices}")
        env["JAX_PLATFORMS"] = "cpu"
    elif resolve_mode(target) == "compile":
        env.update(targets.compile_env(target.platform))  # ahead-of-time from the host; never grab an accelerator
    else:
        env["JAX_PLATFORMS"] = _JAX_PLATFORM[target.platform]
    env["XLA_FLAGS"] = " ".join(flags)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_spec(
    variant: Variant, run: Run, trace_dir: Path, status_path: Path, cache_dir: Path | None = None
) -> dict[str, Any]:
    target = variant.target.to_dict()
    target["mesh"] = variant.target.mesh_shape
    if target["platform"] != "cpu":
        target["mode"] = resolve_mode(variant.target)
    return {
        "cache_dir": None if cache_dir is None else str(cache_dir),
        "variant": {"name": variant.name, "id": variant.id},
        "preset": variant.preset,
        "config_overrides": dict(variant.config_overrides),
        "target": target,
        "workload": variant.workload.to_dict(),
        "run": run.to_dict(),
        "trace_dir": str(trace_dir),
        "status_path": str(status_path),
    }


def _kill_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int = ERROR_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _exit_reason(rc: int) -> str:
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        hint = " (out of memory, or killed from outside)" if -rc == signal.SIGKILL else ""
        return f"worker killed by signal {name}{hint}"
    return f"worker exited with code {rc}"


@dataclass
class Outcome:
    """What one worker process produced."""

    status: str
    error: str | None
    result: dict[str, Any]
    duration_s: float
    started_at: str
    finished_at: str


def _watch(
    proc: subprocess.Popen[bytes], timeout_s: float, status_path: Path, options: SweepOptions,
    progress: Progress | None,
) -> tuple[bool, dict[str, Any] | None]:
    """Poll the worker until it exits or times out (then kill its group); (timed out, last status)."""
    start, where = time.monotonic(), None
    while proc.poll() is None:
        elapsed = time.monotonic() - start
        where = _read_json(status_path) or where
        if progress is not None:
            progress.update((where or {}).get("stage", ""), (where or {}).get("phase", "starting"), elapsed)
        if elapsed > timeout_s:
            _kill_group(proc, options.kill_grace_s)
            return True, where
        time.sleep(options.poll_s)
    return False, where


def _classify(
    rc: int, timed_out: bool, where: dict[str, Any] | None, result: dict[str, Any], timeout_s: float, tail: str
) -> tuple[str, str | None]:
    """(status, error): the worker's own verdict if it finished, else how it died."""
    if timed_out:
        at = f" in {where['stage']}:{where['phase']}" if where and where.get("stage") else ""
        return "timeout", f"timed out after {timeout_s:g} s{at}\n{tail}".rstrip()
    if result.get("status") in ("ok", "failed") and rc in (0, 1):
        return result["status"], result.get("error")
    return "crashed", f"{_exit_reason(rc)}\n{tail}".rstrip()


def run_worker(
    variant: Variant,
    run: Run,
    *,
    log_path: Path,
    trace_dir: Path,
    options: SweepOptions,
    progress: Progress | None = None,
) -> Outcome:
    """Run one variant's worker process to completion, timeout or death."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"harness-{variant.id}-") as tmp:
        spec_path, out_path, status_path = (Path(tmp) / n for n in ("spec.json", "out.json", "status.json"))
        cache_dir = options.cache_dir or Path(options.reports_dir) / CACHE_DIR
        spec_path.write_text(json.dumps(worker_spec(variant, run, trace_dir, status_path, cache_dir)))
        started_at, start = records.now(), time.monotonic()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [options.python, "-m", "harness.worker", str(spec_path), str(out_path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=variant_env(variant), start_new_session=True,
            )  # fmt: skip
            timed_out, where = _watch(proc, run.timeout_s, status_path, options, progress)
        duration = time.monotonic() - start
        result = _read_json(out_path) or {}
    status, error = _classify(proc.returncode, timed_out, where, result, run.timeout_s, _tail(log_path))
    return Outcome(status, error, result, duration, started_at, records.now())


def build_record(
    *,
    sweep_id: str,
    manifest: Manifest,
    variant: Variant,
    run: Run,
    outcome: Outcome,
    provenance: Mapping[str, Any],
    log_path: Path,
) -> dict[str, Any]:
    result = outcome.result
    machine = {**provenance["machine"], **(result.get("machine") or {})}
    target = variant.target.to_dict()
    target["mesh"] = variant.target.mesh_shape
    stages = result.get("stages") or {}
    traces = {s: e["trace"]["log_dir"] for s, e in stages.items() if (e.get("trace") or {}).get("log_dir")}
    return {
        "record_version": records.RECORD_VERSION,
        "sweep_id": sweep_id,
        "manifest": {"path": str(manifest.path), "sha256": manifest.sha256},
        "variant": {"name": variant.name, "id": variant.id, "overrides": dict(variant.overrides),
                    "description": variant.description},
        "config": {"preset": variant.preset, "overrides": dict(variant.config_overrides),
                   "resolved": result.get("config_resolved"), "workload": variant.workload.to_dict(),
                   "run": run.to_dict()},
        "target": {**target, "mode_used": result.get("mode_used")},
        "machine": machine,
        "versions": provenance["versions"],
        "git": provenance["git"],
        "started_at": outcome.started_at,
        "finished_at": outcome.finished_at,
        "duration_s": outcome.duration_s,
        "status": outcome.status,
        "error": outcome.error,
        "stages": stages,
        "notes": result.get("notes") or [],
        "artifacts": {"log": str(log_path), "traces": traces},
    }


def provenance() -> dict[str, Any]:
    return {"machine": records.machine_info(), "versions": records.library_versions(),
            "git": records.git_info(REPO_ROOT)}


# --------------------------------------------------------------------------- sweep


def run_sweep(manifest: Manifest, options: SweepOptions, stream: TextIO | None = None) -> SweepResult:
    """Run (or resume) every selected variant; append a record for each one that ran."""
    sweep_id = options.sweep_id or manifest.name
    sweep_dir = Path(options.reports_dir) / sweep_id
    path = records.results_path(options.reports_dir, sweep_id)
    variants = select(manifest.expand(), options.only)
    done = set() if options.rerun else records.finished_ids(records.load_records(path))
    progress = Progress(len(variants), stream)
    result = SweepResult(sweep_id, path)
    context = provenance()
    for i, variant in enumerate(variants, start=1):
        if variant.id in done:
            progress.skipped(i, variant.name, variant.id)
            result.skipped.append(variant)
            continue
        progress.start(i, variant.name, variant.id)
        log_path = sweep_dir / "logs" / f"{variant.id}.log"
        outcome = run_worker(variant, manifest.run, log_path=log_path, trace_dir=sweep_dir / "traces" / variant.id,
                             options=options, progress=progress)
        record = build_record(sweep_id=sweep_id, manifest=manifest, variant=variant, run=manifest.run,
                              outcome=outcome, provenance=context, log_path=log_path)
        records.append_record(path, record)
        result.records.append(record)
        progress.finish(outcome.status, outcome.duration_s, outcome.error)
    out = stream if stream is not None else sys.stderr
    if result.records:
        out.write("\n" + summary_table(result.records) + "\n")
    out.write(f"\n{len(result.records)} run, {len(result.skipped)} skipped -> {path}\n")
    out.flush()
    return result
