"""The xpk launcher: each variant becomes one ``xpk workload create`` on a GKE cluster, running the
same worker as a local sweep (``python -m harness run-variant``) on every host of the slice.

The sweep folder ``<results-dir>/<sweep-id>/`` must be one path that both this machine and the
workload's containers see (a bucket mounted through GCS FUSE is the GKE convention; any shared
path works). Submitting a variant writes its :class:`~harness.run.spec.WorkerSpec` to
``specs/<id>.json``; the workload's processes write ``outputs/<id>/out-<process>.json`` and traces
under ``traces/<id>/``; ``python -m harness collect <results-dir>/<sweep-id>`` turns finished
outputs into records (:mod:`harness.commands.collect`). A submission ``xpk`` refuses is a failed
record naming its exit status and output; a variant already submitted is not submitted again.

Workload names follow xpk's rule (``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 40 characters; read
from xpk's ``parser/validators.py``): ``h-<sweep id, folded>-<variant id>``.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.results.provenance import now
from harness.results.record import Outcome
from harness.run.progress import Progress
from harness.run.spec import WorkerSpec
from harness.vocabulary import Status

NAME_PATTERN = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
NAME_MAX = 40
SPECS, OUTPUTS = "specs", "outputs"


def workload_name(sweep_id: str, variant_id: str) -> str:
    """A DNS-1035 name xpk accepts, unique per (sweep, variant): the variant id keeps it unique."""
    room = NAME_MAX - len("h--") - len(variant_id)
    folded = re.sub(r"[^a-z0-9]+", "-", sweep_id.lower()).strip("-")[:room].strip("-")
    name = f"h-{folded}-{variant_id}" if folded else f"h-{variant_id}"
    if not NAME_PATTERN.fullmatch(name) or len(name) > NAME_MAX:
        raise ValueError(f"variant id {variant_id!r} gives the workload name {name!r}, which xpk would refuse")
    return name


@dataclass(frozen=True)
class XpkOptions:
    cluster: str
    tpu_type: str
    docker_image: str
    results_dir: Path  # the same path on this machine and in the workload's containers
    project: str | None = None
    zone: str | None = None
    xpk: str = "xpk"  # the xpk executable
    python: str = "python"  # in the container


@dataclass(frozen=True)
class XpkLauncher:
    """Submits each variant as one xpk workload; the records come later, from ``harness collect``."""

    options: XpkOptions
    sweep_id: str
    dry_run: bool = False

    @property
    def sweep_dir(self) -> Path:
        return self.options.results_dir / self.sweep_id

    def spec_path(self, variant_id: str) -> Path:
        return self.sweep_dir / SPECS / f"{variant_id}.json"

    def submitted(self, variant_id: str) -> bool:
        return self.spec_path(variant_id).exists()

    def command(self, spec: WorkerSpec) -> list[str]:
        """The exact ``xpk workload create`` argv for one variant."""
        o = self.options
        inner = shlex.join(
            [
                o.python,
                "-m",
                "harness",
                "run-variant",
                str(self.spec_path(spec.variant_id)),
                "--out",
                str(self.sweep_dir / OUTPUTS / spec.variant_id),
            ]
        )
        argv = [
            o.xpk,
            "workload",
            "create",
            "--cluster",
            o.cluster,
            "--workload",
            workload_name(self.sweep_id, spec.variant_id),
            "--tpu-type",
            o.tpu_type,
            "--docker-image",
            o.docker_image,
            "--command",
            inner,
        ]
        for flag, value in (("--project", o.project), ("--zone", o.zone)):
            if value:
                argv += [flag, value]
        return argv

    def cluster_spec(self, spec: WorkerSpec) -> WorkerSpec:
        """The spec as the workload runs it: measured on the slice (``auto`` means the hardware is there),
        no local parent to watch, traces in the shared folder; JAX finds the coordinator itself."""
        mode = "measure" if spec.target.mode == "auto" else spec.target.mode
        return dataclasses.replace(
            spec,
            mode=mode,
            parent_pid=None,
            scratch_dir=None,
            status_path=None,
            cache_dir=None,
            coordinator=None,
            trace_dir=str(self.sweep_dir / "traces" / spec.variant_id),
        )

    def run(self, spec: WorkerSpec, *, log_path: Path, progress: Progress | None = None) -> Outcome | None:
        """Submit (None: submitted, the record comes from collect), or a failed outcome if xpk refused."""
        spec = self.cluster_spec(spec)
        argv = self.command(spec)
        if self.dry_run:
            print(shlex.join(argv), flush=True)
            return None
        path = self.spec_path(spec.variant_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(spec.to_json())
        started_at, start = now(), time.monotonic()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("w") as log:
            log.write(f"[launcher] {started_at} {shlex.join(argv)}\n")
            log.flush()
            try:
                proc = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
                rc, why = proc.returncode, f"exited with code {proc.returncode}"
            except OSError as e:
                rc, why = -1, f"could not start: {e}"
            log.write(f"[launcher] {now()} xpk {why}\n")
        if rc == 0:
            return None
        path.unlink(missing_ok=True)  # not submitted: the next sweep tries again
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[1:-1][-20:])
        error = f"xpk workload create {why} (workload {workload_name(self.sweep_id, spec.variant_id)})\n{tail}"
        return Outcome(Status.FAILED, error.rstrip(), {}, time.monotonic() - start, started_at, now())
