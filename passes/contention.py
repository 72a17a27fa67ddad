"""Other programs' use of the CPU while the compile measures: the profile is taken again while they take CPU time
(yggc/artifacts/cpu_use.py measures it), and a plan still priced on a busy machine says so. Timings taken beside
other programs are wrong in ways that do not cancel: a step profiled several times slower than on a quiet machine
prices a tree that then decodes far below its estimate.
"""
from __future__ import annotations

from collections.abc import Callable

from ..artifacts.cpu_use import CpuUse, CpuWatch
from ..plan.bundle_profile import Profile

TRIES = 3  # measurements taken while other programs keep taking CPU time, before the result ships with a warning


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


def measure_until_quiet(measure: Callable[[bool], Profile], log: Callable[[str], None], tries: int = TRIES,
                        watch: Callable[[], CpuWatch] | None = None) -> Profile:
    """measure(first) -> a profile, taken again while other programs took CPU time meanwhile (first=False:
    measure everything anew, reusing nothing timed before), at most `tries` times; a profile still disturbed
    keeps its contention_record (Profile.contention)."""
    watch = watch or CpuWatch
    for n in range(1, tries + 1):
        w = watch()
        profile = measure(n == 1)
        contended = contention_record(w.stop(), n)
        if contended is None:
            return profile
        if n < tries:
            log(f"other programs took {contended['other_cores']:.1f} cores while profiling: measuring again")
    return profile.with_contention(contended)
