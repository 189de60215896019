"""``python -m harness <verb> ...``: a thin dispatcher over ``harness/commands/<verb>.py``.

Each command module has the same small interface: a docstring (its description),
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> exit code``.
Adding a verb is one line in :data:`COMMANDS`.

Problems with what the user gave (a manifest, a results file, a sweep id, a sweep already
running) are one ``error:`` line and exit 2; SIGINT and SIGTERM end a verb cleanly (its worker
stopped, its temporary files removed) with exit 130 / 143 (:mod:`harness.run.interrupt`); the
harness's own warnings are ``warning:`` lines.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from typing import Any

from harness.plan.manifest import ManifestError
from harness.results.lock import SweepLocked
from harness.results.store import InvalidRecordWarning, RecordError, SweepIdError
from harness.run.interrupt import Interrupted, exit_on_signals

COMMANDS: dict[str, str] = {
    "sweep": "harness.commands.sweep",
    "inspect": "harness.commands.inspect",
    "report": "harness.commands.report",
    "gate": "harness.commands.gate",
    "baseline": "harness.commands.baseline",
    "diff": "harness.commands.diff",
    "collect": "harness.commands.collect",
    "search": "harness.commands.search",
    "bisect": "harness.commands.bisect",
    "gate-power": "harness.commands.gate_power",
    "calibrate": "harness.commands.calibrate",
    "run-variant": "harness.commands.run_variant",
}
USER_ERRORS = (ManifestError, RecordError, SweepIdError, SweepLocked)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    verbs = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = verbs.add_parser(
            name, help=module.HELP, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run)
    return top


def _show_warning(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    print(f"warning: {message}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with warnings.catch_warnings(), exit_on_signals():
        warnings.simplefilter("default", InvalidRecordWarning)  # once per message, never an exception
        warnings.showwarning = _show_warning
        try:
            return int(args.handler(args))
        except USER_ERRORS as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except Interrupted as e:
            print(f"interrupted by {e.name}: {e.detail or 'stopped'}", file=sys.stderr)
            return e.exit_code
