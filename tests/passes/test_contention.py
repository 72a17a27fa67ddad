"""Profiling on a busy machine: other programs' CPU time is measured, the profile is taken again, and a plan
still priced on a busy machine says so (in the profile, the compile's output and `yggc inspect`)."""
from __future__ import annotations

from yggc.passes.choose_shape import estimate_off
from yggc.passes.contention import measure_until_quiet

from yggc.artifacts.cpu_use import CpuUse
from yggc.cli.inspect import plan_warnings
from yggc.plan.bundle_plan import BundlePlan
from yggc.plan.bundle_profile import Profile
from yggc.plan.shape import TreeShape


class FakeWatch:
    """CpuWatch stand-in whose measurements report the queued other-core loads in turn."""

    def __init__(self, loads: list[float]):
        self.loads = loads

    def __call__(self):
        load = self.loads.pop(0)
        return type("W", (), {"stop": lambda _self: CpuUse(1.0, 0.0, load)})()


def test_a_disturbed_profile_is_taken_again_and_reuses_nothing():
    firsts, logged = [], []
    profile = measure_until_quiet(lambda first: firsts.append(first) or Profile({"ms": len(firsts)}),
                                  logged.append, watch=FakeWatch([1.0, 0.05]))
    assert profile == Profile({"ms": 2}) and firsts == [True, False] and len(logged) == 1 and "measuring again" in logged[0]


def test_a_profile_disturbed_every_time_ships_with_its_record():
    logged = []
    profile = measure_until_quiet(lambda first: Profile({"ms": 1}), logged.append, tries=3,
                                  watch=FakeWatch([1.0, 0.9, 1.2]))
    assert profile.contention == {"other_cores": 1.2, "tries": 3} and len(logged) == 2
    warnings = plan_warnings(profile, None)
    assert len(warnings) == 1 and "1.2 cores" in warnings[0] and "compile again" in warnings[0]


def test_an_estimate_the_decode_does_not_confirm_is_named():
    assert estimate_off(1.10, 1.00) is None and estimate_off(0.90, 1.00) is None
    line = estimate_off(2.15, 1.10)
    assert "2.15x" in line and "1.10x" in line and "15%" in line
    assert plan_warnings(Profile(), BundlePlan(TreeShape(2, 2, 3), estimate_off=line)) == [line]
