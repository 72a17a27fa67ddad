import random

import pytest
import torch

from yggc.tree import host
from yggc.tree.token_tree import TokenTree


def _tree(parents: list[int], capacity: int | None = None) -> TokenTree:
    n = len(parents)
    t = TokenTree.from_root(99, capacity or n)
    t.parents[:n] = torch.tensor(parents)
    t.tokens[1:n] = torch.arange(1, n)
    for i in range(1, n):  # parents may come after children in id order, so walk up explicitly
        j, d = i, 0
        while j > 0:
            j, d = parents[j], d + 1
        t.depth[i] = d
    t.n_nodes = n
    return t


def _ancestors_brute(parents: list[int], i: int) -> set[int]:
    out = {i}
    while parents[i] >= 0:
        i = parents[i]
        out.add(i)
    return out


# 0 -> 1 -> 3 -> 4, 0 -> 2 -> 5
HAND = [-1, 0, 0, 1, 3, 2]


def test_hand_tree_queries():
    t = _tree(HAND, capacity=8)
    assert t.path_to(4) == [1, 3, 4]
    assert t.path_to(5) == [2, 5]
    assert t.path_to(0) == []
    assert t.children(0) == [1, 2]
    assert t.children(4) == []
    assert t.leaves() == [4, 5]
    assert t.positions(10)[:6].tolist() == [10, 11, 11, 12, 13, 12]


def test_ancestor_mask_hand_tree_and_unused_slots():
    t = _tree(HAND, capacity=8)
    m = t.ancestor_mask()
    assert m.shape == (8, 8) and m.dtype == torch.bool
    assert torch.nonzero(m[4]).flatten().tolist() == [0, 1, 3, 4]
    assert torch.nonzero(m[5]).flatten().tolist() == [0, 2, 5]
    assert torch.nonzero(m[6]).flatten().tolist() == [6]  # unused slot sees only itself


@pytest.mark.parametrize("n", [1, 2, 7, 33, 70])
def test_ancestor_mask_matches_brute_force_on_random_trees(n):
    rng = random.Random(n)
    # a random tree with shuffled ids, so parents are not always smaller than children
    perm = list(range(1, n))
    rng.shuffle(perm)
    ids = [0] + perm
    parents = [-1] * n
    for pos in range(1, n):
        parents[ids[pos]] = ids[rng.randrange(pos)]
    m = _tree(parents).ancestor_mask()
    for i in range(n):
        assert set(torch.nonzero(m[i]).flatten().tolist()) == _ancestors_brute(parents, i)


@pytest.mark.parametrize("n", [1, 2, 7, 33, 70])
def test_host_ancestor_rows_equal_the_mask_when_parents_come_first(n):
    rng = random.Random(n)
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]  # each node's parent has a smaller id
    assert torch.equal(torch.from_numpy(host.ancestor_rows(parents)), _tree(parents).ancestor_mask())


def test_root_only_tree():
    t = TokenTree.from_root(5, 4)
    assert t.n_nodes == 1 and t.leaves() == [0] and t.children(0) == []
    assert t.tokens[0] == 5 and t.parents[0] == -1 and t.cum_logp[0] == 0.0


def test_subtree_reindexes_parents():
    t = _tree(HAND)
    sub = t.subtree(torch.tensor([0, 2, 1, 5]))
    assert sub.n_nodes == 4
    assert sub.parents.tolist() == [-1, 0, 0, 1]
    assert sub.tokens.tolist() == [99, 2, 1, 5]
    assert sub.depth.tolist() == [0, 1, 1, 2]
    with pytest.raises(ValueError):
        t.subtree(torch.tensor([0, 4]))  # 4's parent 3 is missing


@pytest.mark.parametrize("n,view", [(0, 8), (5, 16), (9, 12), (12, 12), (3, 40)])
def test_tree_mask_numpy_equals_torch(monkeypatch, n, view):
    """Eager CPU masks come from host.tree_mask's slices; the torch formula (compiled phases) gives the same,
    also where the view cuts the tree off."""
    from yggc.tree import host
    from yggc.tree.token_tree import tree_mask

    anc = torch.rand(6, 9, generator=torch.Generator().manual_seed(n + view)) < 0.4
    got = tree_mask(torch.tensor(n), anc, view)
    monkeypatch.setattr(host, "eager_cpu", lambda t: False)
    want = tree_mask(torch.tensor(n), anc, view)
    assert got.dtype == want.dtype == torch.bool and torch.equal(got, want)
