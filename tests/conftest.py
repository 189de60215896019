"""Test session set-up: 8 simulated CPU devices, set before JAX is imported anywhere."""

from __future__ import annotations

import importlib.util
import os

import pytest

# FAST_COMPILE's options for every program (test_strategies, test_passes pass them per program): the
# same computation with less LLVM work, where eager ops compile one program each
# (benchmarks/results/test-durations-2026-11-29.md, fast-compile-flags-2026-11-29.md).
# Not where libtpu is installed (`nox -s aot`): XLA_FLAGS reach a TPU compile through jaxlib's debug
# options, and there the compiled program is what the tests measure.
FAST = (
    ()
    if importlib.util.find_spec("libtpu")
    else ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
)
FLAGS = ("--xla_force_host_platform_device_count=8", *FAST)
os.environ["XLA_FLAGS"] = " ".join(
    [f for f in os.environ.get("XLA_FLAGS", "").split() if f.split("=")[0] not in {g.split("=")[0] for g in FLAGS}]
    + list(FLAGS)
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

# Parity tests compare fp32 against torch; XLA:CPU's default matmul precision is already fp32,
# "highest" makes the same tests meaningful on GPU/TPU too.
jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture
def optimised_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subprocesses started by the test compile as a user's do, without FAST's options: for a test
    that times the programs it compiles (this process keeps its own, set when JAX loaded)."""
    monkeypatch.setenv("XLA_FLAGS", " ".join(f for f in os.environ["XLA_FLAGS"].split() if f not in FAST))
