"""Reports from recorded results: content, self-containment, CSV, the CLI verb, a real browser."""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from harness import cli
from harness.report import html as report_html
from harness.report import write_report as write_records
from harness.results.compare import flatten_stage
from tests.browser import CHROMIUM, chromium
from tests.harness.fixtures import synthetic

FIXTURES = Path(__file__).parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[3]
IMG = re.compile(r'<img [^>]*src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


def write_report(records, out, *, baseline=None, **kwargs):
    """The report of runs given as JSON objects the tests can edit."""
    return write_records(
        synthetic.records(records), out, baseline=None if baseline is None else synthetic.records(baseline), **kwargs
    )


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def recorded():
    return load("sweep_cpu8.jsonl")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, recorded):
    """Report of the A/A rerun against the first run, with one injected regression and one improvement."""
    out = tmp_path_factory.mktemp("report")
    head = copy.deepcopy(load("rerun_cpu8.jsonl"))
    trill = next(r for r in head if r["variant"]["name"] == "trillium-loop")["stages"]["denoise_step"]
    trill["static"]["collectives"]["by_kind"]["all-gather"]["count"] += 1
    naive = next(r for r in head if r["variant"]["name"] == "naive")["stages"]["denoise_step"]
    naive["static"]["memory"]["temp_bytes"] //= 2
    files = write_report(
        head,
        out,
        baseline=[r for r in recorded if r["status"] == "ok"],
        baseline_label="tests/harness/fixtures/sweep_cpu8.jsonl",
    )
    return files, files.index.read_text()


def test_report_content(recorded, tmp_path):
    files = write_report(recorded, tmp_path)
    page = files.index.read_text()
    assert files.comparison is None and 'id="comparison"' not in page
    for r in recorded:
        assert r["variant"]["name"] in page and r["variant"]["id"] in page
    # header: manifest, machine, versions, commit, mode
    assert "tests/harness/fixtures/sweep_cpu8.toml" in page and "AMD EPYC" in page and "jax 0.10.2" in page
    assert recorded[0]["git"]["commit"][:12] in page and '<span id="mode" class="badge mode-measure">measured' in page
    # the variant table: medians, speedup vs the first variant, memory, collective counts, wasted share
    row = next(r for r in report_html.tables.stage_rows(synthetic.records(recorded)) if r.variant == "trillium-loop")
    assert report_html.fmt_time(row.time.median) in page and f"{row.speedup:.2f}x" in page
    assert "speedup vs replicated" in page and "1.00x" in page and ">213<" in page and "307 KiB" in page
    assert f"{row.wasted_fraction:.1%}" in page
    # collectives by kind, top ops, failed variant with its error, trace links + xprof command
    assert "collective-permute" in page and "all-to-all.95" in page
    assert 'id="failed"' in page and "RuntimeError: test workload raised on purpose" in page
    assert "xprof --logdir reports/fixture/traces/3a406826f6d5/denoise_step --port 8791" in page


def test_report_is_self_contained(rendered):
    _, page = rendered
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    images = IMG.findall(page)
    assert len(images) == 4  # stage times, breakdown, collective bytes, memory
    for b64 in images:
        png = base64.b64decode(b64)
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000


def test_report_comparison_section(rendered):
    files, page = rendered
    assert 'id="comparison"' in page and "tests/harness/fixtures/sweep_cpu8.jsonl" in page
    assert ".verdict-regressed { background: #f8d7da; color: #842029; }" in page
    assert ".verdict-improved { background: #d1e7dd; color: #0f5132; }" in page
    changed = page.split('id="comparison-changed"')[1].split("</table>")[0]
    regressed = re.search(
        r"<tr[^>]*><td[^>]*>trillium-loop</td><td[^>]*>denoise_step</td><td[^>]*>"
        r"collectives\.all-gather\.count</td><td>38</td><td>39</td><td>1</td><td>1\.026x</td>"
        r'<td class="l"><span class="verdict verdict-regressed">regressed</span>',
        changed,
    )
    assert regressed, changed[:2000]
    assert re.search(
        r"naive</td><td[^>]*>denoise_step</td><td[^>]*>memory\.temp_bytes</td>.*?verdict-improved", changed
    )
    c = files.comparison
    assert {(x.variant, x.metric) for x in c.regressions} >= {("trillium-loop", "collectives.all-gather.count")}
    assert "variant broken failed in this run" in page


def test_compile_only_header(recorded, tmp_path):
    records = copy.deepcopy([r for r in recorded if r["status"] == "ok"])
    for r in records:
        r["target"]["mode_used"] = "compile"
        for entry in r["stages"].values():
            entry["measured"] = entry["trace"] = None
        r["artifacts"]["traces"] = {}
    page = write_report(records, tmp_path).index.read_text()
    assert 'class="badge mode-compile">compile-only' in page
    assert "No traces recorded." in page and "Nothing to plot for: stage-times, breakdown." in page


def test_report_is_a_pure_function_of_the_records(recorded, tmp_path):
    a = write_report(recorded, tmp_path / "a").index.read_text()
    b = write_report(copy.deepcopy(recorded), tmp_path / "b").index.read_text()
    assert a == b


def test_results_csv(rendered, recorded):
    files, _ = rendered
    df = pd.read_csv(files.csv)
    head = load("rerun_cpu8.jsonl")
    expected = sum(max(1, len(flatten_stage(e))) for r in synthetic.records(head) for e in r.stages.values())
    assert len(df) == expected
    assert set(df.variant) == {"replicated", "naive", "trillium-loop", "broken"}
    t = df[(df.variant == "trillium-loop") & (df.metric == "time")].iloc[0]
    assert t.n == 12 and t["median"] == pytest.approx(t.value) and t.q1 <= t["median"] <= t.q3
    ag = df[(df.variant == "trillium-loop") & (df.metric == "collectives.all-gather.count")].iloc[0]
    assert (ag.baseline, ag.value, ag.verdict, bool(ag.gated)) == (38, 39, "regressed", True)
    assert df[df.variant == "broken"].status.tolist() == ["failed"]


def test_cli_report(tmp_path, capsys):
    sweep = tmp_path / "fixture"
    sweep.mkdir()
    shutil.copy(FIXTURES / "rerun_cpu8.jsonl", sweep / "results.jsonl")
    assert (
        cli.main(
            [
                "report",
                str(sweep / "results.jsonl"),
                "--baseline",
                str(FIXTURES / "sweep_cpu8.jsonl"),
                "--reference",
                "naive",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert f"wrote {sweep / 'index.html'}" in out and "gated regressions" in out
    assert "speedup vs naive" in (sweep / "index.html").read_text()
    assert (sweep / "results.csv").exists()
    assert cli.main(["report", str(tmp_path / "nothing.jsonl")]) == 2
    assert cli.main(["report", str(sweep), "--reference", "nope"]) == 2
    assert "reference variant 'nope'" in capsys.readouterr().err


# --------------------------------------------------------------------------- real browser


def test_report_in_headless_chromium(rendered, tmp_path):
    if not CHROMIUM.exists():
        pytest.skip("chromium not installed (the nox tests session installs it)")
    files, _ = rendered
    url = files.index.resolve().as_uri()
    shot = tmp_path / "report.png"
    done = chromium(f"--screenshot={shot}", url, user_dir=tmp_path / "profile")
    assert shot.exists(), done.stderr[-2000:]
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 50_000  # a rendered page, not a blank one
    artifacts = REPO / "artifacts"
    artifacts.mkdir(exist_ok=True)
    shutil.copy(shot, artifacts / "report.png")

    dom = chromium("--dump-dom", url, user_dir=tmp_path / "profile2").stdout
    body = re.search(r"<body([^>]*)>", dom)
    assert body, dom[:500]
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body.group(1)))
    assert attrs == {"errors": "0", "images": "4", "images-loaded": "4"}, attrs
    for element in (
        'id="variants"',
        'id="comparison-changed"',
        'id="plot-stage-times"',
        'id="plot-breakdown"',
        'id="plot-collective-bytes"',
        'id="plot-memory"',
        'id="failed"',
        'id="trace-links"',
    ):
        assert element in dom


def test_speedup_of_a_stage_the_reference_did_not_run_is_against_the_first_variant_that_did() -> None:
    from harness.report import tables

    def rec(name: str, **stages: list[float]) -> dict:
        return synthetic.minimal(name, {s: {"measured": {"samples_s": xs}} for s, xs in stages.items()})

    rows = tables.stage_rows(
        synthetic.records(
            [rec("ref", step=[2.0, 2.0]), rec("pipe", step=[4.0], loop=[1.0, 1.0]), rec("knob", loop=[0.5, 0.5])]
        ),
        reference="ref",
    )
    got = {(r.variant, r.stage): (r.speedup, r.speedup_reference) for r in rows}
    assert got == {
        ("ref", "step"): (1.0, "ref"),
        ("pipe", "step"): (0.5, "ref"),
        ("pipe", "loop"): (1.0, "pipe"),
        ("knob", "loop"): (2.0, "pipe"),
    }
