"""The README is a one-page start: short, nothing dated, and every command it gives names a nox session,
a harness verb, a manifest and a variant that exist."""

from __future__ import annotations

import re
from pathlib import Path

from harness.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SETUP = ("pip install nox && nox -s sweep", "pip install nox && nox -s tests")


def test_short_with_the_two_setup_commands_and_nothing_dated():
    assert len(README.splitlines()) < 120
    for command in SETUP:
        assert command in README
    assert not re.findall(r"20\d\d-\d\d-\d\d", README), "a dated figure belongs in benchmarks/results/"
    assert not re.findall(r"\b\d+(\.\d+)? ?(ms|min|GB|GiB|TFLOP)\b", README), "numbers belong in the manual"


def test_every_command_names_what_exists():
    sessions = set(re.findall(r"^def (\w+)\(session", (ROOT / "noxfile.py").read_text(), re.M))
    for name in re.findall(r"nox -s (\w+)", README):
        assert name in sessions, f"README names nox session {name!r}, noxfile.py has {sorted(sessions)}"
    for verb in re.findall(r"python -m harness (\w[\w-]*)", README):
        assert verb in COMMANDS, verb
    for manifest in re.findall(r"experiments/[\w.-]+\.toml", README):
        assert (ROOT / manifest).exists(), manifest
    v6e = (ROOT / "experiments" / "v6e.toml").read_text()
    for variant in ("naive", "naive-ffn-fixed"):
        assert f'name = "{variant}"' in v6e, variant


def test_links_point_at_files():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if "://" not in target:
            assert (ROOT / target).exists(), target
