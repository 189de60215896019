"""Run a sweep's variants, one worker each, and append one record per variant.

For each variant the runner writes a :class:`~harness.run.spec.WorkerSpec` (the run mode
resolved here, once), hands it to a :class:`~harness.run.launcher.Launcher` (a local
subprocess by default), and turns the outcome into a record appended to
``reports/<sweep-id>/results.jsonl``; a failed, crashed or timed-out worker is a record too,
and the sweep goes on. A sweep resumes: variants with an ok record in the results file are
skipped unless ``rerun`` is set, or unless the ``[run]`` settings that shape the samples
(:data:`SAMPLE_SETTINGS`) changed since that record, which re-runs them and says so.

One sweep at a time holds a sweep folder (:func:`harness.results.lock.sweep_lock`). If the sweep
is interrupted (:class:`~harness.run.interrupt.Interrupted`), the launcher has stopped the running
worker; the runner adds what was stopped and where the finished records are, and lets it go on.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness import targets
from harness.plan.manifest import Run
from harness.plan.variants import Sweep, Variant, comparable, select
from harness.report.console import summary_table
from harness.results import provenance, store
from harness.results.lock import HeldLock, sweep_lock
from harness.results.record import Record, build_record
from harness.results.storage import StorageError, pid_alive
from harness.run import lifeline, parallel
from harness.run.interrupt import Interrupted
from harness.run.launcher import REPO_ROOT, Launcher, LocalLauncher
from harness.run.parallel import expected_seconds
from harness.run.progress import Eta, Progress
from harness.run.spec import WorkerSpec, resolve_mode

CACHE_DIR = "aot-cache"  # under the reports directory: compile-only static metrics, shared by sweeps
# [run] settings an ok record must share with the manifest to be kept on resume (timeout_s does not
# change a sample, so raising it keeps them).
SAMPLE_SETTINGS = ("repeats", "warmup", "trace", "metrics")


@dataclass(frozen=True)
class SweepOptions:
    reports_dir: Path = Path("reports")
    sweep_id: str | None = None  # default: the manifest's file name without .toml
    rerun: bool = False
    only: tuple[str, ...] = ()  # variant names or id prefixes; empty = all
    cache_dir: Path | None = None  # compile-only static metrics cache; default <reports_dir>/aot-cache
    jobs: int | None = None  # compile-only variants at once; None: what cores and memory allow


@dataclass
class SweepResult:
    sweep_id: str
    results_path: Path
    records: list[Record] = field(default_factory=list)  # written by this run
    skipped: list[Variant] = field(default_factory=list)
    submitted: list[Variant] = field(default_factory=list)  # handed to a cluster: records come from collect

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.records)


def accuracy_fields(variant: Variant, variants: Sequence[Variant], outputs_dir: Path) -> dict[str, Any]:
    """The spec's accuracy fields (:mod:`harness.run.accuracy`): a variant keeps its outputs when
    another names it as reference, and compares with its own reference when that runs the same
    model and workload sizes (then the outputs have the same shapes)."""
    by_name = {v.name: v for v in variants}
    ref = by_name.get(variant.reference or "")
    ref = ref if ref is not None and comparable(variant, ref) else None
    keeps = any(v.reference == variant.name and comparable(v, variant) for v in variants)
    if (ref is None and not keeps) or resolve_mode(variant.target, variant.preset) == "compile":
        return {}
    about = None
    if ref is not None:
        about = {"name": ref.name, "id": ref.id, "preset": ref.preset, "config_overrides": dict(ref.config_overrides)}
    return {"outputs_dir": str(outputs_dir), "save_output": keeps, "reference": about}


def worker_spec(
    variant: Variant,
    run: Run,
    trace_dir: Path,
    cache_dir: Path | None = None,
    accuracy: Mapping[str, Any] | None = None,
) -> WorkerSpec:
    """What a worker needs to run ``variant``: its settings, the mesh resolved and the mode decided
    (``accuracy``: :func:`accuracy_fields`)."""
    return WorkerSpec(
        variant_name=variant.name,
        variant_id=variant.id,
        preset=variant.preset,
        config_overrides=dict(variant.config_overrides),
        target=variant.target.resolved(),
        mode=resolve_mode(variant.target, variant.preset),
        workload=variant.workload,
        run=run,
        trace_dir=str(trace_dir),
        cache_dir=None if cache_dir is None else str(cache_dir),
        **(accuracy or {}),
    )


def context() -> dict[str, Any]:
    """Where this sweep runs: the host, the library versions, the checkout's commit."""
    return {
        "machine": provenance.machine_info(),
        "versions": provenance.library_versions(),
        "git": provenance.git_info(REPO_ROOT),
    }


def run_changes(recorded: Mapping[str, Any], run: Run) -> str:
    """How the manifest's ``[run]`` differs from a record's in what shapes the samples ("" if not at all),
    e.g. ``repeats 2 -> 7``."""
    now = run.to_dict()
    return ", ".join(
        f"{k} {_show(recorded.get(k))} -> {_show(now[k])}" for k in SAMPLE_SETTINGS if recorded.get(k) != now[k]
    )


def _show(value: Any) -> str:
    """A [run] value as the manifest writes it (lists, true/false)."""
    return json.dumps(value)


def resume_plan(records: Sequence[Record], run: Run) -> tuple[set[str], dict[str, str]]:
    """(ids to skip: their latest ok record has this [run]; id -> what changed, for those to run again)."""
    latest_ok = {r.variant.id: r for r in records if r.ok}
    changed = {vid: c for vid, r in latest_ok.items() if (c := run_changes(r.config.run, run))}
    return set(latest_ok) - set(changed), changed


def _say_reruns(changed: Mapping[str, str], variants: Sequence[Variant], out: TextIO) -> None:
    by_change: dict[str, int] = {}
    for v in variants:
        if v.id in changed:
            by_change[changed[v.id]] = by_change.get(changed[v.id], 0) + 1
    for change, n in by_change.items():
        out.write(f"re-running {n} variant{'s' * (n != 1)}: [run] changed ({change})\n")


def run_sweep(
    sweep: Sweep, options: SweepOptions, stream: TextIO | None = None, launcher: Launcher | None = None
) -> SweepResult:
    """Run (or resume) every selected variant, holding the sweep folder; append a record for each one that ran."""
    sweep_id = store.check_sweep_id(options.sweep_id or sweep.manifest.name)
    out = stream if stream is not None else sys.stderr
    with sweep_lock(Path(options.reports_dir) / sweep_id, say=lambda s: out.write(f"warning: {s}\n")) as held:
        return _run_locked(sweep, options, sweep_id, out, launcher or LocalLauncher(), held)


def remove_dead_scratch() -> None:
    """Scratch folders (``$TMPDIR/harness-*``) of launchers killed outright before their worker started: a
    worker that started removes its own (:mod:`harness.run.lifeline`); the spec names the launcher's pid."""
    # a worker killed while it removed its own (lifeline.remove_scratch renames it first)
    for folder in Path(tempfile.gettempdir()).glob(f".harness-*{lifeline.ORPHANED_SUFFIX}"):
        shutil.rmtree(folder, ignore_errors=True)
    for folder in Path(tempfile.gettempdir()).glob("harness-*"):
        spec = next(iter(sorted(folder.glob("spec*.json"))), None)
        try:
            pid = json.loads(spec.read_text()).get("parent_pid") if spec else None
        except (OSError, ValueError):
            continue
        if isinstance(pid, int) and not pid_alive(pid):
            shutil.rmtree(folder, ignore_errors=True)


def _run_locked(
    sweep: Sweep, options: SweepOptions, sweep_id: str, out: TextIO, launcher: Launcher, held: HeldLock
) -> SweepResult:
    remove_dead_scratch()
    manifest = sweep.manifest
    sweep_dir = Path(options.reports_dir) / sweep_id
    path = store.results_path(options.reports_dir, sweep_id)
    variants = select(sweep.variants, options.only)
    previous = store.load_records(path)
    done, changed = (set(), {}) if options.rerun else resume_plan(previous, manifest.run)
    _say_reruns(changed, variants, out)
    cache_dir = options.cache_dir or Path(options.reports_dir) / CACHE_DIR
    todo = [(i, v) for i, v in enumerate(variants, start=1) if v.id not in done and not launcher.submitted(v.id)]
    side_by_side = [(i, v) for i, v in todo if resolve_mode(v.target, v.preset) == "compile"]
    jobs = _jobs(options.jobs, side_by_side, previous, launcher, out)
    together = frozenset(v.id for _, v in side_by_side) if jobs > 1 else frozenset()
    eta = Eta(expected_seconds(previous, (v.id for _, v in todo)), together, jobs, {v.id for _, v in todo})
    progress = Progress(len(variants), out, eta)
    result = SweepResult(sweep_id, path)
    run = _VariantRun(sweep, sweep_id, sweep_dir, path, cache_dir, launcher, result, context(), held)
    for i, variant in enumerate(variants, start=1):
        if variant.id in done or launcher.submitted(variant.id):
            progress.skipped(i, variant.name, variant.id, "ok record exists" if variant.id in done else "submitted")
            result.skipped.append(variant)
    if together:
        _side_by_side(run, [(i, v) for i, v in side_by_side], jobs, progress)
    for i, variant in todo:
        if variant.id not in together:
            progress.start(i, variant.name, variant.id)
            run.one(variant, progress)
    order = {v.id: i for i, v in enumerate(variants)}
    result.records.sort(key=lambda r: order.get(r.variant.id, 0))  # manifest order, however they ran
    if result.records:
        out.write("\n" + summary_table(result.records) + "\n")
    sent = (
        f", {len(result.submitted)} submitted (collect with: python -m harness collect {sweep_dir})"
        if result.submitted
        else ""
    )
    out.write(f"\n{len(result.records)} run, {len(result.skipped)} skipped{sent} -> {path}\n")
    out.flush()
    return result


def _jobs(
    asked: int | None,
    compile_only: Sequence[tuple[int, Variant]],
    previous: Sequence[Record],
    launcher: Launcher,
    out: TextIO,
) -> int:
    """How many compile-only variants run at once: ``asked``, else :func:`parallel.default_jobs`;
    one where the launcher is not local (a cluster runs each variant on its own slice)."""
    if not isinstance(launcher, LocalLauncher) or len(compile_only) < 2:
        return 1
    if asked is not None:
        return max(1, min(asked, len(compile_only)))
    ids = {v.id for _, v in compile_only}
    peak = parallel.peak_bytes(r for r in previous if r.variant.id in ids) or parallel.peak_bytes(previous)
    cpus, memory = parallel.cores(), targets.available_memory()
    jobs = parallel.default_jobs(len(compile_only), peak, cpus, memory)
    out.write(parallel.describe(jobs, peak, cpus, memory) + "; --jobs N to choose\n")
    return jobs


@dataclass
class _VariantRun:
    """Runs one variant and records it (from one thread or several: the results file is appended
    whole, under the store's lock; ``result`` under this one's)."""

    sweep: Sweep
    sweep_id: str
    sweep_dir: Path
    path: Path
    cache_dir: Path
    launcher: Launcher
    result: SweepResult
    where: dict[str, Any]
    held: HeldLock
    lock: threading.Lock = field(default_factory=threading.Lock)

    def one(self, variant: Variant, progress: Progress) -> None:
        manifest = self.sweep.manifest
        log_path = self.sweep_dir / "logs" / f"{variant.id}.log"
        accuracy = accuracy_fields(variant, self.sweep.variants, self.sweep_dir / "outputs")
        spec = worker_spec(variant, manifest.run, self.sweep_dir / "traces" / variant.id, self.cache_dir, accuracy)
        try:
            outcome = self.launcher.run(spec, log_path=log_path, progress=progress)
        except Interrupted as e:
            e.detail = (
                f"stopped variant {variant.name} ({variant.id}) and its worker; {len(self.result.records)} "
                f"variant(s) of this run recorded in {self.path}; run the same command again to resume"
            )
            raise
        except OSError as e:  # the worker's log or scratch files: the machine's storage, not the variant
            raise StorageError(e, e.filename or log_path, "starting the worker:") from e
        if outcome is None:
            progress.finish("submitted", 0.0)
            with self.lock:
                self.result.submitted.append(variant)
            return
        record = build_record(
            sweep_id=self.sweep_id,
            manifest=manifest,
            variant=variant,
            run=manifest.run,
            outcome=outcome,
            context=self.where,
            log_path=log_path,
        )
        with self.lock:
            self.held.check()  # the folder is still ours: a vanished one is an error, not a new empty results file
            store.append_record(self.path, record)
            self.result.records.append(record)
        progress.finish(outcome.status, outcome.duration_s, outcome.error)


def _side_by_side(run: _VariantRun, todo: Sequence[tuple[int, Variant]], jobs: int, progress: Progress) -> None:
    """``todo`` (compile-only) on ``jobs`` threads, each driving one worker at a time. On a signal the
    main thread sets ``progress.stop``: every running worker is ended by its launcher, and the
    :class:`Interrupted` goes on once all threads are done."""
    progress.stop = threading.Event()

    def task(i: int, variant: Variant) -> None:
        if progress.stop is not None and progress.stop.is_set():
            return
        handle = progress.task(i, variant.name, variant.id)
        handle.start()
        run.one(variant, handle)

    pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="variant")
    futures = [pool.submit(task, i, v) for i, v in todo]
    try:
        for f in futures:
            f.result()
    except Interrupted as e:
        progress.stop.set()
        progress.stop_signal = e.signum
        pool.shutdown(wait=True, cancel_futures=True)
        e.detail = (
            f"stopped the running compile-only variants and their workers; {len(run.result.records)} variant(s) "
            f"of this run recorded in {run.path}; run the same command again to resume"
        )
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
