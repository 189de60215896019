"""The hardware reference: every per-device figure of :data:`harness.hardware.SPECS` and every constant
of the simulator's spec tables (:func:`harness.metrics.timeline.specs.spec_for`), each with its unit,
uncertainty and source, as the code holds them."""

from __future__ import annotations

from harness import targets
from harness.docgen.md import code, page, table
from harness.metrics.timeline import specs

# One topology per generation to read its spec table through (the constants do not depend on the shape).
EXAMPLE_TOPOLOGY = {"v6e": "v6e:2x4", "tpu7x": "tpu7x:2x2x1", "h100": "h100:1x1x8", "h200": "h200:1x1x8"}
_FIELDS = ("hbm_bytes", "peak_bf16_flops", "hbm_bytes_per_s", "interconnect_bytes_per_s")


def _num(value: float) -> str:
    return f"{value:.4g}"


def target_rows() -> list[list[str]]:
    return [
        [code(s.name), s.device_kind, str(s.devices_per_chip), *(_num(getattr(s, f)) for f in _FIELDS), s.source]
        for s in targets.SPECS.values()
    ]


def constant_rows(name: str) -> list[list[str]]:
    spec = specs.spec_for(EXAMPLE_TOPOLOGY[name], targets.SPECS[name].platform)
    return [
        [code(k), _num(c.value), c.unit, f"±{c.rel_uncertainty:.0%}" if c.scalable else "—", c.source]
        for k, c in spec.constants.items()
    ]


def render() -> str:
    intro = (
        "Datasheet figures are per device (a tpu7x chip is two devices). The simulator prices programs with the "
        "constants below; each has a source and an uncertainty (stated, else by the kind of source: published "
        f"±{specs.PUBLISHED_UNCERTAINTY:.0%}, measured ±{specs.MEASURED_UNCERTAINTY:.0%}, assumed "
        f"±{specs.ASSUMED_UNCERTAINTY:.0%}). An `assumed:` source is a guess with no figure behind it. CPU "
        "constants are measured on the machine at each sweep (`<sweep>/traces/cpu-calibration-<N>dev.json`), "
        "so they are not listed here."
    )
    header = [
        "name",
        "device kind",
        "devices/chip",
        "HBM bytes",
        "bf16 FLOP/s",
        "HBM B/s",
        "interconnect B/s",
        "source",
    ]
    sections = ["## Datasheet figures (`harness/hardware.py`)\n\n" + table(header, target_rows())]
    sections.append("Roofline assumptions:\n\n" + "\n".join(f"- {a}" for a in targets.ROOFLINE_ASSUMPTIONS) + "\n")
    for name in targets.SPECS:
        if name in EXAMPLE_TOPOLOGY:
            sections.append(
                f"## Simulator constants: `{name}`\n\n"
                + table(["constant", "value", "unit", "uncertainty", "source"], constant_rows(name))
            )
    return page(
        "Hardware constants", "harness/hardware.py, harness/metrics/timeline/specs.py", intro, *sections, wide=True
    )
