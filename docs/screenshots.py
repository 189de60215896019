"""Annotated screenshots of the report's sections for docs/report.md, from the recorded test fixtures.

    python docs/screenshots.py            # writes docs/img/report-<section>.png

Renders ``python -m harness report tests/harness/fixtures/rerun_cpu8.jsonl --baseline
tests/harness/fixtures/sweep_cpu8.jsonl`` (the page docs/report.png shows) and, for the sections only a
compile-only sweep has, the page of ``tests/harness/fixtures/tpu_b181d3b.jsonl`` (compile-only v6e and
v7x records; ``--tpu RESULTS`` takes another), then, per section, a copy of the page showing that
section alone with numbered marks on the parts the documentation explains, taken
by headless Chromium (Debian's ``chromium``) and cropped to its content. The numbers match the lists
in docs/report.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--virtual-time-budget=3000",
)

TPU_RESULTS = "tests/harness/fixtures/tpu_b181d3b.jsonl"
# name -> (the section's heading, or "header"; [(CSS selector, mark)]; window height). Of the CPU page.
SECTIONS: dict[str, tuple[str, list[tuple[str, str]], int]] = {
    "header": (
        "header",
        [
            ("header h1", "1"),
            ("#mode", "2"),
            ("header dl.meta dd:nth-of-type(3)", "3"),
            ("header dl.meta dd:nth-of-type(4)", "4"),
        ],
        700,
    ),
    "comparison": (
        "Against baseline",
        [
            ("#gated-regressions", "1"),
            ("#comparison-changed tbody tr:first-child td:nth-child(7)", "2"),
            ("#comparison-changed tbody tr:first-child td:nth-child(8)", "3"),
            ("#comparison-changed tbody tr:first-child td:nth-child(10)", "4"),
        ],
        1100,
    ),
    "variants": (
        "Variants",
        [
            ("#variants tbody tr:first-child td:nth-child(3)", "1"),
            ("#variants tbody tr:first-child td:nth-child(5)", "2"),
            ("#variants tbody tr:nth-child(2) td:nth-child(6)", "3"),
            ("#variants tbody tr:nth-child(3) td:nth-child(10)", "4"),
            ("#variants tbody tr:first-child td:nth-child(12)", "5"),
            ("#variants tbody tr:nth-child(4) td:nth-child(3)", "6"),
        ],
        900,
    ),
    "details": (
        "Per variant: where the time went",
        [("#detail-naive summary", "1"), ("#detail-naive p.trace", "2"), ("#detail-naive h5 + input + table", "3")],
        1800,
    ),
    "plots": ("Plots", [("section img", "1")], 1600),
    "collectives": ("Collectives", [("section table", "1")], 900),
    "failed": ("Failed variants", [("#failed h3", "1"), ("#failed pre", "2")], 900),
    "traces": ("Traces", [("#trace-links", "1")], 700),
}

# The same, of the compile-only page.
TPU_SECTIONS: dict[str, tuple[str, list[tuple[str, str]], int]] = {
    "target": (
        "On the target",
        [
            ("#target-analysis tbody tr:first-child td:nth-child(5)", "1"),
            ("#target-analysis tbody tr:first-child td:nth-child(8)", "2"),
            ("#target-analysis tbody tr:first-child td:nth-child(13)", "3"),
            ("#target-analysis tbody tr:first-child td:nth-child(14)", "4"),
        ],
        700,
    ),
    "predicted": (
        "Predicted (simulated",
        [
            ("#predicted-table tbody tr:first-child td:nth-child(3)", "1"),
            ("#predicted-table tbody tr:first-child td:nth-child(4)", "2"),
            ("#predicted-table tbody tr:first-child td:nth-child(5)", "3"),
            ("#predicted-table tbody tr:first-child td:nth-child(9)", "4"),
            ("#predicted-table tbody tr:first-child td:nth-child(11)", "5"),
            ("#predicted-table tbody tr:first-child td:nth-child(12)", "6"),
        ],
        700,
    ),
    "xprof": (
        "In XProf",
        [
            ("#xprof-table tbody tr:first-child td:nth-child(4)", "1"),
            ("#xprof-table tbody tr:first-child td:nth-child(8)", "2"),
        ],
        800,
    ),
}

_SCRIPT = """<script>
window.addEventListener('load', () => {
  const want = %(heading)s, marks = %(marks)s;
  for (const el of document.body.children) {
    const h2 = el.querySelector(':scope > h2');
    const keep = want === 'header' ? el.tagName === 'HEADER' : (h2 && h2.textContent.startsWith(want));
    if (!keep) el.style.display = 'none';
  }
  const detail = document.querySelector('#detail-naive');
  if (detail) detail.open = true;
  const missing = [];
  for (const [sel, n] of marks) {
    const shown = [...document.querySelectorAll(sel)].filter(e => e.offsetParent !== null);
    if (!shown.length) { missing.push(sel); continue; }
    const el = shown[0], r = el.getBoundingClientRect();
    el.style.outline = '3px solid #e8590c';
    el.style.outlineOffset = '1px';
    const b = document.createElement('div');
    b.textContent = n;
    Object.assign(b.style, {position: 'absolute',
      left: Math.max(0, r.left + scrollX - 26) + 'px', top: (r.top + scrollY - 12) + 'px',
      width: '24px', height: '24px', borderRadius: '12px', background: '#e8590c', color: '#fff',
      font: 'bold 14px sans-serif', textAlign: 'center', lineHeight: '24px', zIndex: 1000});
    document.body.appendChild(b);
  }
  document.body.setAttribute('data-missing', JSON.stringify(missing));
});
</script></body>"""


def render_report(out: Path, results: str, baseline: str | None = None) -> Path:
    """The report page of ``results`` (paths relative to the repository, as the page then names them)."""
    cmd = [sys.executable, "-m", "harness", "report", results, "--out", str(out)]
    cmd += ["--baseline", baseline] if baseline else []
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    return out / "index.html"


def chromium(*args: str, profile: Path) -> str:
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120
    )
    return done.stdout


def crop(path: Path) -> None:
    """Cut the blank rows below the content (the window is taller than most sections)."""
    from PIL import Image, ImageChops

    image = Image.open(path).convert("RGB")
    box = ImageChops.difference(image, Image.new("RGB", image.size, (255, 255, 255))).getbbox()
    if box:
        image.crop((0, 0, image.width, min(image.height, box[3] + 16))).save(path)


def shoot(index: Path, name: str, section: tuple[str, list[tuple[str, str]], int], work: Path) -> Path:
    heading, marks, height = section
    page = index.with_name(f"shot-{name}.html")
    script = _SCRIPT % {"heading": json.dumps(heading), "marks": json.dumps(marks)}
    page.write_text(index.read_text().replace("</body>", script, 1))
    dom = chromium("--dump-dom", page.as_uri(), profile=work / f"dom-{name}")
    missing = dom.split('data-missing="', 1)[1].split('"', 1)[0] if 'data-missing="' in dom else "?"
    if missing not in ("[]", "[&quot;&quot;]") and missing != "[]":
        raise SystemExit(f"{name}: marks not found on the page: {missing}")
    shot = OUT / f"report-{name}.png"
    chromium(f"--screenshot={shot}", f"--window-size=1400,{height}", page.as_uri(), profile=work / f"shot-{name}")
    crop(shot)
    return shot


def main(argv: list[str]) -> int:
    tpu = argv[argv.index("--tpu") + 1] if "--tpu" in argv else TPU_RESULTS
    OUT.mkdir(parents=True, exist_ok=True)
    fixtures = "tests/harness/fixtures"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        index = render_report(work / "cpu", f"{fixtures}/rerun_cpu8.jsonl", f"{fixtures}/sweep_cpu8.jsonl")
        for name, section in SECTIONS.items():
            print(shoot(index, name, section, work).relative_to(ROOT))
        if not (ROOT / tpu).exists():
            print(f"{tpu}: not found; the compile-only sections were not taken", file=sys.stderr)
            return 1
        index = render_report(work / "tpu", tpu)
        for name, section in TPU_SECTIONS.items():
            print(shoot(index, name, section, work).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
