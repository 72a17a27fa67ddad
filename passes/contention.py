"""Other programs' use of the CPU while the compile measures.

A plan is priced from timings, and timings taken while other programs run are wrong in ways that do
not cancel: on a 2-core VM with two busy loops beside it, the verifier's 1-row step was profiled at
60.7 ms (13 on a quiet machine), the plan estimated 2.15x and decoded at 1.10x. The load average
lags by a minute and counts this process too, so the measure here is the CPU time every core spent
busy (Linux /proc/stat, the hypervisor's steal time included) minus this process's own CPU time,
over the measurement's wall time: the cores' worth of work other programs took meanwhile.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
TRIES = 3  # measurements taken while other programs keep taking CPU time, before the result ships with a warning
BUSY_CORES = 0.3  # other programs taking this many cores' worth of time on average make a timing suspect
# /proc/stat's first line: cpu user nice system idle iowait irq softirq steal ...; busy = all but idle and iowait
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuUse:
    """CPU time over one measurement: wall seconds, this process's CPU seconds, every core's busy seconds."""

    wall_s: float
    own_s: float
    busy_s: float

    @property
    def other_cores(self) -> float:
        """Cores' worth of time other programs (or the hypervisor) took, on average."""
        return max(0.0, self.busy_s - self.own_s) / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def busy(self) -> bool:
        return self.other_cores >= BUSY_CORES


def busy_seconds(stat_text: str) -> float:
    """Every core's busy seconds since boot from /proc/stat's text."""
    fields = stat_text.split("\n", 1)[0].split()[1:]
    ticks = sum(int(fields[i]) for i in BUSY_FIELDS if i < len(fields))
    return ticks / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    t = os.times()
    return t.user + t.system


class CpuWatch:
    """Started on creation; stop() -> the CpuUse since then, or None where /proc/stat is not readable."""

    def __init__(self):
        self.start = self.read()

    @staticmethod
    def read() -> tuple[float, float, float] | None:
        try:
            return time.perf_counter(), own_seconds(), busy_seconds(PROC_STAT.read_text())
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> CpuUse | None:
        end = self.read()
        if self.start is None or end is None:
            return None
        return CpuUse(*(b - a for a, b in zip(self.start, end, strict=True)))


def contention_record(use: CpuUse | None, tries: int) -> dict | None:
    """What the profile keeps of a measurement other programs disturbed (None when none did)."""
    if use is None or not use.busy:
        return None
    return {"other_cores": round(use.other_cores, 2), "tries": tries}


def contention_line(record: dict) -> str:
    """The one line that says a plan was priced on a busy machine, and what to do about it."""
    return (f"other programs took {record['other_cores']:.1f} cores' worth of CPU while the compile profiled "
            f"(measured {record['tries']} times): the timings, and the plan priced from them, may be off; "
            "compile again when the machine is quiet (its packages come from the package cache)")


def measure_until_quiet(measure: Callable[[bool], dict], note: Callable[[str], None], tries: int = TRIES,
                        watch: Callable[[], CpuWatch] | None = None) -> dict:
    """measure(first) -> a profile, taken again while other programs took CPU time meanwhile (first=False:
    measure everything anew, reusing nothing timed before), at most `tries` times; a profile still disturbed
    keeps its contention_record under "contention"."""
    watch = watch or CpuWatch
    for n in range(1, tries + 1):
        w = watch()
        profile = measure(n == 1)
        contended = contention_record(w.stop(), n)
        if contended is None:
            return profile
        if n < tries:
            note(f"other programs took {contended['other_cores']:.1f} cores while profiling: measuring again")
    return {**profile, "contention": contended}
