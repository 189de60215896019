"""Where a record comes from: host, library versions, git commit."""

from __future__ import annotations

from pathlib import Path

from harness.results import provenance


def test_provenance_fields() -> None:
    machine = provenance.machine_info()
    assert {"hostname", "cpu", "cpu_count", "os", "python", "backend", "device_kind", "device_count"} == set(machine)
    versions = provenance.library_versions()
    assert set(versions) == {"jax", "jaxlib", "flax", "torch", "numpy"} and versions["jax"]
    git = provenance.git_info(Path(__file__).parent)
    assert set(git) == {"commit", "dirty"}
    assert provenance.git_info("/")["commit"] is None
