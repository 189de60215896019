""".ci/run: what CI runs on every submission, and within what time."""

from __future__ import annotations

import shlex
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_tests_and_both_deterministic_gates():
    """.ci/run: the README's test command, then nightly.toml's deterministic gate, nightly-tpu.toml's and
    the A/B of the step against the baseline's code, each under a ceiling; nothing else (the README's
    main job runs at night: CI stays under 40 min)."""
    lines = (REPO / ".ci" / "run").read_text().splitlines()
    steps = [shlex.split(line.strip(), posix=False) for line in lines if line.strip().startswith("step ")]
    assert [" ".join(step[3:]) for step in steps[1:]] == [
        "python3 -m nox -s tests",
        "python3 -m nox -s gate -- experiments/nightly.toml --timings off",
        "python3 -m nox -s gate -- experiments/nightly-tpu.toml",
        # the baseline's commit, in the gates' venv (what `nox -s ab` runs, without a venv of its own)
        "env XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu .nox/gate/bin/python -m harness ab "
        'experiments/ab.toml --against "$ab_ref"',
    ]
    assert "nox -s tests" in (REPO / "README.md").read_text()  # the README's test command, as CI runs it
    assert sum(int(step[2]) for step in steps) <= 90 * 60  # hang ceilings together within CI's 90 min
