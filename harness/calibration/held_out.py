"""A calibration checked on a held-out sweep (the library behind ``benchmarks/calibrate_held_out.py``):
the fit's per-op speeds carried to the held-out sweep's devices by a measured sharing ratio
(:func:`shared`), every stage's saved program re-predicted on a spec (:func:`rescore`) and scored
as :func:`harness.calibration.check.points` scores it (:func:`score`). Input errors name the file."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness.calibration import check as calibration
from harness.calibration.cpu import CpuCalibration
from harness.calibration.traces import read_program
from harness.families import Predicted
from harness.metrics.hlo import parse
from harness.metrics.timeline import TimelineSpec, predict
from harness.results.record import Record
from harness.results.store import load_records


class InputError(ValueError):
    """Bad input: the message names the file."""


def read_calibration(path: Path) -> CpuCalibration:
    try:
        return CpuCalibration.from_dict(json.loads(path.read_text()), str(path))
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable CPU calibration ({e})") from None


def read_records(path: Path) -> list[Record]:
    if not path.is_file():
        raise InputError(f"{path}: no such results file")
    try:
        records = load_records(path)
    except ValueError as e:  # a record newer than this harness
        raise InputError(f"{path}: {e}") from None
    if not records:
        raise InputError(f"{path}: no records")
    return records


def program_path(sweep: Path, record: Record, stage: str) -> Path | None:
    """The stage's saved program under ``sweep``: the record's ``predicted.program`` (written relative to
    where the sweep ran) re-rooted at the sweep's ``traces/`` folder; None when it saved none."""
    predicted = record.stages[stage].predicted
    saved = predicted.program if predicted else None
    if not saved:
        return None
    parts = Path(saved).parts
    if "traces" not in parts:
        return Path(saved)
    tail = parts[len(parts) - 1 - parts[::-1].index("traces") + 1 :]
    return sweep.joinpath("traces", *tail)


def read_text(path: Path) -> str:
    try:
        return read_program(path)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read the program ({e})") from None


def device_count(records: Sequence[Record], path: Path) -> int:
    """The one device count of a sweep's finished records; InputError naming the file otherwise."""
    devices = {math.prod(r.target.mesh.values()) if r.target.mesh else 1 for r in records if r.ok}
    if len(devices) != 1:
        raise InputError(f"{path}: its records have {sorted(devices)} devices; one count expected")
    return devices.pop()


def shared(
    fitted: TimelineSpec, cal: CpuCalibration, where: str, traced: tuple[float, str] | None = None
) -> TimelineSpec:
    """``cal``'s spec with the fit's per-op speeds shared by its devices
    (:meth:`~harness.calibration.cpu.CpuCalibration.shared_spec`: the ``traced``
    ratio, else ``cal``'s micro-benchmark ratios); InputError naming ``where`` when ``cal`` lacks a
    one-device value."""
    try:
        return cal.shared_spec(fitted, where, traced)
    except ValueError as e:
        raise InputError(str(e)) from None


@dataclasses.dataclass(frozen=True)
class Score:
    n: int
    spearman: float
    median_abs_log: float
    worst_factor: float
    over: int = 0  # points predicted slower than measured

    @property
    def median_factor(self) -> float:
        return math.exp(self.median_abs_log)


def score(points: Sequence[calibration.Point]) -> Score | None:
    """The calibration module's summary of the gated points, plus the worst factor (max of ratio, 1/ratio)."""
    s = calibration.summarize(points)
    if s is None:
        return None
    worst = max(math.exp(abs(math.log(p.ratio))) for p in points if p.gated)
    return Score(s.n, s.spearman, s.median_abs_log_ratio, worst, sum(p.ratio > 1 for p in points if p.gated))


def with_steps(records: Sequence[Record], steps: Mapping[tuple[str, str], float]) -> list[Record]:
    """The records with each (variant id, stage) in ``steps`` given that ``predicted.step_s``; the
    other stages dropped (not re-predicted: in neither score)."""
    out = []
    for r in records:
        stages = {
            name: dataclasses.replace(
                entry, predicted=(entry.predicted or Predicted()).replace(step_s=steps[(r.variant.id, name)])
            )
            for name, entry in r.stages.items()
            if (r.variant.id, name) in steps
        }
        out.append(r.replace(stages=stages))
    return out


@dataclasses.dataclass(frozen=True)
class Rescored:
    """One sweep's stages re-predicted on its own spec (``base``) and on the fitted one (``fitted``),
    scored as :func:`harness.calibration.check.points` scores them; ``recorded``: the records' own
    prediction per (variant, stage) in the same units; ``reproduction``: the largest |base step /
    recorded step - 1|."""

    title: str
    base: list[calibration.Point]
    fitted: list[calibration.Point] | None
    recorded: dict[tuple[str, str], float]
    reproduction: float
    notes: tuple[str, ...] = ()
    fitted_label: str = "fitted"


def rescore(
    title: str,
    records: Sequence[Record],
    sweep: Path,
    base: TimelineSpec,
    fitted: TimelineSpec | None,
    fitted_label: str = "fitted",
) -> Rescored:
    """Re-predict every stage's saved program (``predict`` on its parsed text) on ``base`` and ``fitted``."""
    steps: dict[str, dict[tuple[str, str], float]] = {"base": {}, "fitted": {}}
    recorded, notes = {}, []
    for r in records:
        for stage, entry in r.stages.items():
            step = entry.predicted.step_s if entry.predicted else None
            if not step:
                continue
            path = program_path(sweep, r, stage)
            if path is None:
                notes.append(f"{r.variant.name}/{stage}: no saved program; in neither score")
                continue
            if not path.is_file():
                raise InputError(f"{path}: the program {r.variant.name}/{stage}'s record names is missing")
            key, module = (r.variant.id, stage), parse(read_text(path))
            recorded[key] = float(step)
            for name, spec in (("base", base), ("fitted", fitted)):
                if spec is not None:
                    steps[name][key] = predict(module, spec).step_ns / 1e9
            shown = ", ".join(f"{k} {ms(v[key])} ms" for k, v in steps.items() if v)
            print(f"{title}: {r.variant.name}/{stage}: {shown}", flush=True)
    repro = max((abs(steps["base"][k] / v - 1) for k, v in recorded.items()), default=0.0)
    return Rescored(
        title,
        calibration.points(with_steps(records, steps["base"])),
        calibration.points(with_steps(records, steps["fitted"])) if fitted is not None else None,
        {(p.variant, p.stage): p.predicted_s for p in calibration.points(with_steps(records, recorded))},
        repro,
        tuple(notes),
        fitted_label,
    )


def ms(s: float) -> str:
    return f"{s * 1e3:.4g}"
