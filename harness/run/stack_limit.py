"""``python -m harness.run.stack_limit PROGRAM ARG...``: raise the soft stack limit to the hard one,
then exec PROGRAM. The launcher starts TPU workers through it.

A libtpu compile of a full-size step can overflow the default 8 MiB stack (a SIGSEGV that ``ulimit
-s unlimited`` cures: benchmarks/results/docstring-findings-2026-11-29.md). The limit has to be
raised before the worker's interpreter starts (the main thread's stack and glibc's default thread
stack size are fixed at exec), and a ``preexec_fn`` would run Python between fork and exec in a
launcher that may have JAX's threads running (JAX warns that this can deadlock). An exec through
this module does it with no code run in a forked child.
"""

from __future__ import annotations

import os
import resource
import sys


def raise_stack_limit() -> None:
    """This process's soft stack limit raised to its hard one (inherited by what it execs)."""
    _, hard = resource.getrlimit(resource.RLIMIT_STACK)
    resource.setrlimit(resource.RLIMIT_STACK, (hard, hard))


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m harness.run.stack_limit PROGRAM [ARG...]")
    raise_stack_limit()
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
