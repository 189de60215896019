"""Fixtures of the fault suite: ``bench``, a sweep and its folders (:mod:`faultbench`)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from faultbench import MANIFEST, Bench, tagged  # noqa: E402 - a helper module next to the tests, not a package


@pytest.fixture
def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Iterator[Bench]:
    b = Bench(tmp_path, monkeypatch, capsys)
    b.manifest.write_text(MANIFEST)
    b.tmpdir.mkdir()
    yield b
    for pid in tagged(b.tag):  # a failing case leaves no process behind
        os.kill(pid, signal.SIGKILL)
