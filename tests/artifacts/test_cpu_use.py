"""yggc/artifacts/cpu_use.py: other programs' CPU time is every core's busy time less this process's own, and the
start-up warning judges "busy" by that, sampled now, not by a trailing load average that counts this process and
a compile that just ended."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from yggc.artifacts import cpu_use
from yggc.artifacts.cpu_use import CpuUse, busy_line, busy_seconds

LINUX = pytest.mark.skipif(not cpu_use.PROC_STAT.is_file(), reason="needs Linux /proc/stat")


def test_busy_seconds_count_every_state_but_idle_and_iowait():
    tick = os.sysconf("SC_CLK_TCK")
    #        user nice system idle iowait irq softirq steal guest guest_nice
    text = f"cpu  {tick} {tick} {tick} 999999 777 {tick} {tick} {tick} 0 0\ncpu0 1 2 3 4\n"
    assert busy_seconds(text) == pytest.approx(6.0)


def test_other_cores_are_busy_time_less_this_process_over_wall_time():
    assert CpuUse(wall_s=2.0, own_s=3.0, busy_s=5.0).other_cores == pytest.approx(1.0)
    assert CpuUse(wall_s=2.0, own_s=3.0, busy_s=2.9).other_cores == 0.0  # tick rounding never goes negative
    assert CpuUse(2.0, 0.0, 0.6).busy and not CpuUse(2.0, 0.0, 0.5).busy  # 0.3 cores on average


def use_beside(start, seconds: float) -> CpuUse | None:
    """The CpuUse over `seconds` while what start() started runs (start returns the function that stops it)."""
    stop = start()
    try:
        watch = cpu_use.CpuWatch()
        time.sleep(seconds)
        return watch.stop()
    finally:
        stop()


def busy_process():
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.3)  # the loop is running
    return lambda: (loop.kill(), loop.wait())


def spinning_thread():
    done = threading.Event()
    spin = threading.Thread(target=lambda: any(iter(done.is_set, True)))  # calls is_set until it is True
    spin.start()
    return lambda: (done.set(), spin.join())


@LINUX
def test_a_busy_loop_beside_the_measurement_is_seen():
    use = use_beside(busy_process, 1.5)
    assert use is not None and use.other_cores >= 0.6 and use.own_s < 0.2


def test_the_warning_counts_other_programs_only():
    """2 threads on 2 cores: this process's own 1.8 cores (the old load-average false alarm) is quiet; another
    program's core is busy, and the line names what it saw and how many threads run."""
    assert busy_line(CpuUse(wall_s=0.25, own_s=0.45, busy_s=0.46), threads=2, cores=2) is None
    assert busy_line(CpuUse(0.25, 0.0, 0.1), 2, 2) is None  # 0.4 cores: within SPARE_CORES
    line = busy_line(CpuUse(0.25, 0.1, 0.35), 2, 2)
    assert line == ("other programs are taking 1.0 of 2 cores and torch runs 2 threads; timings will be noisy or "
                    "much slower")
    assert busy_line(CpuUse(0.25, 0.0, 0.5), 2, 4) is None  # 2 cores taken, 2 left for the 2 threads
    assert busy_line(CpuUse(0.25, 0.0, 0.5), 1, 2) is None and busy_line(None, 2, 2) is None


@LINUX
def test_this_process_busy_during_the_sample_is_not_counted(monkeypatch):
    """A thread of this process spinning through the sample (as a compile's threads would) lands in own_s, which
    other_cores leaves out; busy_warning judges a sample of the length it is given."""
    use = use_beside(spinning_thread, 0.5)
    assert use is not None and use.own_s >= 0.1 and use.busy_s >= use.own_s - 0.05
    seen = []
    monkeypatch.setattr(cpu_use, "busy_line", lambda use, threads, cores: seen.append((use, threads)))
    cpu_use.busy_warning(2, sample_s=0.05)
    assert seen and seen[0][1] == 2 and seen[0][0].wall_s >= 0.05
