"""harness ab: every 'cannot compare' is exit 2 naming why, before any worker starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli, revision
from harness.commands import ab

ROOT = Path(__file__).resolve().parents[3]
BASELINE = ROOT / "reports" / "baselines" / "nightly.jsonl"


def _baseline(tmp_path: Path, commit: str | None, dirty: bool) -> Path:
    """A baseline of one real record of the nightly baseline, its git fields set."""
    record = json.loads(BASELINE.read_text().splitlines()[0])
    record["git"] = {"commit": commit, "dirty": dirty}
    path = tmp_path / "base.jsonl"
    path.write_text(json.dumps(record) + "\n")
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["ab", *args])
    return code, capsys.readouterr().err


def test_the_reference_is_the_newest_clean_record_s_commit(tmp_path: Path) -> None:
    head = revision.resolve(ROOT, "HEAD")
    assert ab.reference_of(_baseline(tmp_path, head, False))[0] == head
    with pytest.raises(
        ab.CannotCompare, match=r"dirty tree at [0-9a-f]{12}: its code is not that commit's.*git log -1"
    ):
        ab.reference_of(_baseline(tmp_path, head, True))
    with pytest.raises(ab.CannotCompare, match="names no git commit"):
        ab.reference_of(_baseline(tmp_path, None, False))
    with pytest.raises(ab.CannotCompare, match="no baseline at"):
        ab.reference_of(tmp_path / "none.jsonl")


def test_other_runtime_pins_cannot_be_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    ours = (ROOT / "pyproject.toml").read_text()
    assert ab.runtime_pins(ours, "here") == sorted(ab.runtime_pins(ours, "here"))
    ab.check_pins(revision.resolve(ROOT, "HEAD"))  # the same file: nothing raised
    theirs = ours.replace('"jax==', '"jax==0.0.1" , "old-jax==', 1)
    monkeypatch.setattr(revision, "git", lambda repo, *a: theirs)
    with pytest.raises(ab.CannotCompare, match=r"pins other run-time dependencies than this tree \(.*jax==0.0.1"):
        ab.check_pins("0" * 40)


def test_cannot_compare_is_exit_2_naming_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = str(ROOT / "experiments" / "ab.toml")
    code, err = _run([manifest, "--pairs", "5"], capsys)
    assert code == 2 and "cannot compare: --pairs 5: the test cannot reach alpha 0.001 with fewer than 10" in err
    dirty = str(_baseline(tmp_path, revision.resolve(ROOT, "HEAD"), True))
    code, err = _run([manifest, "--baseline", dirty], capsys)
    assert code == 2 and "cannot compare:" in err and "dirty tree" in err
    missing = str(_baseline(tmp_path, "f" * 40, False))
    code, err = _run([manifest, "--baseline", missing], capsys)
    assert code == 2 and f"commit {'f' * 12} is not in this clone" in err
    code, err = _run([manifest, "--against", "no-such-rev"], capsys)
    assert code == 2 and "cannot compare: git rev-parse" in err
    code, err = _run([manifest, "--variant", "nope"], capsys)
    assert code == 2 and "no variant 'nope' (known: step-1dev)" in err


@pytest.mark.slow
def test_the_real_stage_against_this_commit_is_not_slower(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A/A on experiments/ab.toml's real step (4 workers compile it: ~40 s on 2 cores). Fails with
    probability at most P(Binomial(20, 1/2) >= 18) = 0.0002 while the two sides' processes differ
    by under the 3 % minimum effect (A/A runs: docs/gates.md)."""
    manifest = str(ROOT / "experiments" / "ab.toml")
    code = cli.main(["ab", manifest, "--against", "HEAD", "--pairs", "20", "--reports", str(tmp_path)])
    out = capsys.readouterr().out
    record = json.loads((tmp_path / "ab-ab" / "ab.json").read_text())
    assert code == 0 and out.startswith("ok  step-1dev denoise_step seconds per call:"), out
    assert record["base"]["commit"] == revision.resolve(ROOT, "HEAD") and record["test"]["critical"] == 18
    assert len(record["pairs"]) == 20 and all(len(p["base_calls"]) == 3 for p in record["pairs"])
    assert record["workers"] == 2 and len(set(record["pads"])) == 4


def test_a_shallow_clone_cannot_compare(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = revision.git
    monkeypatch.setattr(revision, "git", lambda repo, *a: "true" if "--is-shallow-repository" in a else real(repo, *a))
    code, err = _run([str(ROOT / "experiments" / "ab.toml"), "--against", "HEAD"], capsys)
    assert code == 2 and "cannot compare: this clone is shallow" in err
