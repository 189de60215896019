"""``python -m harness.run.stack_limit PROGRAM ARG...``: raise the soft stack limit to the hard one,
then exec PROGRAM. The launcher starts TPU workers through it.

libtpu 0.0.42.1 overflowed the default 8 MiB stack compiling the 19B ironwood step for tpu7x
(SIGSEGV in its convolution cost model, every time; the compile finished under ``ulimit -s
unlimited``, 2026-11-24). The limit has to be raised before the worker's interpreter starts (the
main thread's stack and glibc's default thread stack size are fixed at exec), and a ``preexec_fn``
would run Python between fork and exec in a launcher that may have JAX's threads running (JAX warns
that this can deadlock). An exec through this module does it with no code run in a forked child.
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
