"""tools/bench_sampling_paired.py's pure parts: the best tree under positional acceptance rates (against
enumerating every tree), greedy acceptance and rank rates on a hand-made tree, the ratio with its clustered
standard error, the oracle's choice of shape per position."""
from __future__ import annotations

import itertools
import math
import random
from types import SimpleNamespace

import pytest
import torch
from bench_sampling_paired import (
    add_rank_acceptance,
    best_tree_bound,
    clustered_ratio,
    greedy_acceptance,
    print_oracle,
)


def all_trees(n: int) -> list[tuple]:
    """Every ordered tree with n non-root nodes, as nested tuples of children (first draws first)."""
    if n == 0:
        return [()]
    out = []
    for first in range(1, n + 1):  # the first child's subtree takes `first` nodes, its later siblings the rest
        for sub in all_trees(first - 1):
            out += [(sub,) + rest for rest in all_trees(n - first)]
    return out


def tree_value(children: tuple, rates: dict, depth: int = 1) -> float:
    return sum(rates.get((depth, r), 0.0) * (1.0 + tree_value(c, rates, depth + 1)) for r, c in enumerate(children))


@pytest.mark.parametrize("seed", range(6))
def test_best_tree_bound_is_the_best_tree(seed):
    rng = random.Random(seed)
    rates = {(d, r): rng.random() ** 2 for d, r in itertools.product(range(1, 6), range(4))}  # any order of ranks
    rates[(2, 1)] = 0.0  # a rank nobody accepts still lets later ranks be drawn
    for budget in range(1, 6):
        brute = 1.0 + max(tree_value(t, rates) for n in range(budget + 1) for t in all_trees(n))
        assert best_tree_bound(rates, budget) == pytest.approx(brute, rel=1e-12)


def test_best_tree_bound_chain_and_star():
    assert best_tree_bound({(d, 0): 0.5 for d in range(1, 9)}, 3) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert best_tree_bound({(1, r): 0.2 for r in range(8)}, 5) == pytest.approx(2.0)
    assert best_tree_bound({}, 4) == 1.0


def test_clustered_ratio():
    texts = [([1.0, 2.0], [2.0, 4.0]), ([3.0], [6.0])]  # b = 2a everywhere: no spread
    assert clustered_ratio(texts) == (2.0, 0.0)
    r, se = clustered_ratio([([1.0], [1.0]), ([1.0], [3.0])])
    assert r == 2.0 and se == pytest.approx(math.sqrt((1 - 2) ** 2 + (3 - 2) ** 2) * math.sqrt(2) / 2)


def test_greedy_acceptance_and_rank_rates():
    # root 0 -> children 1 (token 5), 2 (token 7); 1 -> 3 (token 2); 2 -> 4 (token 9). The verifier's argmax
    # after the root is 7 and after node 2 is 9: the path 0-2-4 is accepted, node 1 and its child are not.
    sub = SimpleNamespace(tokens=torch.tensor([0, 5, 7, 2, 9]), parents=torch.tensor([-1, 0, 0, 1, 2]),
                          depth=torch.tensor([0, 1, 1, 2, 2]), cum_logp=torch.tensor([0.0, -0.5, -1.0, -2.0, -1.5]))
    logits = torch.full((5, 10), -1.0)
    logits[0, 7] = logits[2, 9] = logits[1, 2] = 1.0  # node 1's argmax is its child's token, but 1 is rejected
    accepted = greedy_acceptance(sub, logits)
    assert accepted == [1.0, 0.0, 1.0, 0.0, 1.0]
    ranks = {}
    add_rank_acceptance(ranks, sub, accepted, greedy=True)  # siblings 1, 2 rank by cum_logp: 1 first
    assert ranks == {(1, 0): (0.0, 1.0), (1, 1): (1.0, 1.0), (2, 0): (1.0, 1.0)}  # node 3 adds (0, 0)


def test_oracle_picks_each_positions_best_shape_and_beats_the_best_static_one():
    """Two shapes, each best at half the positions: the oracle takes each where it yields more per ms."""
    from yggc.plan.cost_model import CostCurve
    from yggc.plan.shape import TreeShape
    from yggc.plan.stages import StageCosts

    costs = StageCosts(CostCurve(10.0, 64.0, 0.0), CostCurve(1.0, 64.0, 0.0))  # verify 10 ms at any width
    runs = [("chain", TreeShape(1, 1, 1)), ("chain", TreeShape(4, 1, 4))]  # 11 and 14 ms an iteration
    prices = [[[2.0, 1.0], [1.0, 5.0]] * 2]  # one text, four positions: [D1 yield, D4 yield]
    out = print_oracle(0.0, runs, prices, costs)
    assert out["iteration_ms"] == [11.0, 14.0] and out["best_static"] == "D4W1V4"
    assert out["oracle"]["share"] == [0.5, 0.5]
    assert out["oracle"]["tokens_per_ms"] == pytest.approx((2 + 5) / (11 + 14), abs=1e-5)
    assert out["oracle"]["vs_best_static"] == pytest.approx(((2 + 5) / 25) / (3 / 14), abs=1e-4)
    assert out["oracle_verify_only"]["tokens_per_ms"] == pytest.approx((2 + 5) / 20, abs=1e-5)
