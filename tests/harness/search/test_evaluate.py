"""A record's score for the search: a proxy's predicted step and memory scaled per block to full depth,
does-not-fit when the scaled memory exceeds the device's, failures kept with their error."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from harness.families import Memory, OnTarget, Predicted, Static, TraceDevice
from harness.search.evaluate import score_of

GiB = 2**30


def _record(status: str = "ok", stage_status: str = "ok", fits: bool | None = True, error: str | None = None) -> Any:
    entry = SimpleNamespace(
        status=stage_status,
        error=error,
        predicted=Predicted(
            step_s=0.010,
            exposed_all_gather_fraction=0.05,
            wasted_fraction=0.1,
            device=TraceDevice(exposed_collective_ns=2e6),
        ),
        static=Static(memory=Memory(bound_bytes=3 * GiB, argument_bytes=1 * GiB), target=OnTarget(fits=fits)),
    )
    return SimpleNamespace(
        status=status, error=error, stages={"denoise_step": entry}, variant=SimpleNamespace(id="abc")
    )


def test_a_proxy_is_scaled_per_block() -> None:
    s = score_of(_record(), "denoise_step", depth=4, full_layers=48, hbm_bytes=96 * GiB)
    assert s.usable and s.depth == 4 and s.variant_id == "abc"
    assert s.step_s == pytest.approx(0.120) and s.exposed_collective_s == pytest.approx(0.024)
    assert s.memory_bytes == 3 * GiB + 11 * GiB  # the arguments (weights) of the 44 blocks left out
    assert s.exposed_all_gather == 0.05 and s.wasted == 0.1


def test_full_depth_is_read_as_is() -> None:
    s = score_of(_record(), "denoise_step", depth=48, full_layers=48, hbm_bytes=96 * GiB)
    assert s.step_s == 0.010 and s.memory_bytes == 3 * GiB


def test_a_proxy_whose_scaled_memory_exceeds_the_device_does_not_fit() -> None:
    s = score_of(_record(), "denoise_step", depth=4, full_layers=48, hbm_bytes=12 * GiB)
    assert s.status == "does-not-fit" and s.fits is False and not s.usable


@pytest.mark.parametrize(
    ("record", "status"),
    [
        (_record(fits=False), "does-not-fit"),
        (_record(stage_status="does-not-fit", fits=None), "does-not-fit"),
        (_record(status="failed", error="boom"), "failed"),
    ],
)
def test_what_the_record_says_against_it_stands(record: Any, status: str) -> None:
    s = score_of(record, "denoise_step", depth=48, full_layers=48, hbm_bytes=None)
    assert s.status == status and not s.usable
    if status == "failed":
        assert s.error == "boom"
