import itertools
import math
import random

import pytest
import torch

from yggc.tree.egt import egt_init, egt_step, egt_tree
from yggc.tree.prune import best_verify_count, prune_dp, prune_topk
from yggc.tree.token_tree import TokenTree


def _random_parents(n: int, rng: random.Random) -> list[int]:
    return [-1] + [rng.randrange(i) for i in range(1, n)]


def _depths(parents: list[int]) -> list[int]:
    d = [0] * len(parents)
    for i in range(1, len(parents)):
        d[i] = d[parents[i]] + 1
    return d


def _brute_best(parents: list[int], values: list[float], V: int) -> float:
    best = -math.inf
    for subset in itertools.combinations(range(1, len(parents)), V):
        s = set(subset) | {0}
        if all(parents[i] in s for i in subset):
            best = max(best, sum(values[i] for i in subset))
    return best


def _check_shape(ids: list[int], parents: list[int], V: int) -> None:
    assert len(ids) == V + 1 and len(set(ids)) == V + 1
    assert ids[0] == 0, "root first"
    pos = {u: k for k, u in enumerate(ids)}
    for u in ids[1:]:
        assert parents[u] in pos, "connected: every kept node's parent is kept"
        assert pos[parents[u]] < pos[u], "topological: parents before children"


def _tree(parents: list[int], cum: list[float]) -> TokenTree:
    n = len(parents)
    t = TokenTree.from_root(0, n, dtype=torch.float64)
    t.parents[:] = torch.tensor(parents)
    t.depth[:] = torch.tensor(_depths(parents))
    t.cum_logp[:] = torch.tensor(cum, dtype=torch.float64)
    t.tokens[:] = torch.arange(n)
    t.n_nodes = n
    return t


@pytest.mark.parametrize("seed", range(12))
def test_dp_matches_brute_force_on_random_non_monotone_values(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 10)
    parents = _random_parents(n, rng)
    values = [rng.gauss(0.0, 1.0) for _ in range(n)]  # negative and non-monotone allowed
    for V in range(0, n):
        ids = prune_dp(torch.tensor(parents), torch.tensor(values), V).tolist()
        _check_shape(ids, parents, V)
        assert sum(values[i] for i in ids[1:]) == pytest.approx(_brute_best(parents, values, V), abs=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_topk_equals_dp_when_values_fall_along_paths(seed):
    rng = random.Random(100 + seed)
    n = rng.randint(2, 30)
    parents = _random_parents(n, rng)
    cum = [0.0] * n
    for i in range(1, n):
        cum[i] = cum[parents[i]] + math.log(rng.uniform(0.01, 1.0))
    tree = _tree(parents, cum)
    for V in range(0, n):
        top = prune_topk(tree, V).tolist()
        _check_shape(top, parents, V)
        dp = prune_dp(torch.tensor(parents), torch.tensor(cum, dtype=torch.float64).exp(), V).tolist()
        assert set(top) == set(dp)


def test_topk_ties_keep_the_parent():
    # node 1 has a child 2 with draft prob 1 (same cum_logp), and a competitor 3 below both
    parents = [-1, 0, 1, 0]
    cum = [0.0, -0.5, -0.5, -0.9]
    assert prune_topk(_tree(parents, cum), 1).tolist() == [0, 1]
    # rounding made a child look more likely than its parent: still ancestor-closed
    cum = [0.0, -0.5, -0.5 + 1e-7, -0.9]
    assert prune_topk(_tree(parents, cum), 1).tolist() == [0, 1]
    assert prune_topk(_tree(parents, cum), 2).tolist() == [0, 1, 2]


def test_errors_and_trivial_cases():
    tree = _tree([-1, 0, 0], [0.0, -1.0, -2.0])
    assert prune_topk(tree, 0).tolist() == [0]
    assert prune_dp(tree.parents, tree.cum_logp.exp(), 0).tolist() == [0]
    assert prune_topk(tree, 2).tolist() == [0, 1, 2]
    with pytest.raises(ValueError):
        prune_topk(tree, 3)
    with pytest.raises(ValueError):
        prune_dp(tree.parents, tree.cum_logp.exp(), 3)


def test_prune_an_egt_tree_and_reindex():
    D, W, vocab, V = 6, 8, 50, 20
    g = torch.Generator().manual_seed(0)
    state = egt_init(7, D, W, vocab)
    for _ in range(D):
        state = egt_step(state, torch.log_softmax(3 * torch.randn(W, vocab, generator=g), -1))
    tree = egt_tree(state)
    ids = prune_topk(tree, V)
    _check_shape(ids.tolist(), tree.parents.tolist(), V)
    dp = prune_dp(tree.parents, tree.cum_logp.double().exp(), V)
    assert set(ids.tolist()) == set(dp.tolist())
    sub = tree.subtree(ids)
    assert sub.n_nodes == V + 1 and (sub.parents[1:] < torch.arange(1, V + 1)).all()


@pytest.mark.parametrize("seed", range(20))
def test_best_verify_count_maximises_tokens_per_ms(seed):
    rng = random.Random(seed)
    values = sorted((rng.random() for _ in range(rng.randint(0, 12))), reverse=True)
    steps = [rng.uniform(0.1, 5.0) for _ in range(len(values) + 1)]  # a step curve like row tiles give
    cost = lambda r: 10.0 + sum(steps[:r + 1])  # noqa: E731
    rate = [(1 + sum(values[:r])) / cost(r) for r in range(len(values) + 1)]
    assert rate[best_verify_count(values, cost)] == max(rate)


def test_free_rows_verify_everything_and_dear_rows_nothing():
    values = [0.9, 0.5, 0.1]
    assert best_verify_count(values, lambda r: 20.0) == 3
    assert best_verify_count(values, lambda r: 20.0 * (1 + r)) == 0
    # once a row tile is paid for, the nodes that fill it come free
    assert best_verify_count([0.9, 0.05, 0.05], lambda r: 20.0 + (8.0 if r >= 1 else 0.0)) == 3
