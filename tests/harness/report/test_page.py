"""The interactive page: attribution detail, diffs against references, coverage, the console summary,
and (in headless Chromium) sorting, filtering, the variant toggle and chart labels that do not overlap.

Records are the recorded CPU sweep fixture with attribution added the way the worker stores it
(``trace.by_scope``, ``trace.step_samples``, ``static.attribution``; deterministic numbers), and
references declared as a manifest would (``naive`` and ``trillium-loop`` against ``replicated``).
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.report import write_report
from harness.report.console import WIDTH, summary_table
from tests.harness.fixtures import synthetic

FIXTURES = Path(__file__).parents[1] / "fixtures"
REPO = Path(__file__).resolve().parents[3]
SCOPES = [
    "transformer/block/attn1/core",
    "transformer/block/attn1/qkv",
    "transformer/block/ff/proj_in",
    "transformer/block/ff/proj_out",
    "transformer/block/a2v/core",
    "transformer/block/norm_mod",
    "transformer/embed",
    "transformer/rope",
    "scheduler",
    "",
    "transformer/block/audio_attn2/qkv/norm_mod",  # the longest real path: its label gets shortened
    "transformer/block/v2a/qkv/norm_mod/" + "x" * 40,
]


def _attributed(raw: dict, ff_scale: float, seed: int) -> dict:
    """``raw`` with per-step samples by scope and category and a static attribution (ff x ``ff_scale``)."""
    rng = np.random.default_rng(seed)
    raw = copy.deepcopy(raw)
    for entry in raw["stages"].values():
        if not entry.get("trace"):
            continue
        samples = []
        for _ in range(8):
            by_scope = {
                s: float(1e6 * (i + 1) * (ff_scale if "/ff/" in s else 1.0) * rng.lognormal(0, 0.02))
                for i, s in enumerate(SCOPES)
            }
            compute = sum(by_scope.values())
            idle = float(2e5 * rng.lognormal(0, 0.05))
            samples.append(
                {"window_ns": compute + idle, "categories": {"compute": compute, "idle": idle}, "by_scope": by_scope}
            )
        entry["trace"].update(
            step_samples=samples,
            scope_coverage=0.97,
            chrome_trace=entry["trace"]["log_dir"] + "/plugins/profile/x/perfetto_trace.json.gz",
            by_scope={s: float(np.mean([x["by_scope"][s] for x in samples])) for s in SCOPES},
        )
        median = float(np.median(entry["measured"]["samples_s"]))
        entry["predicted"] = synthetic.predicted(
            median * (1.3 if ff_scale == 1.0 else 0.8),
            chrome_trace=entry["trace"]["log_dir"] + "/predicted_trace.json.gz",
        )
        for op in entry["trace"]["top_ops"]:
            op.update(scope="transformer/block/ff/proj_in", source="ltx2/block.py:66 (__call__)")
        entry["static"]["attribution"] = {
            "module": "jit_step",
            "coverage": {
                "flops": 1.0,
                "bytes": 0.99,
                "collective_bytes": 1.0,
                "inferred": {"flops": 0.25, "bytes": 0.0, "collective_bytes": 0.0},
            },
            "by_scope": {
                s: {
                    "flops": 1e9,
                    "bytes": 1e6,
                    "collectives": {"all-gather": {"count": 2.0, "bytes": 4096.0}} if "ff" in s else {},
                }
                for s in SCOPES
            },
            "collective_sites": [
                {
                    "scope": "transformer/block/ff/proj_in",
                    "kind": "all-gather",
                    "count": 2.0,
                    "bytes": 4096.0,
                    "cause": "weights want embed whole: sharded over fsdp",
                    "axes": ["fsdp"],
                    "logical": "embed",
                    "example": "all-gather.3",
                }
            ],
        }
    return raw


@pytest.fixture(scope="module")
def records():
    raw = json.loads(json.dumps([json.loads(x) for x in (FIXTURES / "sweep_cpu8.jsonl").read_text().splitlines()]))
    out = []
    for i, r in enumerate(raw):
        name = r["variant"]["name"]
        r = _attributed(r, 3.0 if name == "naive" else 1.0, i)
        if name in ("naive", "trillium-loop"):
            r["variant"]["reference"] = "replicated"
        out.append(r)
    return synthetic.records(out)


@pytest.fixture(scope="module")
def page(tmp_path_factory, records):
    out = tmp_path_factory.mktemp("page")
    files = write_report(records, out)
    return files.index, files.index.read_text()


def test_page_has_attribution_diff_and_trace_links(page):
    _, text = page
    assert 'id="variant-toggle"' in text and 'class="sortable"' in text and 'class="filter"' in text
    assert 'id="detail-naive"' in text and 'id="diff-naive-denoise_step"' in text
    assert 'id="coverage-table"' in text and "97.0%" in text
    coverage = text.split('id="coverage-table"')[1].split("</table>")[0]
    assert "100.0% (25.0% inferred)" in coverage  # FLOPs: own and inferred apart; bytes: none inferred
    assert "99.0%<" in coverage and "99.0% (" not in coverage
    assert "weights want embed whole: sharded over fsdp" in text and "ltx2/block.py:66 (__call__)" in text
    naive = text.split('id="diff-naive-denoise_step"')[1].split("</table>")[0]
    assert "scope: transformer/block/ff/proj_out" in naive and '<span class="sig">yes</span>' in naive
    trill = text.split('id="diff-trillium_loop-denoise_step"')[1].split("</table>")[0]
    assert '<span class="sig">yes</span>' not in trill.split("category:")[1]  # same model, same scale: nothing
    assert 'class="perfetto" href="../' not in text or "perfetto_trace.json.gz" in text
    assert "perfetto_trace.json.gz" in text and "ui.perfetto.dev" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)


def test_page_shows_the_predicted_family(page):
    """Predicted step, per video, exposed all-gather and wasted shares, a sensitivity line and the Chrome
    JSON link per variant; one block's Gantt (compute lane + all-gather lane) in each variant's detail;
    the CPU records' predicted-vs-measured table and scatter (8-device programs: shown, not scored)."""
    _, text = page
    table = text.split('id="predicted-table"')[1].split("</table>")[0]
    naive = table.split('<tr data-variant="naive">')[1].split("</tr>")[0]
    assert "10.0%" in naive and "25.0%" in naive and "x8" in naive
    assert "most sensitive: peak_flops_per_s \u00b120% -&gt; step" in naive
    assert 'class="predicted-trace" href="../' in naive and "predicted_trace.json.gz" in naive
    gantt = text.split('id="gantt-naive-denoise_step"')[1].split("</svg>")[0]
    assert gantt.count("<rect") == 7 and ">compute</text>" in gantt and ">all-gather</text>" in gantt
    assert 'id="calibration-scatter"' in text and text.count("<circle") == 3
    assert "No program to score" in text


def test_speedup_against_another_workload_is_not_given(records, tmp_path):
    raw = [r.to_dict() for r in records]
    raw[1]["config"]["workload"]["height"] = 512  # naive: another workload than its reference
    text = write_report(synthetic.records(raw), tmp_path).index.read_text()
    row = text.split('<tr data-variant="naive">')[1].split("</tr>")[0]
    assert "n/a (different workload)" in row


def test_console_summary_fits_120_columns(records):
    raw = [r.to_dict() for r in records]
    raw[0]["variant"]["name"] = "a-very-long-variant-name-that-would-push-the-table-past-its-width"
    text = summary_table(synthetic.records(raw))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH, text
    # one row per stage; the long name wraps onto further lines (whole), no column holds "~"
    assert sum("denoise_step" in line for line in lines) == sum(max(1, len(r.stages)) for r in records)
    assert "".join(line.split("  ")[0] for line in lines[2:5]) == raw[0]["variant"]["name"] and "~" not in text
    usual = summary_table(records).splitlines()
    assert "wasted" in usual[0] and usual[-1].startswith("(columns left out for width: rcmp, scoped;")
    assert "pred step" in lines[0] and "AG/wst%" in lines[0]
    naive = next(line for line in lines if line.startswith("naive"))
    assert "denoise_step" in naive and " 10/25 " in naive, text  # the usual names are not shortened


SELFTEST = """<script>
window.addEventListener("load", function () {
  var out = {}, t = document.getElementById("variants"), rows = function () {
    return Array.prototype.slice.call(t.tBodies[0].rows); };
  var th = t.tHead.rows[0].cells[4];
  th.click();
  var asc = rows().map(function (r) { return Number(r.cells[4].getAttribute("data-sort")); });
  th.click();
  var desc = rows().map(function (r) { return Number(r.cells[4].getAttribute("data-sort")); });
  out.sortedAsc = asc.every(function (v, i) { return i === 0 || asc[i - 1] <= v; });
  out.sortedDesc = desc.every(function (v, i) { return i === 0 || desc[i - 1] >= v; });
  out.distinct = new Set(asc).size;
  var box = document.querySelector('input.filter[data-table="variants"]');
  box.value = "naive"; box.dispatchEvent(new Event("input"));
  var shown = rows().filter(function (r) { return r.style.display !== "none"; });
  out.filtered = shown.length;
  out.filteredMatch = shown.every(function (r) { return r.textContent.indexOf("naive") >= 0; });
  box.value = ""; box.dispatchEvent(new Event("input"));
  var sel = document.getElementById("variant-toggle");
  sel.value = "naive"; sel.dispatchEvent(new Event("change"));
  var details = Array.prototype.slice.call(document.querySelectorAll("details.variant-detail"));
  out.toggled = details.filter(function (d) { return !d.classList.contains("hidden"); })
                       .map(function (d) { return d.dataset.variant + (d.open ? ":open" : ":closed"); });
  out.rowsAfterToggle = rows().filter(function (r) { return !r.classList.contains("hidden"); }).length;
  sel.value = ""; sel.dispatchEvent(new Event("change"));
  details.forEach(function (d) { d.open = true; });
  var texts = 0, overlaps = [], charts = document.querySelectorAll("svg.chart");
  charts.forEach(function (svg) {
    var frame = svg.getBoundingClientRect(), boxes = Array.prototype.map.call(svg.querySelectorAll("text"),
      function (x) { return x.getBoundingClientRect(); });
    boxes.forEach(function (a, i) {
      texts += 1;
      if (a.width === 0) overlaps.push(svg.id + ": empty text");
      if (a.left < frame.left - 0.5 || a.right > frame.right + 0.5) overlaps.push(svg.id + ": outside " + i);
      boxes.slice(i + 1).forEach(function (b) {
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom)
          overlaps.push(svg.id + ": " + i);
      });
    });
  });
  out.charts = charts.length; out.texts = texts; out.overlaps = overlaps;
  document.body.setAttribute("data-selftest", JSON.stringify(out));
});
</script></body>"""


def test_page_in_headless_chromium(page, tmp_path):
    """Sort, filter and toggle by the page's own handlers; every chart's labels inside it, none overlapping."""
    from tests.harness.report import test_report

    if not test_report.CHROMIUM.exists():
        pytest.skip("chromium not installed (the nox tests session installs it)")
    index, text = page
    probe = index.with_name("selftest.html")
    probe.write_text(text.replace("</body>", SELFTEST, 1))
    dom = test_report.chromium("--dump-dom", probe.resolve().as_uri(), user_dir=tmp_path / "p1").stdout
    found = re.search(r'data-selftest="([^"]*)"', dom)
    assert found, dom[:1000]
    result = json.loads(found.group(1).replace("&quot;", '"'))
    assert result["sortedAsc"] and result["sortedDesc"] and result["distinct"] >= 3, result
    assert result["filtered"] == 1 and result["filteredMatch"], result
    assert result["toggled"] == ["naive:open"] and result["rowsAfterToggle"] == 1, result
    # a time-by-scope chart per ok variant (3), a delta chart per variant with a reference (2), a predicted
    # block Gantt per ok variant (3), the predicted-vs-measured scatter (1)
    assert result["charts"] == 9 and result["texts"] > 80 and result["overlaps"] == [], result
    shot = tmp_path / "page.png"
    opened = text.replace(
        '<details class="variant-detail" id="detail-naive"', '<details open class="variant-detail" id="detail-naive"', 1
    )
    index.with_name("open.html").write_text(opened)
    test_report.chromium(
        f"--screenshot={shot}", index.with_name("open.html").resolve().as_uri(), user_dir=tmp_path / "p2"
    )
    assert shot.exists() and shot.read_bytes().startswith(b"\x89PNG")
    (REPO / "artifacts").mkdir(exist_ok=True)
    shutil.copy(shot, REPO / "artifacts" / "report-detail.png")
