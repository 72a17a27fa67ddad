"""The roofline fit recovers known curves (pure function, no models)."""
import pytest

from yggc.plan.cost_model import CostCurve, fit_roofline


@pytest.mark.parametrize("curve", [CostCurve(2.0, 8.0, 0.25), CostCurve(1.0, 1.0, 0.5), CostCurve(3.0, 64.0, 0.0)])
def test_fit_recovers_roofline(curve):
    widths = [1, 2, 4, 8, 16, 32, 64]
    fit = fit_roofline({w: curve(w) for w in widths})
    for w in (1, 3, 12, 48, 100):
        assert fit(w) == pytest.approx(curve(w), abs=1e-9)


def test_fit_is_flat_for_one_point():
    fit = fit_roofline({4: 1.5})
    assert fit(1) == fit(64) == 1.5


def test_checked_plan_turns_speculation_off_when_the_measured_tree_loses():
    """SmolLM2 on an AVX2 EPYC: the calibrated D1 W2 V2 tree (1.39 tokens per iteration) priced at 1.01x by
    the fitted curves, but its compiled phases took 16.5 + 135.8 ms against a 50.7 ms verifier step."""
    from yggc.passes.choose_shape import checked_plan

    from yggc.plan.objective import measured_speedup

    plan = {"source": "calibration", "objective": {"tokens_per_iter": 1.3917, "speedup": 1.0125}}
    profile = {"phase_ms": {"draft": 16.48, "verify": 135.81}, "models": {"verifier": {"bucket_ms": {"1": 50.68}}}}
    steps = []
    slow = checked_plan(plan, profile, steps.append)
    assert not slow["speculate"] and slow["measured"]["speedup"] == round(1.3917 * 50.68 / (16.48 + 135.81), 4)
    assert steps and "without speculation" in steps[0]
    profile["phase_ms"]["verify"] = 40.0
    fast = checked_plan(plan, profile, steps.append)
    assert fast["speculate"] and len(steps) == 1
    assert measured_speedup(3.0, 10.0, 15.0) == 2.0
    assert plan == {"source": "calibration", "objective": {"tokens_per_iter": 1.3917, "speedup": 1.0125}}
