"""The config-override reference against ltx2: every performance knob has a description and every value
it lists is one the model accepts."""

from __future__ import annotations

import dataclasses

import pytest

from harness.docgen import knobs
from harness.model import check_override, preset_names
from harness.plan.keys import KEYS
from ltx2.config import KNOBS
from ltx2.pipeline_config import PipelineOptions
from ltx2.text.gemma import TextEncoderConfig


def knob_set() -> set[str]:
    """What the model calls a knob: TransformerConfig's own fields, every run-time option, the text
    encoder's placement and batching, and every component's sharding / dtype / scan switch."""
    out = {f"transformer.{k}" for k in KNOBS}
    out |= {f"pipeline.{f.name}" for f in dataclasses.fields(PipelineOptions)}
    out |= {f"text_encoder.{f.name}" for f in dataclasses.fields(TextEncoderConfig)}
    out |= {k for k in knobs.knob_keys() if k.split(".")[1] in ("sharding", "dtype", "param_dtype", "scan_layers")}
    out |= {k for k in knobs.knob_keys() if k.startswith("guidance.")}
    return out


def test_every_knob_is_described():
    missing = knob_set() - set(knobs.KNOB_DOCS)
    assert not missing, f"ltx2 knobs without an entry in harness/docgen/knobs.py KNOB_DOCS: {sorted(missing)}"


def test_every_described_key_is_a_config_field():
    assert set(knobs.KNOB_DOCS) <= set(knobs.knob_keys())


@pytest.mark.parametrize("key", sorted(k for k, (_, values) in knobs.KNOB_DOCS.items() if values))
def test_listed_values_are_accepted(key):
    for value in knobs.allowed_values(key):
        check_override("ltx2_19b", key, value)


def test_the_page_lists_every_field():
    text = knobs.render()
    for key in knobs.knob_keys():
        assert f"`{key}`" in text, key


def test_the_preset_key_names_every_preset():
    for preset in preset_names():
        assert f"`{preset}`" in KEYS["model.preset"].doc, preset
