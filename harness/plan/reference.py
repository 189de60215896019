"""A manifest's ``[reference]`` table: numbers published for the configuration the manifest
reproduces, with their source, which the report shows beside ours. No model import.

::

    [reference]
    source = "https://github.com/AI-Hypercomputer/maxdiffusion/pull/385"
    hardware = "TPU v7x-8"
    diffusion_stage = "denoise_loop"        # the stage whose per-video time is "diffusion_s"
    [reference.rungs.before-385]            # a rung per variant, in ladder order
    all_gather_wasted_fraction = 0.5256    # XProf's wasted share in all-gathers (0..1)
    video_s = 20.01                        # seconds per video
    note = "..."

A rung names a variant the manifest declares (checked by the manifest); its values are the
:data:`METRICS` (each optional, at least one), seconds >= 0 and fractions in [0, 1].
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from harness.plan.toml import Invalid, check_keys, get, type_name

# What a rung may state: the published number and what it means.
METRICS: dict[str, str] = {
    "all_gather_wasted_fraction": "XProf op profile: the all-gathers' wasted share of op time (their "
    "categories and the SparseCore-offloaded async ops named all-gather.*)",
    "video_s": "seconds per video, end to end",
    "diffusion_s": "seconds per video in the denoising loop",
    "text_encode_s": "seconds per video in text encoding",
}
AG_WASTED, VIDEO_S, DIFFUSION_S = "all_gather_wasted_fraction", "video_s", "diffusion_s"
FRACTIONS = frozenset({AG_WASTED})
_KEYS = ("source", "hardware", "description", "diffusion_stage", "rungs")


@dataclass(frozen=True)
class Rung:
    """The published numbers of one variant (``values``: metric -> number) and a remark."""

    variant: str
    values: tuple[tuple[str, float], ...]
    note: str = ""

    def get(self, metric: str) -> float | None:
        return dict(self.values).get(metric)


@dataclass(frozen=True)
class Reference:
    """Published numbers per rung, where they come from, and the stage that is the diffusion."""

    source: str
    hardware: str
    rungs: tuple[Rung, ...]
    description: str = ""
    diffusion_stage: str = "denoise_loop"

    def to_dict(self) -> dict[str, Any]:
        """JSON: the table as a report reads it."""
        return {**asdict(self), "rungs": [{**asdict(r), "values": dict(r.values)} for r in self.rungs]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Reference:
        """The table back from :meth:`to_dict`'s form (as a record carries it)."""
        rungs = tuple(Rung(r["variant"], tuple(r["values"].items()), r.get("note", "")) for r in raw["rungs"])
        return cls(raw["source"], raw["hardware"], rungs, raw.get("description", ""), raw["diffusion_stage"])


def _rung(name: str, raw: Any) -> Rung:
    if not isinstance(raw, dict):
        raise Invalid((), f"expected a table of published numbers, got {type_name(raw)}")
    check_keys(raw, (*METRICS, "note"))
    values = []
    for metric in METRICS:
        if metric not in raw:
            continue
        value = float(get(raw, metric, "float"))
        if metric in FRACTIONS and not 0.0 <= value <= 1.0:
            raise Invalid((metric,), f"a fraction in [0, 1], got {value!r} (write 52.56% as 0.5256)")
        if value < 0:
            raise Invalid((metric,), f"seconds must be >= 0, got {value!r}")
        values.append((metric, value))
    if not values:
        raise Invalid((), f"states no number: give at least one of {', '.join(METRICS)}")
    return Rung(name, tuple(values), get(raw, "note", "str", ""))


def parse_reference(raw: Mapping[str, Any]) -> Reference:
    """``[reference]`` -> :class:`Reference`; :class:`Invalid` with the key path on any problem."""
    check_keys(raw, _KEYS)
    rungs_raw = get(raw, "rungs", "table")
    if not rungs_raw:
        raise Invalid(("rungs",), "needs at least one rung")
    rungs = []
    for name, value in rungs_raw.items():
        try:
            rungs.append(_rung(name, value))
        except Invalid as e:
            raise Invalid(("rungs", name) + e.path, e.reason) from None
    return Reference(
        source=get(raw, "source", "str"),
        hardware=get(raw, "hardware", "str"),
        rungs=tuple(rungs),
        description=get(raw, "description", "str", ""),
        diffusion_stage=get(raw, "diffusion_stage", "str", "denoise_loop"),
    )


def check_rungs(reference: Reference, variants: tuple[str, ...]) -> None:
    """Every rung names a declared variant (``Invalid`` at ``rungs.<name>`` otherwise)."""
    for rung in reference.rungs:
        if rung.variant not in variants:
            raise Invalid(
                ("rungs", rung.variant),
                f"names no variant of this manifest (variants: {', '.join(variants) or 'none'})",
            )
