"""benchmarks/reprediction.py's pure parts: the dump pair it writes, op kinds read from HLO text, how
per-op times moved, and the markdown tables (no simulation, no subprocess)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from benchmarks import rates_heldout, reprediction

HLO = """HloModule jit_step, is_scheduled=true

%fused_slice (p0: bf16[48,8,16], p1: s32[]) -> bf16[8,16] {
  %p0 = bf16[48,8,16]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %c = s32[] constant(0)
  %ds = bf16[1,8,16]{2,1,0} dynamic-slice(%p0, %p1, %c, %c), dynamic_slice_sizes={1,8,16}
  ROOT %b = bf16[8,16]{1,0} bitcast(%ds)
}

%fused_dot (p0: bf16[48,8,16], p1: s32[], p2: bf16[4,8]) -> bf16[4,16] {
  %p0 = bf16[48,8,16]{2,1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %p2 = bf16[4,8]{1,0} parameter(2)
  %w = bf16[8,16]{1,0} fusion(%p0, %p1), kind=kLoop, calls=%fused_slice
  ROOT %d = bf16[4,16]{1,0} dot(%p2, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_mm (p0: bf16[4,8], p1: bf16[8,16]) -> bf16[4,16] {
  %p0 = bf16[4,8]{1,0} parameter(0)
  %p1 = bf16[8,16]{1,0} parameter(1)
  ROOT %d.1 = bf16[4,16]{1,0} dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_static (p0: bf16[48,8,16], p1: bf16[4,8]) -> bf16[4,16] {
  %p0 = bf16[48,8,16]{2,1,0} parameter(0)
  %p1 = bf16[4,8]{1,0} parameter(1)
  %s = bf16[1,8,16]{2,1,0} slice(%p0), slice={[47:48], [0:8], [0:16]}
  %b = bf16[8,16]{1,0} bitcast(%s)
  ROOT %d.2 = bf16[4,16]{1,0} dot(%p1, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (w: bf16[48,8,16], i: s32[], x: bf16[4,8], v: bf16[8,16]) -> (bf16[4,16], bf16[4,16]) {
  %w = bf16[48,8,16]{2,1,0} parameter(0)
  %i = s32[] parameter(1)
  %x = bf16[4,8]{1,0} parameter(2)
  %v = bf16[8,16]{1,0} parameter(3)
  %fusion.1 = bf16[4,16]{1,0} fusion(%w, %i, %x), kind=kOutput, calls=%fused_dot
  %fusion.2 = bf16[4,16]{1,0} fusion(%x, %v), kind=kOutput, calls=%fused_mm
  %copy.3 = bf16[4,16]{0,1} copy(%fusion.2)
  %fusion.4 = bf16[4,16]{1,0} fusion(%w, %x), kind=kOutput, calls=%fused_static
  ROOT %t = (bf16[4,16]{1,0}, bf16[4,16]{0,1}) tuple(%fusion.1, %copy.3)
}
"""


@pytest.fixture(scope="module")
def rep() -> ModuleType:
    return reprediction


def test_write_dump_pair(rep: ModuleType, tmp_path: Path) -> None:
    meta = {"topology": "v6e:2x4", "platform": "tpu", "device_coords": [(0, 0, 0, 0), (1, 0, 0, 0)], "variant": "a"}
    hlo = rep.write_dump(tmp_path / "sub" / "k", "HloModule m\n", meta)
    assert hlo == tmp_path / "sub" / "k.hlo" and hlo.read_text() == "HloModule m\n"
    written = json.loads((tmp_path / "sub" / "k.json").read_text())
    assert written == {
        "topology": "v6e:2x4",
        "platform": "tpu",
        "device_coords": [[0, 0, 0, 0], [1, 0, 0, 0]],
        "variant": "a",
    }
    with pytest.raises(ValueError, match="lacks device_coords"):
        rep.write_dump(tmp_path / "x", "", {"topology": "v6e:2x4", "platform": "tpu"})


def test_op_kinds_follow_nested_fusions(rep: ModuleType) -> None:
    kinds = rep.op_kinds(HLO)
    assert kinds["fusion.1"] == "matmul+slice"  # the dot's weights come through a nested slice fusion
    assert kinds["fusion.2"] == "matmul"
    assert kinds["fusion.4"] == "matmul+slice"  # an unrolled layer's static slice of the stack
    assert kinds["copy.3"] == "copy"
    assert kinds["t"] == "tuple" and kinds["i"] == "parameter"
    assert rep.by_kind({"fusion.1": 5.0, "fusion.2": 2.0, "copy.3": 1.0, "gone": 3.0}, kinds) == {
        "matmul+slice": 5.0,
        "matmul": 2.0,
        "copy": 1.0,
        "other": 3.0,
    }


def test_moves_and_scope_change(rep: ModuleType) -> None:
    old = {"a": 10.0, "b": 4.0, "c": 1.0, "e": 7.0}
    new = {"a": 3.0, "b": 6.0, "c": 1.0, "d": 1.5, "e": 7.5}  # e moved by 0.5 ns: noise, not counted
    assert rep.moves(old, new) == {"fell_ns": 7.0, "fell": 1, "rose_ns": 3.5, "rose": 2}
    assert rep.scope_change({"x": 9e6, "y": 1e6}, {"x": 2e6, "y": 4e6}) == ("x", 9e6, 2e6)
    assert rep.scope_change({}, {}) is None


def _side(step_s: float, interval: list[float] | None, traffic: float) -> dict[str, object]:
    return {"step_s": step_s, "interval_s": interval, "memory_traffic_bytes": traffic, "compute_ns_by_scope": {}}


def test_tables(rep: ModuleType) -> None:
    new = {**_side(0.5, [0.45, 0.6], 300e9), "compute_ns_by_scope": {"t/ff": 1e7}}
    old = {**_side(1.0, None, 900e9), "compute_ns_by_scope": {"t/ff": 9e7}}
    rows = [
        {"variant": "v", "stage": "s", "record_step_s": 0.5, "old": old, "new": new},
        {"variant": "w", "stage": "s", "record_step_s": 0.25, "old": None, "old_error": "boom", "new": new},
    ]
    lines = rep.table(rows).splitlines()
    assert lines[2] == "| v | s | 1000 | 500 [450, 600] | 0.50 | yes | 900.0 -> 300.0 | `t/ff` 90 -> 10 |"
    assert lines[3] == "| w | s | failed: boom | 500 [450, 600] | - | NO: record 250.0 ms | 300.0 |  |"
    kind_rows = [
        {
            "variant": "v",
            "stage": "s",
            "old_by_kind": {"matmul+slice": 4e7, "tuple": 1e6},
            "new_by_kind": {"matmul+slice": 1e7, "tuple": 1e6},
            "moves": {"fell_ns": 3e7, "fell": 2, "rose_ns": 0.0, "rose": 0},
        }
    ]
    assert rep.kind_table(kind_rows).splitlines()[2] == (
        "| v | s | 40 -> 10 | 0 -> 0 | 0 -> 0 | 0 -> 0 | 0 -> 0 | 1 -> 1 | 2 ops -30.0 ms / 0 ops +0.0 ms |"
    )


def test_compose_keeps_the_notes(rep: ModuleType) -> None:
    first = rep.compose("# H", "| t |\n")
    assert first == f"# H\n| t |\n\n{rep.NOTES_MARK}\n"
    edited = first + "why: slices\n"
    assert rep.compose("# H2", "| u |\n", edited) == f"# H2\n| u |\n\n{rep.NOTES_MARK}\nwhy: slices\n"


def test_cached_by_traffic_finds_the_entry_holding_the_records_traffic(rep: ModuleType, tmp_path: Path) -> None:
    """A cache filled by another checkout: the record's static traffic names its program."""
    for key, traffic, program in (("a", 123, True), ("b", 456, True), ("c", 789, False)):
        (tmp_path / f"{key}.json").write_text(json.dumps({"static": {"memory_traffic_bytes": traffic}}))
        if program:
            (tmp_path / f"{key}.hlo.gz").write_bytes(b"")
    (tmp_path / "broken.json").write_text("{")
    assert rep.cached_by_traffic(tmp_path) == {123: tmp_path / "a.hlo.gz", 456: tmp_path / "b.hlo.gz"}


def test_a_kept_value_of_another_simulator_is_computed_again(rep: ModuleType, tmp_path: Path) -> None:
    calls: list[int] = []

    def compute() -> dict[str, int]:
        calls.append(1)
        return {"step": len(calls)}

    path = tmp_path / "k.new.json"
    assert rep._cached(path, compute, "sim-a") == {"step": 1, "simulator": "sim-a"}
    assert rep._cached(path, compute, "sim-a")["step"] == 1 and len(calls) == 1  # kept
    assert rep._cached(path, compute, "sim-b") == {"step": 2, "simulator": "sim-b"}  # another simulator
    assert rep._cached(path, compute)["step"] == 2 and len(calls) == 2  # no identity asked: any kept value


def test_rates_heldout_scores_again_when_the_simulator_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`.rates.json` holds the identity of the simulator that scored it; another one misses (was: kept
    forever, so a changed simulator's table silently showed the old scores)."""
    rates = rates_heldout
    hlo = tmp_path / "k.hlo"
    scored: list[str] = []
    monkeypatch.setattr(rates, "score", lambda path, identity: scored.append(identity) or {"variant": identity})
    assert rates.cached_score(hlo, "sim-a") == {"variant": "sim-a", "simulator": "sim-a"}
    assert rates.cached_score(hlo, "sim-a")["variant"] == "sim-a" and scored == ["sim-a"]
    assert rates.cached_score(hlo, "sim-b")["variant"] == "sim-b" and scored == ["sim-a", "sim-b"]
    assert json.loads(hlo.with_suffix(".rates.json").read_text())["simulator"] == "sim-b"
    from harness.run.predicted_cache import simulator_identity

    assert rates.simulator() == simulator_identity()
