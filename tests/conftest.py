"""Test session set-up: 8 simulated CPU devices, set before JAX is imported anywhere."""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "").replace("--xla_force_host_platform_device_count=8", "")
    + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402

# Parity tests compare fp32 against torch; XLA:CPU's default matmul precision is already fp32,
# "highest" makes the same tests meaningful on GPU/TPU too.
jax.config.update("jax_default_matmul_precision", "highest")
