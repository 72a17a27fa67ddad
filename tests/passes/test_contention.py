"""Profiling on a busy machine: other programs' CPU time is measured, the profile is taken again, and a plan
still priced on a busy machine says so (in the profile, the compile's output and `yggc inspect`)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from yggc.passes import contention
from yggc.passes.choose_shape import estimate_off
from yggc.passes.contention import CpuUse, busy_seconds, measure_until_quiet

from yggc.cli.inspect import plan_warnings
from yggc.plan.bundle_plan import BundlePlan
from yggc.plan.shape import TreeShape


def test_busy_seconds_count_every_state_but_idle_and_iowait():
    tick = os.sysconf("SC_CLK_TCK")
    #        user nice system idle iowait irq softirq steal guest guest_nice
    text = f"cpu  {tick} {tick} {tick} 999999 777 {tick} {tick} {tick} 0 0\ncpu0 1 2 3 4\n"
    assert busy_seconds(text) == pytest.approx(6.0)


def test_other_cores_are_busy_time_less_this_process_over_wall_time():
    assert CpuUse(wall_s=2.0, own_s=3.0, busy_s=5.0).other_cores == pytest.approx(1.0)
    assert CpuUse(wall_s=2.0, own_s=3.0, busy_s=2.9).other_cores == 0.0  # tick rounding never goes negative
    assert CpuUse(2.0, 0.0, 0.6).busy and not CpuUse(2.0, 0.0, 0.5).busy  # 0.3 cores on average


@pytest.mark.skipif(not contention.PROC_STAT.is_file(), reason="needs Linux /proc/stat")
def test_a_busy_loop_beside_the_measurement_is_seen():
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # the loop is running
        watch = contention.CpuWatch()
        time.sleep(1.5)
        use = watch.stop()
    finally:
        loop.kill()
        loop.wait()
    assert use is not None and use.other_cores >= 0.6 and use.own_s < 0.2


class FakeWatch:
    """CpuWatch stand-in whose measurements report the queued other-core loads in turn."""

    def __init__(self, loads: list[float]):
        self.loads = loads

    def __call__(self):
        load = self.loads.pop(0)
        return type("W", (), {"stop": lambda _self: CpuUse(1.0, 0.0, load)})()


def test_a_disturbed_profile_is_taken_again_and_reuses_nothing():
    firsts, notes = [], []
    profile = measure_until_quiet(lambda first: firsts.append(first) or {"ms": len(firsts)}, notes.append,
                                  watch=FakeWatch([1.0, 0.05]))
    assert profile == {"ms": 2} and firsts == [True, False] and len(notes) == 1 and "measuring again" in notes[0]


def test_a_profile_disturbed_every_time_ships_with_its_record():
    notes = []
    profile = measure_until_quiet(lambda first: {"ms": 1}, notes.append, tries=3, watch=FakeWatch([1.0, 0.9, 1.2]))
    assert profile["contention"] == {"other_cores": 1.2, "tries": 3} and len(notes) == 2
    warnings = plan_warnings(profile, None)
    assert len(warnings) == 1 and "1.2 cores" in warnings[0] and "compile again" in warnings[0]


def test_an_estimate_the_decode_does_not_confirm_is_named():
    assert estimate_off(1.10, 1.00) is None and estimate_off(0.90, 1.00) is None
    line = estimate_off(2.15, 1.10)
    assert "2.15x" in line and "1.10x" in line and "15%" in line
    assert plan_warnings({}, BundlePlan(TreeShape(2, 2, 3), estimate_off=line)) == [line]
