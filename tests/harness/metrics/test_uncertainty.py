"""The predicted step's interval from its constants' stated uncertainty, with known answers."""

from __future__ import annotations

import pytest

from harness.metrics import timeline
from harness.metrics.hlo import parse
from harness.metrics.timeline.specs import Constant, TimelineSpec, Topology

N = 1000  # an add over N f32: 12 N bytes
ADD = f"""HloModule m, is_scheduled=true

ENTRY %main (p: f32[{N}]) -> f32[{N}] {{
  %p = f32[{N}]{{0}} parameter(0)
  ROOT %a = f32[{N}]{{0}} add(f32[{N}]{{0}} %p, f32[{N}]{{0}} %p)
}}
"""


def _spec() -> TimelineSpec:
    c = {
        "peak_flops_per_s": Constant(1e12, "FLOP/s", "published: a datasheet"),
        "hbm_bytes_per_s": Constant(1e9, "B/s", "measured: here"),  # +-15%
        "op_overhead_s": Constant(1e-6, "s", "assumed: a guess"),  # +-50%
        "collective_latency_s": Constant(0.0, "s", "assumed: a guess"),
        "link_bytes_per_s": Constant(1e9, "B/s", "published: a datasheet"),
        "tile_m": Constant(8, "elements", "assumed: not moved"),
    }
    return TimelineSpec("t", "gpu", c, Topology("switch", (1,)))


def test_the_interval_puts_every_rate_and_time_at_its_bounds() -> None:
    out = timeline.uncertainty(parse(ADD), _spec())
    memory = 12 * N / 1e9
    assert out["step_s"] == pytest.approx(memory + 1e-6)
    fast, slow = memory / 1.15 + 1e-6 / 1.5, memory * 1.15 + 1e-6 * 1.5
    assert out["points_s"]["fast"] == pytest.approx(fast) and out["points_s"]["slow"] == pytest.approx(slow)
    assert out["interval_s"] == pytest.approx([fast, slow])
    assert out["points_s"]["op_overhead_s:slow"] == pytest.approx(memory + 1.5e-6)
    assert out["points_s"]["hbm_bytes_per_s:fast"] == pytest.approx(memory / 1.15 + 1e-6)
    assert "tile_m:fast" not in out["points_s"]  # a tile is not a rate: not moved
    assert out["uncertainty"]["op_overhead_s"] == 0.5 and out["uncertainty"]["hbm_bytes_per_s"] == 0.15
    assert "tile_m" not in timeline.sensitivity(parse(ADD), _spec())["constants"]
