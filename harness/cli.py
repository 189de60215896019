"""``python -m harness <verb> ...``: a thin dispatcher over ``harness/commands/<verb>.py``.

Each command module has the same small interface: a docstring (its description),
``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> exit code``.
Adding a verb is its name in :data:`VERBS` (its module: ``harness/commands/<verb>.py``, ``-`` as ``_``).

Every way a verb can end is one exit status and, on failure, one ``error:`` line on stderr, no
traceback unless ``--debug`` (the table: docs/faults.md): 0 done; 1 the verb's own verdict; 2 what
the user gave (:data:`USER_ERRORS`); 3 the machine's storage refused a read or write
(:class:`~harness.results.storage.StorageError`: what was written stays whole, the same command
goes on once the fault is cleared); 4 a bug in the harness; 130 / 143 SIGINT / SIGTERM, the worker
stopped and its temporary files removed (:mod:`harness.run.interrupt`). Warnings are ``warning:`` lines.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
import warnings
from typing import Any

from harness.plan.manifest import ManifestError
from harness.results.lock import SweepLocked
from harness.results.storage import EXIT_STORAGE, StorageError
from harness.results.store import InvalidRecordWarning, RecordError, SweepIdError
from harness.run.interrupt import Interrupted, exit_on_signals

VERBS = (
    "sweep inspect report gate baseline diff collect search bisect gate-power history calibrate profile run-variant ab"
)
COMMANDS: dict[str, str] = {verb: f"harness.commands.{verb.replace('-', '_')}" for verb in VERBS.split()}
USER_ERRORS = (ManifestError, RecordError, SweepIdError, SweepLocked)
EXIT_USER, EXIT_INTERNAL = 2, 4
DEBUG_HELP = "on an error, print its traceback too"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    top.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    verbs = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = verbs.add_parser(
            name, help=module.HELP, description=module.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_arguments(sub)
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
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
            return _fail(args, f"error: {e}", EXIT_USER)
        except StorageError as e:
            return _fail(args, f"error: {e}", EXIT_STORAGE)
        except OSError as e:  # one the harness did not name: still the machine's storage, or a device
            return _fail(args, f"error: {e}; then run the same command again", EXIT_STORAGE)
        except Interrupted as e:
            return _fail(args, f"interrupted by {e.name}: {e.detail or 'stopped'}", e.exit_code)
        except Exception as e:  # noqa: BLE001 - a bug: one line, the traceback on request
            text = f"{type(e).__name__}: {e}".splitlines()[0]
            return _fail(args, f"error: internal error ({text}); run with --debug for the traceback", EXIT_INTERNAL)


def _fail(args: argparse.Namespace, line: str, code: int) -> int:
    """One line on stderr (and, with --debug, the traceback before it); the exit status."""
    if getattr(args, "debug", False):
        traceback.print_exc(file=sys.stderr)
    print(line, file=sys.stderr)
    return code
