"""The CLI, metric and hardware references against the code they are generated from."""

from __future__ import annotations

import pytest

from harness import targets
from harness.catalogue import METRICS
from harness.docgen import cli, hardware, metrics, pages
from harness.metrics.timeline import specs


def test_every_verb_and_flag_has_help_and_is_on_the_page():
    text = cli.render()
    for name, parser in cli.verbs().items():
        assert f"## `{name}`" in text
        assert (parser.description or "").strip(), f"verb {name} has no description"
        for action in cli.arguments(parser):
            assert (action.help or "").strip(), f"{name} {action.option_strings or action.dest}: no help text"
            for flag in action.option_strings:
                assert flag in text, (name, flag)


def test_every_metric_has_a_definition_and_a_row():
    text = metrics.render()
    for m in METRICS:
        assert m.definition, f"metric {m.name} has no definition in harness/catalogue/entries.py"
        assert f"`{m.name}`" in text


@pytest.mark.parametrize("name", sorted(hardware.EXAMPLE_TOPOLOGY))
def test_every_constant_is_listed_with_its_source(name):
    text = hardware.render()
    spec = specs.spec_for(hardware.EXAMPLE_TOPOLOGY[name], targets.SPECS[name].platform)
    for key, constant in spec.constants.items():
        assert f"`{key}`" in text and constant.source.split(":")[0] in text


def test_every_target_has_a_topology_to_read_its_spec_through():
    assert set(targets.SPECS) <= set(hardware.EXAMPLE_TOPOLOGY)


def test_pages_are_the_nav_s_reference_pages():
    import pathlib

    nav = (pathlib.Path(__file__).resolve().parents[3] / "mkdocs.yml").read_text()
    for path in pages():
        assert path in nav, path
