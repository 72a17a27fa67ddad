"""What other programs take of the CPU: Linux /proc/stat's busy time of every core (the hypervisor's steal time
included) less this process's own CPU time, over a stretch of wall time. The one-minute load average would do
neither: it trails by a minute (a compile that just finished in the same command line still counts) and counts
this process too. The compile's profile retries on it (passes/contention.py); `yggc run` and `yggc compile` warn
from a short sample taken at their start."""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
BUSY_CORES = 0.3  # other programs taking this many cores' worth of time on average make a timing suspect
# /proc/stat's first line: cpu user nice system idle iowait irq softirq steal ...; busy = all but idle and iowait
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)
SAMPLE_S = 0.2  # the start-up sample: 20 ticks of every core at Linux's 100 Hz
SPARE_CORES = 0.5  # the threads may share this much of a core with others before the warning


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
    """This process's CPU seconds, every thread's (as /proc/self/stat's utime + stime)."""
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


def busy_line(use: CpuUse | None, threads: int, cores: int) -> str | None:
    """The warning for `threads` torch threads when other programs took `use.other_cores` of `cores` (None: fine)."""
    if use is None or threads <= 1 or use.other_cores <= cores - threads + SPARE_CORES:
        return None
    return (f"other programs are taking {use.other_cores:.1f} of {cores} cores and torch runs {threads} threads; "
            "timings will be noisy or much slower")


def busy_warning(threads: int, sample_s: float = SAMPLE_S) -> str | None:
    """A warning when other programs, sampled for `sample_s` now, leave fewer free cores than the threads need (one
    thread is never warned about, so it is not sampled)."""
    if threads <= 1:
        return None
    watch = CpuWatch()
    time.sleep(sample_s)
    return busy_line(watch.stop(), threads, os.cpu_count() or 1)
