"""A corpus of bad manifests, each a one-line edit of a valid one, through `python -m harness sweep FILE --list`.

Every case must be rejected cleanly: exit 2, one `error: <file>:<line>: <key>: <reason>` line naming the key the
edit broke (at the edited line where the key is written there), no traceback, nothing written. The command's
function runs in-process for speed; a few cases also go through a real subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from tests.harness.plan.bad_manifest_corpus import CASES, VALID


def edited(case: str, line: int, new: bytes) -> bytes:
    lines = VALID[case].split(b"\n")
    lines[line - 1] = new
    return b"\n".join(lines)


def expected_prefix(path: Path, key: str, line: int | None) -> str:
    where = f"{path}:{line}" if line is not None else str(path)
    return f"error: {where}: {key}: " if key else f"error: {where}: "


@pytest.fixture(scope="module")
def valid_listed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, int]:
    """Each valid manifest lists its variants (so every case below fails because of its edit)."""
    out = {}
    for name, text in VALID.items():
        path = tmp_path_factory.mktemp("valid") / f"{name}.toml"
        path.write_bytes(text)
        assert cli.main(["sweep", str(path), "--list"]) == 0, name
        out[name] = len(text.split(b"\n"))
    return out


def test_the_corpus_is_large_and_each_case_is_a_one_line_edit(valid_listed: dict[str, int]) -> None:
    assert len(CASES) >= 50 and len({c[0] for c in CASES}) == len(CASES)
    for name, base, line, new, *_ in CASES:
        old = VALID[base].split(b"\n")[line - 1]
        assert old != new and 1 <= line < valid_listed[base], name


@pytest.mark.parametrize(
    ("base", "line", "new", "key", "at", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_manifest_is_rejected_cleanly(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    valid_listed: dict,
    base: str,
    line: int,
    new: bytes,
    key: str,
    at: int | None,
    reason: str,
) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(edited(base, line, new))
    reports = tmp_path / "reports"
    assert cli.main(["sweep", str(path), "--list", "--reports", str(reports)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(expected_prefix(path, key, at)), err
    assert reason in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]  # nothing written


SUBPROCESS_CASES = ("latin1-comment", "timeout-nan", "tolerance-typo", "huge-frames")


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_bad_manifest_through_the_real_command(tmp_path: Path, name: str) -> None:
    _, base, line, new, key, at, reason = next(c for c in CASES if c[0] == name)
    path = tmp_path / "bad.toml"
    path.write_bytes(edited(base, line, new))
    done = subprocess.run(
        [sys.executable, "-m", "harness", "sweep", str(path), "--list", "--reports", str(tmp_path / "reports")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith(expected_prefix(path, key, at)) and reason in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + VALID["min"])
    assert cli.main(["sweep", str(path), "--list"]) == 0
    assert capsys.readouterr().out.split()[1:] == ["base"]
