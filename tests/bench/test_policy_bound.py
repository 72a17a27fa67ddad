"""tools/bench_policy_bound.py's pure parts: which nodes a smaller shape keeps of one wide tree, the
threshold policy's shape, realized and expected yields, and the bounds against brute force."""
from __future__ import annotations

import pytest
import torch
from bench_policy_bound import bounds, kept, threshold_shape, yields

from yggc.plan.cost_model import CostCurve
from yggc.plan.shape import TreeShape
from yggc.plan.stages import StageCosts

# A W = 2 tree of 3 drafter steps: ids 1-2 from step 1, 3-4 from step 2, 5-6 from step 3. Path 1 -> 3 -> 5
# is the drafter's favourite; the verifier accepts 1 and 3.
POSITION = {"text": 0, "p": [1.0, 0.9, 0.05, 0.6, 0.04, 0.3, 0.03],
            "accepted": [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0], "rank": [1, 3, 5, 2, 4, 6]}
WIDE = TreeShape(3, 2, 6)


def test_kept_truncates_by_drafter_steps_then_takes_rank_order():
    assert kept(POSITION, 1, 2, 2) == [1, 2]
    assert kept(POSITION, 2, 2, 3) == [1, 3, 2]
    assert kept(POSITION, 3, 2, 6) == [1, 3, 5, 2, 4, 6]


def test_threshold_policy_stops_drafting_below_expand_and_verifies_above_verify():
    assert threshold_shape(POSITION, 0.5, 0.5, WIDE) == TreeShape(3, 2, 2)  # step 2's best is 0.6: draft step 3
    assert threshold_shape(POSITION, 0.7, 0.5, WIDE) == TreeShape(2, 2, 2)  # 0.6 < 0.7: stop after step 2
    assert threshold_shape(POSITION, 0.95, 0.95, WIDE) == TreeShape(1, 2, 1)  # nothing clears it: one node


def test_yields_count_accepted_nodes_and_drafter_probabilities_plus_the_bonus_token():
    real, expect = yields([POSITION], [TreeShape(1, 2, 1), TreeShape(2, 2, 2), TreeShape(3, 2, 6)])
    assert real.tolist() == [[2.0, 3.0, 3.0]]
    assert expect[0].tolist() == pytest.approx([1.9, 2.5, 1 + 0.9 + 0.05 + 0.6 + 0.04 + 0.3 + 0.03])


def test_bounds_best_static_is_brute_force_and_the_oracle_is_above_every_policy():
    # verify cost flat, each drafter step 1 ms: deep trees pay only where the drafter's chain is accepted
    costs = StageCosts(CostCurve(10.0, 64.0, 0.0), CostCurve(1.0, 64.0, 0.0))
    miss = {**POSITION, "text": 1, "accepted": [1.0] + [0.0] * 6}
    positions = [POSITION, miss] * 3
    out = bounds(positions, costs, WIDE)
    shapes = [TreeShape(d, 2, v) for d in range(1, 4) for v in range(1, 2 * d + 1)]
    real, _ = yields(positions, shapes)
    per_ms = real.mean(0) / torch.tensor([costs.iteration_ms(s) for s in shapes], dtype=torch.float64)
    assert out["best_static"]["tokens_per_ms"] == pytest.approx(float(per_ms.max()), abs=1e-5)
    # the oracle: D2 V2 (3 tokens, 12 ms) where the chain is accepted, D1 V1 (1 token, 11 ms) where not
    assert out["oracle"] == pytest.approx((3 + 1) / (12 + 11) / float(per_ms.max()), abs=1e-3)
    assert out["oracle"] >= out["expected_value"]["vs_static"] and out["positions"] == 6
