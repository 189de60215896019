"""The page's interactivity, inline and dependency-free: sortable and filterable tables and a
variant toggle.

* A ``<table class="sortable">`` sorts by a column when its header is clicked (again: reversed);
  cells compare by their ``data-sort`` value when they have one (numbers), else by their text.
* An ``<input class="filter" data-table="ID">`` hides the rows of table ``ID`` whose text does not
  contain what was typed (case-insensitive).
* The ``<select id="variant-toggle">`` shows only the elements whose ``data-variant`` is the chosen
  variant (every one for "all"); elements without ``data-variant`` always show.

Everything is plain DOM scripting in :data:`SCRIPT` (no library, no network).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

e = html.escape

CSS = """
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[data-dir="asc"]::after { content: " \\25B2"; }
table.sortable th[data-dir="desc"]::after { content: " \\25BC"; }
input.filter { margin: 4px 0; padding: 2px 6px; width: 260px; }
.toggle { position: sticky; top: 0; background: #fff; padding: 6px 0; z-index: 2; border-bottom: 1px solid #dee2e6; }
.hidden { display: none !important; }
details.variant-detail { margin: 10px 0; border: 1px solid #dee2e6; border-radius: 4px; padding: 4px 10px; }
details.variant-detail > summary { font-weight: 600; cursor: pointer; }
svg.chart { display: block; margin: 8px 0 4px; } svg.chart text { font: 11px system-ui, sans-serif; fill: #212529; }
svg.chart rect.bar { fill: #4c72b0; }
svg.chart rect.bar.neg { fill: #c44e52; } .sig { font-weight: 700; color: #842029; }
"""

SCRIPT = """
(function () {
  function key(cell) {
    if (!cell) return "";
    var s = cell.getAttribute("data-sort");
    if (s !== null && s !== "" && !isNaN(Number(s))) return Number(s);
    return cell.textContent.trim().toLowerCase();
  }
  function sortBy(th) {
    var table = th.closest("table"), body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var dir = th.getAttribute("data-dir") === "asc" ? "desc" : "asc";
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute("data-dir"); });
    th.setAttribute("data-dir", dir);
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = key(a.cells[col]), y = key(b.cells[col]);
      var c = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
      return dir === "asc" ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  function filter(input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    if (!table) return;
    var q = input.value.trim().toLowerCase();
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      r.classList.toggle("filtered-out", q !== "" && r.textContent.toLowerCase().indexOf(q) < 0);
      r.style.display = r.classList.contains("filtered-out") ? "none" : "";
    });
  }
  function toggle(value) {
    document.querySelectorAll("[data-variant]").forEach(function (el) {
      el.classList.toggle("hidden", value !== "" && el.getAttribute("data-variant") !== value);
    });
    if (value !== "") document.querySelectorAll("details.variant-detail[data-variant]").forEach(function (d) {
      if (d.getAttribute("data-variant") === value) d.open = true;
    });
  }
  window.report = { sortBy: sortBy, filter: filter, toggle: toggle };
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("table.sortable th").forEach(function (th) {
      th.addEventListener("click", function () { sortBy(th); });
    });
    document.querySelectorAll("input.filter").forEach(function (input) {
      input.addEventListener("input", function () { filter(input); });
    });
    var sel = document.getElementById("variant-toggle");
    if (sel) sel.addEventListener("change", function () { toggle(sel.value); });
  });
})();
"""


def filter_box(table_id: str, what: str = "rows") -> str:
    return (
        f'<input class="filter" type="search" data-table="{e(table_id)}" '
        f'placeholder="filter {e(what)}" aria-label="filter {e(what)}">'
    )


def cell(text: str, sort: float | str | None = None, left: bool = False, raw: bool = False) -> str:
    """A ``<td>``: ``text`` escaped (unless ``raw``), ``sort`` as its ``data-sort`` value."""
    attrs = ' class="l"' if left else ""
    if sort is not None:
        attrs += f' data-sort="{e(str(sort))}"'
    return f"<td{attrs}>{text if raw else e(text)}</td>"


def row(cells: Sequence[str], left: int = 1, tag: str = "td") -> str:
    """``<tr>`` of ``cells`` (``th`` ones escaped, ``td`` ones as given), the first ``left`` aligned left."""
    cells = [e(c) for c in cells] if tag == "th" else cells
    return (
        "<tr>"
        + "".join(f'<{tag} class="l">{c}</{tag}>' if i < left else f"<{tag}>{c}</{tag}>" for i, c in enumerate(cells))
        + "</tr>"
    )


def table(head: Sequence[str], rows: Sequence[str], table_id: str, left: int = 1, *, filterable: bool = True) -> str:
    """A sortable table (rows already ``<tr>...</tr>``), with a filter box above it when ``filterable``."""
    box = filter_box(table_id) if filterable else ""
    return (
        f'{box}<table id="{e(table_id)}" class="sortable"><thead>{row(head, left, "th")}</thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def variant_toggle(names: Sequence[str]) -> str:
    options = "".join(f'<option value="{e(n)}">{e(n)}</option>' for n in names)
    return (
        '<div class="toggle"><label>Variant: <select id="variant-toggle"><option value="">all variants</option>'
        f"{options}</select></label> <span class=note>shows one variant's rows and details</span></div>"
    )
