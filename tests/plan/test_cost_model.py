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
