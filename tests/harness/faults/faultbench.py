"""The fault suite's bench (its fixture: ``conftest.py``): a three-variant sweep on the JAX-free
``test:ok`` preset, faults injected at one call (``inject/faultinject.py``), and the checks every
case ends with: the exit status, one ``error:`` line naming the cause and the path, no traceback,
every record whole and none duplicated, no process or scratch folder left, and the same command
completing the sweep once the fault is cleared.

Most cases run the sweep in this process (``cli.main``: no interpreter to start, no JAX to import)
with its workers as real subprocesses; the cases that kill the sweep run ``python -m harness``
itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.results.record import Record, parse
from tests.harness.run.test_interrupt import wait_for  # the same polling bound (60 s) as here

INJECT = Path(__file__).parent / "inject"
if str(INJECT) not in sys.path:
    sys.path.insert(0, str(INJECT))
import faultinject  # noqa: E402 - the injector the sweep's subprocesses load from INJECT too

REPO = Path(__file__).resolve().parents[3]
SWEEP_ID = "f"
VARIANTS = ("a", "b", "c")
MANIFEST = """\
schema_version = 1
[target]
devices = 1
[model]
preset = "test:ok"
[workload]
stages = ["denoise_step"]
[run]
repeats = 1
warmup = 0
timeout_s = 120
[[variants]]
name = "a"
[[variants]]
name = "b"
overrides = { "test.run_s" = 0.002 }
[[variants]]
name = "c"
overrides = { "test.run_s" = 0.003 }
"""
WAIT_S = 60.0  # bound on every wait; a healthy run needs well under a second


def tagged(tag: str) -> list[int]:
    """Live (not zombie) processes started with ``HARNESS_FAULT_TAG=tag`` in their environment."""
    out, needle = [], f"HARNESS_FAULT_TAG={tag}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            out.append(int(entry.name))
    return out


@dataclass
class Outcome:
    code: int
    out: str
    err: str


@dataclass
class Bench:
    """One sweep's folders and the ways to run it, with or without a fault."""

    root: Path
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    last: Outcome = field(default_factory=lambda: Outcome(0, "", ""))  # of the last in-process sweep

    @property
    def manifest(self) -> Path:
        return self.root / "sweep.toml"

    @property
    def reports(self) -> Path:
        return self.root / "reports"

    @property
    def sweep_dir(self) -> Path:
        return self.reports / SWEEP_ID

    @property
    def results(self) -> Path:
        return self.sweep_dir / "results.jsonl"

    @property
    def tmpdir(self) -> Path:
        return self.root / "tmp"

    def variant_id(self, name: str) -> str:
        from harness.expansion import load_sweep

        return next(v.id for v in load_sweep(self.manifest).variants if v.name == name)

    def args(self, *extra: str) -> list[str]:
        return ["sweep", str(self.manifest), "--reports", str(self.reports), "--sweep-id", SWEEP_ID, *extra]

    def env(self, worker_fault: dict[str, Any] | None = None, **more: str) -> dict[str, str]:
        """What the sweep's subprocesses get: the injector on the path, a private TMPDIR, the tag."""
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(INJECT), str(REPO)]),
            "TMPDIR": str(self.tmpdir),
            "HARNESS_FAULT_TAG": self.tag,
            **more,
        }
        env.pop("HARNESS_FAULT", None)
        if worker_fault is not None:
            env["HARNESS_FAULT"] = json.dumps({"proc": "worker", **worker_fault})
        return env

    def sweep(
        self, *extra: str, fault: dict[str, Any] | None = None, worker_fault: dict[str, Any] | None = None, **env: str
    ) -> Outcome:
        """``python -m harness sweep ...`` in this process: ``fault`` fires here, ``worker_fault`` in a worker."""
        self.capsys.readouterr()
        with self.monkeypatch.context() as m:
            for k, v in self.env(worker_fault, **env).items():
                m.setenv(k, v)
            m.setattr(tempfile, "tempdir", str(self.tmpdir))
            if fault is not None:
                faultinject.install({"proc": "sweep", **fault}, m.setattr)
            code = cli.main(self.args(*extra))
        captured = self.capsys.readouterr()
        self.last = Outcome(code, captured.out, captured.err)
        return self.last

    def spawn(self, args: list[str], fault: dict[str, Any] | None = None) -> subprocess.Popen[str]:
        """``python -m harness <args>`` as its own process (``fault`` fires in it: kills included)."""
        env = self.env()
        if fault is not None:
            env["HARNESS_FAULT"] = json.dumps(fault)
        return subprocess.Popen(
            [sys.executable, "-m", "harness", *args],
            env=env,
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def run(self, args: list[str], fault: dict[str, Any] | None = None) -> Outcome:
        proc = self.spawn(args, fault)
        try:
            out, err = proc.communicate(timeout=WAIT_S * 2)
        finally:
            proc.kill()
        return Outcome(proc.returncode, out, err)

    # ------------------------------------------------------------------ checks

    def records(self) -> list[Record]:
        """Every line of the results file, each a whole record (a torn or foreign line fails the test)."""
        if not self.results.exists():
            return []
        data = self.results.read_bytes()
        assert not data or data.endswith(b"\n"), f"{self.results} ends in a torn line"
        return [parse(json.loads(line), f"{self.results}:{n}") for n, line in enumerate(data.splitlines(), 1)]

    def assert_whole(self) -> list[Record]:
        """Records whole, no variant with two ok records, no temporary file left in the sweep folder."""
        records = self.records()
        ok = [r.variant.name for r in records if r.ok]
        assert len(ok) == len(set(ok)), f"duplicate ok records: {sorted(ok)}"
        if self.sweep_dir.is_dir():
            assert not [p.name for p in self.sweep_dir.glob("*.tmp")] + [p.name for p in self.sweep_dir.glob(".*.tmp")]
        return records

    def assert_nothing_left(self) -> None:
        wait_for(f"processes tagged {self.tag} to end", lambda: not tagged(self.tag))
        wait_for(f"harness-* folders in {self.tmpdir} to go", lambda: not list(self.tmpdir.glob("harness-*")))

    def assert_completes(self) -> list[Record]:
        """The same command, fault cleared: exit 0, every variant's latest record ok, none twice."""
        again = self.sweep()
        assert again.code == 0, again.err
        assert "error:" not in again.err and "Traceback" not in again.err, again.err
        records = self.assert_whole()
        latest = {r.variant.name: r.status for r in records}
        assert latest == dict.fromkeys(VARIANTS, "ok"), latest
        assert (self.sweep_dir / "index.html").is_file() and (self.sweep_dir / "results.csv").is_file()
        self.assert_nothing_left()
        return records


def assert_one_line(err: str, *needles: str) -> str:
    """Exactly one ``error:`` line, the last one, holding every needle; no traceback."""
    assert "Traceback" not in err, err
    lines = err.rstrip("\n").splitlines()
    errors = [ln for ln in lines if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0] == lines[-1], err
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]
