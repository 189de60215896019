"""The real-profile page (``profile.html``): a profile's programs predicted against what it measured,
per module and per op by name; a pure function of the result ``harness profile`` writes
(``profile.json``, :mod:`harness.metrics.xprof.profile_compare`'s fields), nothing re-run or re-parsed.

Every predicted number carries the result's label (``predicted, datasheet rates`` or ``predicted,
measured curves``); the link-sharing policy the spec does not use is a column of its own, since
it is an assumption too; the notes say what the prediction could not price.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.fmt import fmt_pct, fmt_ratio
from harness.report.interactive import row

PROFILE_JSON, PROFILE_HTML = "profile.json", "profile.html"
_STYLE = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:6px 0 14px}"
    "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td.l,th.l{text-align:left}"
    ".no{color:#b00}.note{color:#555}"
)
e = html.escape


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:,.3f} ms" if x < 10 else f"{x:,.1f} ms"


def load(path: str | Path) -> dict[str, Any]:
    """A ``profile.json`` (or the folder holding one); ValueError naming the file when it is not one."""
    path = Path(path)
    path = path / PROFILE_JSON if path.is_dir() else path
    result = json.loads(path.read_text())
    if not isinstance(result, dict) or result.get("kind") != "profile-prediction":
        raise ValueError(
            f"{path}: not a profile prediction (kind {result.get('kind') if isinstance(result, dict) else None!r})"
        )
    return result


def policies(result: Mapping[str, Any], other: bool = False) -> str:
    """``links fair, host link fifo``: the policies the prediction used (``other``: the ones it did
    not, the ``other_policy`` columns); a result written before the host link had its own policy
    shared it by ``link_sharing``."""
    flip = {"fair": "fifo", "fifo": "fair"}
    links = result["link_sharing"]
    host = result.get("host_link_sharing", links)
    if other:
        links, host = flip[links], flip[host]
    return f"links {links}, host link {host}"


def modules_section(result: Mapping[str, Any]) -> str:
    """Per module: measured median, predicted, the other policy's, the interval, and whether it holds."""
    label, other = result["label"], policies(result, other=True)
    head = row(
        ["module", "devices (runs)", "measured (median)", label, other, "interval", "pred / meas", "inside"], 2, "th"
    )
    rows = []
    for m in result["modules"]:
        lo, hi = m["interval_ms"]
        inside = "yes" if m["inside"] else '<span class="no">no</span>'
        cells = [e(m["module"]), f"{m['num_partitions']} ({m['measured_runs']} runs)", _ms(m["measured_ms"])]
        cells += [
            _ms(m["predicted_ms"]),
            _ms(m["other_policy_ms"]),
            f"{_ms(lo)} – {_ms(hi)}",
            fmt_ratio(m["ratio"]),
            inside,
        ]
        rows.append(row(cells, 1))
    return f"<h2>Modules</h2><table>{head}{''.join(rows)}</table>"


def ops_section(result: Mapping[str, Any]) -> str:
    """Per op by name, largest measured share first."""
    label = result["label"]
    head = row(
        ["module", "op", "measured (median)", "share", label, policies(result, other=True), "pred / meas"], 2, "th"
    )
    rows = []
    for o in result["ops"]:
        pred = o["predicted_ms"]
        shown = '<span class="no">0 (no wait predicted)</span>' if o["share"] > 0.001 and not pred else _ms(pred)
        op = e(o["op"]) + (" (host offload)" if o["host_offload"] else "")
        cells = [e(o["module"]), op, _ms(o["measured_ms"]), fmt_pct(o["share"])]
        rows.append(row([*cells, shown, _ms(o["other_policy_ms"]), fmt_ratio(o["ratio"])], 2))
    return f"<h2>Ops</h2><table>{head}{''.join(rows)}</table>"


def _score(name: str, s: Mapping[str, Any]) -> str:
    median = s["median_abs_log_ratio"]
    value = "∞ (half or more of them predicted at zero)" if median is None else f"{median:.3f}"
    zero = f"; predicted at zero: {e(', '.join(s['predicted_zero']))}" if s["predicted_zero"] else ""
    held = f"{len(s['ops'])} ops holding {fmt_pct(s['share'])}"
    return f"<li>{e(name)}: median |ln(pred/meas)| = {value} over {held}{zero}</li>"


def notes_section(result: Mapping[str, Any]) -> str:
    items = [_score(f"{result['label']}, {policies(result)}", result["score"])]
    items.append(_score(policies(result, other=True), result["score_other_policy"]))
    for m in result["modules"]:
        if m.get("assumed"):
            points = ", ".join(m["assumed"])
            text = f"the interval's points that move an assumption, not a published or measured constant: {points}"
            items.append(f'<li class="note">{e(m["module"])}: {e(text)}</li>')
        for text in (*m["repairs"], *m["notes"]):
            items.append(f'<li class="note">{e(m["module"])}: {e(text)}</li>')
        if m.get("predicted_xspace"):
            items.append(f'<li class="note">{e(m["module"])}: predicted XSpace {e(m["predicted_xspace"])}</li>')
    return f"<h2>Score and notes</h2><ul>{''.join(items)}</ul>"


def render(result: Mapping[str, Any]) -> str:
    """The page of one ``profile.json``."""
    chips = ", ".join(f"TPU:{k} = chip {v}" for k, v in result["chips"].items())
    title = f"{e(Path(result['profile']).name)} on {e(result['topology'])}"
    head = f"<p>Profile <code>{e(result['profile'])}</code>; this host's planes: {e(chips)}. "
    head += f"Spec {e(result['spec']['name'])}, {e(result['label'])}, {e(policies(result))}.</p>"
    body = modules_section(result) + ops_section(result) + notes_section(result)
    page = f"<h1>Real profile: predicted against measured</h1><h2>{title}</h2>{head}{body}"
    meta = f"<meta charset='utf-8'><title>{title}</title><style>{_STYLE}</style>"
    return f"<!doctype html><html><head>{meta}</head><body>{page}</body></html>"


def write(result_path: str | Path, out: str | Path | None = None) -> Path:
    """``profile.html`` of a ``profile.json``, next to it unless ``out`` (a folder) is given."""
    result_path = Path(result_path)
    result = load(result_path)
    folder = Path(out) if out is not None else (result_path if result_path.is_dir() else result_path.parent)
    folder.mkdir(parents=True, exist_ok=True)
    page = folder / PROFILE_HTML
    page.write_text(render(result))
    return page
