"""harness.metrics.hlo.replica_groups: every printed form of a collective's device groups, read once
by the parse (``Instruction.groups``) for the attribution (collective_cause) and the timeline simulator."""

from __future__ import annotations

import pytest

from harness.metrics.hlo import parse
from harness.metrics.hlo.replica_groups import device_groups, pairs
from harness.metrics.timeline.groups import all_devices


def _parsed_groups(attributes: str) -> tuple[tuple[int, ...], ...] | None:
    """The groups the parse gives an all-reduce printed with these attributes."""
    text = f"""HloModule m
ENTRY %main (p: f32[4]) -> f32[4] {{
  %p = f32[4]{{0}} parameter(0)
  ROOT %ar = f32[4]{{0}} all-reduce(%p), {attributes}
}}
"""
    return parse(text).computations["main"][1].groups


def replica_groups(attributes: str, num_devices: int) -> tuple[tuple[int, ...], ...]:
    """The groups the simulator gives a collective with these attributes."""
    return all_devices(_parsed_groups(attributes), num_devices)


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ("replica_groups={{0,4},{1,5},{2,6},{3,7}}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("replica_groups=[4,2]<=[8]", [[0, 1], [2, 3], [4, 5], [6, 7]]),
        ("replica_groups=[2,4]<=[2,2,2]T(1,0,2)", [[0, 1, 4, 5], [2, 3, 6, 7]]),
        ("replica_groups=mesh['axis_0'=2,'axis_1'=4] {'axis_0'}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
        # Devices on a [4, 2] mesh: device = 2 * a0 + a1. Sub-axis (pre-size)size of axis_0 (size 4):
        # a0 = 2 * pre + part; (2)2 is the minor half of axis_0, (1)2 the major half.
        ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0':(2)2}", [[0, 2], [1, 3], [4, 6], [5, 7]]),
        ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0':(1)2}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0':(2)2, 'axis_1'}", [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("replica_groups={}", [[]]),
        ("source_target_pairs={{0,1},{1,0}}", [[0, 1], [1, 0]]),
    ],
)
def test_each_printed_form_gives_its_groups(attributes: str, expected: list[list[int]]) -> None:
    assert device_groups(attributes) == expected
    assert _parsed_groups(attributes) == tuple(map(tuple, expected))  # what the model holds for every reader


def test_the_simulator_reads_sub_axes_and_treats_empty_groups_as_all_devices() -> None:
    assert replica_groups("replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0':(2)2}", 8) == (
        (0, 2),
        (1, 3),
        (4, 6),
        (5, 7),
    )
    assert replica_groups("replica_groups={}", 4) == ((0, 1, 2, 3),)
    assert replica_groups("dimensions={0}", 2) == ((0, 1),)
    assert pairs("source_target_pairs={{0,1},{1,2},{2,0}}") == ((0, 1), (1, 2), (2, 0))


def test_a_bad_mesh_form_names_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="unknown axis 'axis_9'"):
        device_groups("replica_groups=mesh['axis_0'=4] {'axis_9'}")
    with pytest.raises(ValueError, match="does not divide"):
        device_groups("replica_groups=mesh['axis_0'=4] {'axis_0':(3)2}")
