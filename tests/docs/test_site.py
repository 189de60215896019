"""The documentation site as a reader gets it: built strict, every internal link pointing at a page or
file of the site, and pages rendered by headless Chromium with their navigation, images and the
generated reference tables (``nox -s docs`` builds the same site; this test adds the browser)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urldefrag

import pytest

from tests.browser import CHROMIUM, chromium

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("index.html", "start.html", "report.html", "reference/manifest.html", "reference/cli.html")
PROBE = """<script>
window.addEventListener('load', () => {
  const imgs = [...document.querySelectorAll('article img')];
  document.body.setAttribute('data-probe', JSON.stringify({
    title: (document.querySelector('article h1') || {}).textContent || '',
    nav: document.querySelectorAll('nav.md-nav a.md-nav__link').length,
    images: imgs.length,
    broken: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
    tables: document.querySelectorAll('article table').length,
  }));
});
</script></body>"""
SITE_ARGS = ("--virtual-time-budget=3000",)  # let the pages' scripts run before the dump
SITE_WINDOW = "1280,1600"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("mkdocs")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_every_internal_link_resolves(site: Path) -> None:
    bad = []
    for page in site.rglob("*.html"):
        for href in re.findall(r'href="([^"#?]+)(?:#[^"]*)?"', page.read_text()):
            if "://" in href or href.startswith(("mailto:", "data:")):
                continue
            path = urldefrag(href)[0]
            target = (site / path.lstrip("/") if path.startswith("/") else page.parent / path).resolve()
            if not target.exists():
                bad.append(f"{page.relative_to(site)} -> {href}")
    assert not bad, bad[:20]


@pytest.mark.parametrize("name", PAGES)
def test_page_in_headless_chromium(site: Path, name: str, tmp_path: Path) -> None:
    if not CHROMIUM.exists():
        pytest.skip("chromium not installed (the nox tests session installs it)")
    page = site / name
    probe = page.with_name(f"probe-{page.name}")
    probe.write_text(page.read_text().replace("</body>", PROBE, 1))
    dom = chromium(*SITE_ARGS, "--dump-dom", probe.as_uri(), user_dir=tmp_path / "dom", window=SITE_WINDOW).stdout
    found = re.search(r'data-probe="([^"]*)"', dom)
    assert found, dom[:500]
    result = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert result["title"].strip() and result["nav"] >= 20, result
    assert result["broken"] == [], result
    if name == "report.html":
        assert result["images"] >= 8, result  # one annotated screenshot per section
    if name.startswith("reference/"):
        assert result["tables"] >= 1 or "manifest" in name, result
    shot = ROOT / "artifacts" / f"site-{name.replace('/', '-').replace('.html', '.png')}"
    shot.parent.mkdir(exist_ok=True)
    chromium(*SITE_ARGS, f"--screenshot={shot}", page.as_uri(), user_dir=tmp_path / "shot", window=SITE_WINDOW)
    assert shot.exists() and shot.read_bytes().startswith(b"\x89PNG")
