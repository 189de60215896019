"""Reference pages of the documentation, generated from the code at build time.

:func:`pages` maps a page path under ``docs/`` to its Markdown: every manifest key
(:mod:`harness.plan.keys`), every config override the model takes (:mod:`.knobs`), every CLI verb
and flag (:func:`harness.cli.parser`), every metric (the metric catalogue) and every hardware
constant with its source (:mod:`harness.targets`, :mod:`harness.metrics.timeline.specs`).
``docs/hooks.py`` adds them to the MkDocs site; nothing generated is committed.
"""

from __future__ import annotations

from collections.abc import Callable

PAGES: dict[str, str] = {
    "reference/manifest.md": "harness.docgen.manifest",
    "reference/overrides.md": "harness.docgen.knobs",
    "reference/cli.md": "harness.docgen.cli",
    "reference/metrics.md": "harness.docgen.metrics",
    "reference/hardware.md": "harness.docgen.hardware",
}


def pages() -> dict[str, str]:
    """Page path (relative to ``docs/``) -> Markdown, each from its module's ``render()``."""
    import importlib

    out = {}
    for path, module in PAGES.items():
        render: Callable[[], str] = importlib.import_module(module).render
        out[path] = render()
    return out
