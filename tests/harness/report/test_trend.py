"""The trend page (harness/report/trend.py) on the recorded history (tests/harness/fixtures/history/):
what it holds, and (in headless Chromium, as the report page is tested) its charts, change-point
marks, labels inside their charts and links that resolve."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

import pytest

from harness import cli
from harness.results import history
from tests.browser import CHROMIUM, chromium

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> tuple[Path, str, list[history.Analysis]]:
    folder = tmp_path_factory.mktemp("trend") / "history"
    shutil.copytree(FIXTURES / "history", folder)
    (folder / "bisect").mkdir()  # a change point's kept bisect result, as the nightly writes it
    runs = history.load(folder, "history_nightly")
    analyses = [history.analyse(s) for s in history.series(runs)]
    (change,) = [(a, c) for a in analyses for c in a.changes if a.series.rule == "timing"]
    (folder / "bisect" / f"{history.change_name(change[0].series, change[1], runs)}.json").write_text("{}\n")
    assert cli.main(["history", str(folder), "--manifest", str(FIXTURES / "history_nightly.toml")]) == 0
    index = folder / "history_nightly.html"
    return index, index.read_text(), analyses


def test_every_gated_series_has_a_chart_and_each_change_its_links(page):
    index, text, analyses = page
    assert text.count('<svg class="trend"') == len(analyses) > 20
    changes = sum(len(a.changes) for a in analyses)
    assert text.count('<line class="cp"') == changes == text.count('<tr class="change"')
    hrefs = [unquote(h) for h in re.findall(r'href="([^"]+)"', text)]
    assert any(h.startswith("bisect/") for h in hrefs) and any(h.startswith("diffs/") for h in hrefs)
    assert all((index.parent / h).exists() for h in hrefs), hrefs
    assert "python -m harness bisect " in text and "python -m harness diff " in text
    assert "<script" not in text and "http" not in text  # self-contained


SELFTEST = """<script>
window.addEventListener("load", () => {
  const charts = [...document.querySelectorAll("svg.trend")];
  const outside = [];
  charts.forEach((svg) => {
    const box = svg.getBoundingClientRect();
    svg.querySelectorAll("text").forEach((t) => {
      const r = t.getBoundingClientRect();
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
        outside.push(svg.id + ": " + t.textContent);
    });
  });
  const marks = document.querySelectorAll("line.cp").length;
  const rows = document.querySelectorAll("tr.change").length;
  document.body.setAttribute("data-selftest", JSON.stringify({charts: charts.length, marks, rows, outside}));
});
</script></body>"""


def test_trend_page_in_headless_chromium(page, tmp_path):
    """Every chart drawn, every change point marked and tabled, no label outside its chart; a screenshot."""
    if not CHROMIUM.exists():
        pytest.skip("chromium not installed (the nox tests session installs it)")
    index, text, analyses = page
    probe = index.with_name("selftest.html")
    probe.write_text(text.replace("</body>", SELFTEST, 1))
    dom = chromium("--dump-dom", probe.resolve().as_uri(), user_dir=tmp_path / "p1").stdout
    found = re.search(r'data-selftest="([^"]*)"', dom)
    assert found, dom[:1000]
    result = json.loads(found.group(1).replace("&quot;", '"'))
    changes = sum(len(a.changes) for a in analyses)
    assert result == {"charts": len(analyses), "marks": changes, "rows": changes, "outside": []}, result
    shot = tmp_path / "trend.png"
    chromium(f"--screenshot={shot}", index.resolve().as_uri(), user_dir=tmp_path / "p2")
    assert shot.exists() and shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000
