"""The prediction cache: an unchanged program, spec and simulator is not simulated again; a changed
simulator (its version or its code), spec or program misses; an unreadable entry is a miss."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from harness.metrics.timeline import spec_for
from harness.run import predicted, predicted_cache
from harness.run.predicted_cache import SIMULATOR_FILES, prediction_key, simulator_identity
from harness.run.worker import predicted_metrics, static_metrics
from tests.harness.run.test_predicted import _CompiledStage, _hlo, _tpu_spec


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the simulations (:func:`harness.run.predicted.predicted_entry` calls)."""
    calls: list[int] = []
    real = predicted.predicted_entry

    def entry(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(predicted, "predicted_entry", entry)
    return calls


def _predict(spec: Any, hlo: str, notes: list[str]) -> dict[str, Any] | None:
    stage = _CompiledStage(hlo)
    static_metrics("denoise_step", stage, spec, notes)
    return predicted_metrics("denoise_step", stage, spec, notes)


def test_an_unchanged_program_and_simulator_is_not_simulated_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hlo, spec = _hlo(), _tpu_spec(tmp_path)
    calls = _counted(monkeypatch)
    first_notes: list[str] = []
    first = _predict(spec, hlo, first_notes)
    assert first is not None and calls == [1], first_notes
    shutil.rmtree(spec.trace_dir)  # another sweep folder: the hit copies the files back
    notes: list[str] = []
    second = _predict(spec, hlo, notes)
    assert calls == [1] and sum("prediction cache" in n for n in notes) == 1, notes
    assert second is not None and first is not None and second.to_dict() == first.to_dict()
    for field in ("chrome_trace", "xplane"):
        assert Path(second[field]).is_file() and Path(second[field]).stat().st_size > 0
    # the simulator changed (a code edit or a version bump): a miss, simulated again, same numbers
    monkeypatch.setattr(predicted_cache, "simulator_identity", lambda: "another simulator")
    third = _predict(spec, hlo, [])
    assert calls == [1, 1] and third is not None and third["step_s"] == first["step_s"]


def test_an_unreadable_entry_is_a_miss_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hlo, spec = _hlo(), _tpu_spec(tmp_path)
    calls = _counted(monkeypatch)
    _predict(spec, hlo, [])
    (entry,) = Path(spec.cache_dir or "").glob("*.predicted.json")
    entry.write_text('{"key": "cut sh')
    assert _predict(spec, hlo, []) is not None and calls == [1, 1]
    assert "prediction cache:" in capsys.readouterr().err and json.loads(entry.read_text())["predicted"]["step_s"] > 0


def test_the_key_moves_with_the_program_the_spec_and_the_simulator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for("v6e:2x4", "tpu", None)
    base = prediction_key("p", spec, calls_per_video=40, host_loop=False)
    assert base == prediction_key("p", spec, calls_per_video=40, host_loop=False)
    others = {
        prediction_key("q", spec, calls_per_video=40, host_loop=False),  # another compiled program
        prediction_key("p", spec.scaled("hbm_bytes_per_s", 1.01), calls_per_video=40, host_loop=False),
        prediction_key("p", spec, calls_per_video=1, host_loop=False),
        prediction_key("p", spec, calls_per_video=40, host_loop=True),
        prediction_key("p", spec, calls_per_video=40, host_loop=False, simulator="another"),
    }
    assert base not in others and len(others) == 5
    # the simulator's identity: its source (one byte of one file) and its version
    root = tmp_path / "repo"
    for name in SIMULATOR_FILES:
        src, dst = Path(predicted_cache._ROOT) / name, root / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copyfile)(src, dst)
    same = simulator_identity(root)
    assert same == simulator_identity.__wrapped__(Path(predicted_cache._ROOT))
    simulate = root / "harness/metrics/timeline/simulate.py"
    simulate.write_text(simulate.read_text() + "\n# a comment is an edit\n")
    edited = simulator_identity.__wrapped__(root)
    monkeypatch.setattr(predicted_cache, "SIMULATOR_VERSION", predicted_cache.SIMULATOR_VERSION + 1)
    bumped = simulator_identity.__wrapped__(Path(predicted_cache._ROOT))
    assert len({same, edited, bumped}) == 3


def test_every_listed_source_exists() -> None:
    """A file moved without its list being updated would drop out of the key silently (the hash skips
    what is missing): the simulator's edits would stop missing the cache."""
    from harness.run.compile_cache import CODE_FILES, PREDICTION_FILES

    root = Path(predicted_cache._ROOT)
    missing = [n for n in (*SIMULATOR_FILES, *CODE_FILES, *PREDICTION_FILES) if not (root / n).exists()]
    assert not missing, missing
    assert set(PREDICTION_FILES) <= set(SIMULATOR_FILES)  # what a compile-cache hit re-reads is the simulator's
