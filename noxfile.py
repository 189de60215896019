"""How everything runs, locally and in CI: `nox -s <session> -- <args>`.

Sessions reuse their virtualenvs; the first run installs the pinned dependencies from
pyproject.toml (torch resolves to the 2.13.0 CPU build that pip finds on disk).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nox

nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]

PYTHON = "3.11"
CPU_ENV = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}


def _ensure_chromium(session: nox.Session) -> None:
    """The report test opens the HTML in a real headless browser: Debian's chromium."""
    if shutil.which("chromium") or not shutil.which("apt-get") or os.geteuid() != 0:
        return
    session.run("apt-get", "update", "-qq", external=True, success_codes=[0, 100])
    session.run("apt-get", "install", "-y", "-qq", "chromium", external=True, success_codes=[0, 100])


def _install(session: nox.Session, extras: str = "") -> None:
    target = f".[{extras}]" if extras else "."
    session.install("-e", target)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Unit and parity tests on CPU with 8 simulated devices. Extra args go to pytest."""
    _install(session, "test,docs")  # docs: the site's build test (tests/docs)
    _ensure_chromium(session)
    args = session.posargs or ["-q", "-m", "not slow"]
    session.run("pytest", *args, env=CPU_ENV)


@nox.session(python=PYTHON)
def slow(session: nox.Session) -> None:
    """The tests marked slow (> ~20 s each on 2 cores: the README's generate command, full-size
    parity and the long sweeps), which `tests` leaves out to stay fast. Extra args go to pytest."""
    _install(session, "test")
    _ensure_chromium(session)
    args = session.posargs or ["-q", "-m", "slow and not aot"]
    session.run("pytest", *args, env=CPU_ENV)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff (style, imports; `ruff format` owns the layout), mypy (public signatures) and the CI
    workflows against GitHub's schema."""
    _install(session, "lint")
    paths = ("ltx2", "harness", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", *paths)
    session.run("ruff", "check", *paths, *session.posargs)
    session.run("mypy", "ltx2", "harness")
    # The schema ships inside check-jsonschema (vendored), so this works offline.
    workflows = sorted(str(p) for p in Path(".github/workflows").glob("*.yml"))
    session.run("check-jsonschema", "--builtin-schema", "vendor.github-workflows", *workflows)


def _aot_extras(args: list[str]) -> str:
    """The compile-only extras the manifests among `args` may need (TPU/GPU targets)."""
    import tomllib

    platforms = set()
    for arg in args:
        if arg.endswith(".toml") and os.path.exists(arg):
            with open(arg, "rb") as f:
                platforms.add(tomllib.load(f).get("target", {}).get("platform"))
    return ",".join(extra for platform, extra in (("tpu", "tpu-aot"), ("gpu", "gpu-aot")) if platform in platforms)


@nox.session(python=PYTHON)
def sweep(session: nox.Session) -> None:
    """Run a manifest (default experiments/cpu.toml): `nox -s sweep -- experiments/v6e.toml`.
    A TPU/GPU manifest installs its compile-only extra, so it compiles for the target here."""
    args = session.posargs or ["experiments/cpu.toml"]
    _install(session, _aot_extras(args))
    session.run("python", "-m", "harness", "sweep", *args, env={**CPU_ENV, **dict(os.environ)})


@nox.session(python=PYTHON)
def aot(session: nox.Session) -> None:
    """Compile-only tests for TPU and GPU targets (installs the [tpu-aot] and [gpu-aot] extras, ~1.1 GB).
    Extra args go to pytest."""
    _install(session, "test,tpu-aot,gpu-aot")
    args = session.posargs or ["-q", "-m", "aot", "tests/harness/metrics/test_aot.py"]
    session.run("pytest", *args, env=CPU_ENV)


@nox.session(python=PYTHON)
def report(session: nox.Session) -> None:
    """Render the HTML report of a results file: `nox -s report -- reports/<id>/results.jsonl`."""
    _install(session)
    session.run("python", "-m", "harness", "report", *session.posargs)


@nox.session(python=PYTHON)
def gate(session: nox.Session) -> None:
    """Perf gate against a committed baseline (default experiments/nightly.toml). A TPU/GPU manifest
    (experiments/nightly-tpu.toml) installs its compile-only extra, as `sweep` does; exit codes:
    0 clean, 1 regression, 2 could not run, 3 the model changed (re-baseline with a reason)."""
    args = session.posargs or ["experiments/nightly.toml"]
    _install(session, _aot_extras(args))
    session.run("python", "-m", "harness", "gate", *args, env={**CPU_ENV, **dict(os.environ)})


@nox.session(python=PYTHON)
def ab(session: nox.Session) -> None:
    """This tree's measured step timed against another commit's code, interleaved in one run
    (default experiments/ab.toml against the baseline's commit; `-- experiments/ab.toml --against REV`).
    Exit 1: this tree is slower; 2: cannot compare (docs/gates.md, "A same-run A/B")."""
    _install(session)
    args = session.posargs or ["experiments/ab.toml"]
    session.run("python", "-m", "harness", "ab", *args, env={**CPU_ENV, **dict(os.environ)})


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ with ``mkdocs build --strict``: any warning fails it, and
    mkdocs.yml's ``validation`` makes every link and anchor that does not resolve a warning. The
    reference pages are generated from the code during the build (docs/hooks.py)."""
    _install(session, "docs")
    session.run("mkdocs", "build", "--strict", "--clean", *session.posargs, env={**CPU_ENV, "NO_MKDOCS_2_WARNING": "1"})


@nox.session(python=PYTHON)
def baseline(session: nox.Session) -> None:
    """Re-baseline a manifest's gate on purpose: `nox -s baseline -- experiments/nightly-tpu.toml`
    runs it afresh and writes the baseline its gate reads (commit it saying why)."""
    args = session.posargs or ["experiments/nightly.toml"]
    _install(session, _aot_extras(args))
    session.run("python", "-m", "harness", "baseline", "update", *args, env={**CPU_ENV, **dict(os.environ)})


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """JAX vs diffusers benchmarks (pytest-benchmark), not part of `tests`."""
    _install(session, "test")
    args = session.posargs or ["tests/benchmarks", "--benchmark-json=reports/bench.json"]
    # One CPU device (tests/benchmarks/conftest.py drops the 8 simulated ones): single-device timings.
    session.run("pytest", "-p", "no:cacheprovider", *args, env={"JAX_PLATFORMS": "cpu"})
