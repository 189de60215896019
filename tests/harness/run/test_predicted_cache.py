"""The prediction cache: an unchanged program, spec and simulator is not simulated again; a changed
simulator (its version or its code), spec or program misses; an unreadable entry is a miss."""

from __future__ import annotations

import json
import os
import shutil
import time
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


def _entry(cache: predicted_cache.PredictionCache, key: str, where: Path, size: int, used: float) -> None:
    """Put an entry whose trace file holds ``size`` bytes, last used at time ``used``."""
    trace = where / key / "trace.json.gz"
    trace.parent.mkdir(parents=True, exist_ok=True)
    trace.write_bytes(b"x" * size)
    cache.put(key, {"step_s": 1.0, "chrome_trace": str(trace)}, where)
    if cache.path(key).exists():
        os.utime(cache.path(key), (used, used))


def test_the_folder_keeps_the_most_recently_used_entries_under_its_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "traces"
    cache = predicted_cache.PredictionCache(tmp_path / "cache", limit=2_500)  # room for two 1000-byte entries
    _entry(cache, "a", where, 1000, used=100.0)
    _entry(cache, "b", where, 1000, used=200.0)
    assert cache.get("a", tmp_path / "elsewhere") is not None  # a hit: "a" is now the most recently used
    assert cache.path("a").stat().st_mtime > 200.0
    _entry(cache, "c", where, 1000, used=300.0)  # three do not fit: the least recently used goes
    assert not cache.path("b").exists() and not cache.files("b").exists()
    assert cache.path("a").exists() and cache.path("c").exists()
    assert cache.get("b", where) is None and cache.get("a", where) is not None
    assert "1 least recently used entries removed" in capsys.readouterr().err
    # a folder without its entry: another process's put filling it (kept), or a write cut short an hour ago
    filling, dead = tmp_path / "cache" / "filling.predicted", tmp_path / "cache" / "dead.predicted"
    filling.mkdir(), dead.mkdir()
    old = time.time() - predicted_cache.ORPHAN_GRACE_S - 60
    os.utime(dead, (old, old))
    assert cache.prune() == [] and filling.is_dir() and not dead.exists()
    filling.rmdir()
    # an entry larger than the whole bound is not kept; a bound of 0 keeps nothing
    _entry(cache, "d", where, 5000, used=400.0)
    assert not cache.path("d").exists() and cache.path("a").exists()
    empty = predicted_cache.PredictionCache(tmp_path / "cache", limit=0)
    assert sorted(empty.prune()) == ["a", "c"] and list((tmp_path / "cache").iterdir()) == []


def test_the_bound_comes_from_the_environment() -> None:
    assert predicted_cache.max_bytes({}) == predicted_cache.DEFAULT_MAX_MB * 2**20 == 2**30
    assert predicted_cache.max_bytes({"HARNESS_PREDICTION_CACHE_MB": "1.5"}) == 1.5 * 2**20
    assert predicted_cache.max_bytes({"HARNESS_PREDICTION_CACHE_MB": "0"}) == 0
    for bad in ("ten", "-1", "nan"):
        with pytest.raises(ValueError, match="HARNESS_PREDICTION_CACHE_MB="):
            predicted_cache.max_bytes({"HARNESS_PREDICTION_CACHE_MB": bad})
