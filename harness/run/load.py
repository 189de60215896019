"""The machine's load while a stage is timed, so a busy machine shows in the record, and a wait for a
quiet one before timing starts (``[run] max_load``).

"Others' busy cores" is the CPU time every other process used during a window, divided by the
window's wall time: host-wide busy time from ``/proc/stat`` (user, nice, system, irq, softirq,
steal) less this process's own CPU time (``getrusage``). 1.0 means another job kept one core busy
the whole time. The 1-minute load average is recorded beside it, as the shell's ``uptime`` shows
it (it counts this process's threads too). Where ``/proc/stat`` does not exist the busy cores are
None and nothing waits.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.families import Load, QuietWait

PROC_STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system (idle iowait) irq softirq steal
LOADED_SHARE = 0.25  # samples count as taken under load when others kept this share of the cores busy
POLL_S = 1.0


class MachineBusy(RuntimeError):
    """The machine stayed busier than ``[run] max_load`` for the whole bounded wait."""


def _busy_cpu_s(stat: Path = PROC_STAT) -> float | None:
    try:
        first = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    ticks = [int(x) for x in first[1:]]
    return sum(ticks[i] for i in BUSY_FIELDS if i < len(ticks)) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cores() -> int:
    return os.cpu_count() or 1


def loaded(others_busy_cores: float | None, n_cores: int) -> bool:
    """Whether other processes kept at least :data:`LOADED_SHARE` of the cores busy."""
    return others_busy_cores is not None and others_busy_cores >= LOADED_SHARE * n_cores


@dataclass(frozen=True)
class Window:
    """Counters at the start of a timed region; :meth:`close` gives the region's load."""

    wall: float
    busy: float | None
    own: float
    loadavg: float

    @classmethod
    def open(cls) -> Window:
        return cls(time.perf_counter(), _busy_cpu_s(), _own_cpu_s(), os.getloadavg()[0])

    def others_busy_cores(self) -> tuple[float | None, float, float | None]:
        """(others' busy cores, wall seconds, others' CPU seconds) since :meth:`open`."""
        wall = time.perf_counter() - self.wall
        busy = _busy_cpu_s()
        if busy is None or self.busy is None or wall <= 0:
            return None, wall, None
        others = max(0.0, (busy - self.busy) - (_own_cpu_s() - self.own))
        return others / wall, wall, others

    def close(self) -> Load:
        """The record's ``load``: cores, others' CPU seconds and busy cores, load averages, loaded."""
        busy_cores, wall, others = self.others_busy_cores()
        n = cores()
        return Load(
            cores=n,
            wall_s=wall,
            others_cpu_s=others,
            others_busy_cores=busy_cores,
            loadavg_1m=[self.loadavg, os.getloadavg()[0]],
            loaded=loaded(busy_cores, n),
            loaded_above_cores=LOADED_SHARE * n,
        )


def others_busy_now(interval_s: float = POLL_S) -> float | None:
    """Others' busy cores over the next ``interval_s`` seconds (this process sleeping meanwhile)."""
    window = Window.open()
    time.sleep(interval_s)
    return window.others_busy_cores()[0]


def wait_for_quiet(
    max_load: float, wait_s: float, say: Callable[[str], None] = lambda _: None, *, poll_s: float = POLL_S
) -> QuietWait:
    """Block until other processes keep at most ``max_load`` cores busy (sampled over ``poll_s``), for at
    most ``wait_s`` seconds; :class:`MachineBusy` if they never do. Returns how long it waited."""
    start = time.monotonic()
    while True:
        busy = others_busy_now(poll_s)
        waited = time.monotonic() - start
        if busy is None or busy <= max_load:
            return QuietWait(max_load=max_load, waited_s=waited, others_busy_cores=busy)
        if waited >= wait_s:
            raise MachineBusy(
                f"machine busy: other processes kept {busy:.2f} cores busy, above run.max_load = {max_load:g}, "
                f"for the whole wait of {wait_s:g} s; not timed"
            )
        say(f"waiting for a quiet machine: others use {busy:.2f} cores > max_load {max_load:g} ({waited:.0f} s)")
