"""``harness ab``'s measurement: two long-lived workers (:mod:`harness.run.ab_worker`), one per tree,
each holding the same stage compiled from its tree's code, called alternately.

Both workers start at once and build their stage in parallel; then, pair after pair, a fair coin
(seeded, recorded) decides which side is called first, and each side runs one call while the other
waits on its input (no overlap). The two calls of a pair are milliseconds apart, so drift and
bursts of other work reach both sides alike, and the coin makes their order no side's advantage.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

WORKER = Path(__file__).with_name("ab_worker.py")


class AbError(RuntimeError):
    """A side could not be measured (its worker failed or died); the message names the side."""


@dataclass(frozen=True)
class Pair:
    """One unit of the test: each side's fastest of its calls in the pair (other work on the machine
    only adds time to a call: Chen & Revels, "Robust benchmarking in noisy environments", 2016), the
    calls alternating, ``head_first`` drawn by the coin."""

    base_s: float
    head_s: float
    head_first: bool
    base_calls: tuple[float, ...] = ()
    head_calls: tuple[float, ...] = ()

    @property
    def ratio(self) -> float:
        return self.head_s / self.base_s


def worker_env(tree: Path, devices: int, pad: int = 0, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The same environment for both sides but the tree first on the path: CPU, ``devices`` simulated,
    and ``pad`` bytes of an unused variable (``HARNESS_AB_PAD``: the environment's size moves the
    stack's alignment, :func:`start_both`)."""
    env = dict(os.environ if base is None else base)
    env["HARNESS_AB_PAD"] = "x" * pad
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = str(tree)
    env["PYTHONHASHSEED"] = "0"
    return env


class Worker:
    """One side's process: started on ``tree`` with ``spec``; :meth:`call` times one call."""

    def __init__(self, side: str, tree: Path, spec: Mapping[str, Any], devices: int, pad: int = 0):
        self.side, self.tree, self.pad = side, tree, pad
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)],
            cwd=tree,
            env=worker_env(tree, devices, pad),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._send(json.dumps(dict(spec)))
        self.setup_s: float | None = None

    def _send(self, line: str) -> None:
        stdin: IO[str] | None = self.proc.stdin
        assert stdin is not None
        try:
            stdin.write(line + "\n")
            stdin.flush()
        except BrokenPipeError as e:
            raise AbError(f"{self.side} ({self.tree}): its worker exited (code {self.proc.poll()})") from e

    def _read(self) -> dict[str, Any]:
        stdout: IO[str] | None = self.proc.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            raise AbError(f"{self.side} ({self.tree}): its worker exited (code {self.proc.wait()}) without answering")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise AbError(f"{self.side} ({self.tree}) could not build or run the stage: {answer['error']}")
        return answer

    def ready(self) -> float:
        self.setup_s = float(self._read()["setup_s"])
        return self.setup_s

    def call(self) -> float:
        self._send("call")
        return float(self._read()["s"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._send("quit")
                self.proc.wait(timeout=30)
            except (AbError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


def measure_pairs(
    bases: Sequence[Worker],
    heads: Sequence[Worker],
    pairs: int,
    seed: int,
    calls: int = 1,
    progress: Callable[[int, list[Pair]], None] | None = None,
) -> list[Pair]:
    """``pairs`` pairs of ``calls`` calls a side, alternating (ABAB... or BABA...: which side starts is
    drawn by ``random.Random(seed)`` per pair); pair ``i`` calls each side's worker ``i mod k``."""
    if calls < 1 or not bases or len(bases) != len(heads):
        raise ValueError(
            f"calls must be >= 1 ({calls}) and both sides need as many workers ({len(bases)}, {len(heads)})"
        )
    coin = random.Random(seed)
    out: list[Pair] = []
    for i in range(pairs):
        base, head = bases[i % len(bases)], heads[i % len(heads)]
        head_first = coin.random() < 0.5
        order = (head, base) if head_first else (base, head)
        times: dict[str, list[float]] = {"base": [], "head": []}
        for _ in range(calls):
            for worker in order:
                times[worker.side].append(worker.call())
        b, h = tuple(times["base"]), tuple(times["head"])
        out.append(Pair(min(b), min(h), head_first, b, h))
        if progress is not None:
            progress(i + 1, out)
    return out


def start_both(
    base_tree: Path, head_tree: Path, spec: Mapping[str, Any], devices: int, per_side: int = 1, seed: int = 0
) -> tuple[list[Worker], list[Worker], float]:
    """``per_side`` workers a side, all started together and ready (their stage built, compiled and
    warmed); the wall seconds that took. A failure stops them all.

    Two processes of the same code can run at different speeds for reasons that are no property of
    the code (where the stack, heap and code land; Mytkowicz et al., "Producing wrong data without
    doing anything obviously wrong!", ASPLOS 2009, moved a program by up to ~10 % through the
    environment's size alone). Each worker gets a random environment size (seeded) and the pairs
    rotate through a side's workers, so one lucky or unlucky layout is averaged with others
    instead of becoming a side's speed."""
    if per_side < 1:
        raise ValueError(f"per_side must be >= 1, got {per_side}")
    start = time.perf_counter()
    pads = random.Random(seed + 1).sample(range(4096), 2 * per_side)
    bases = [Worker("base", base_tree, spec, devices, pads[2 * i]) for i in range(per_side)]
    heads = [Worker("head", head_tree, spec, devices, pads[2 * i + 1]) for i in range(per_side)]
    try:
        for worker in [*bases, *heads]:
            worker.ready()
    except BaseException:
        for worker in [*bases, *heads]:
            worker.close()
        raise
    return bases, heads, time.perf_counter() - start
