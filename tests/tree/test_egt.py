import pytest
import torch
from trees import _grow, _logps

from yggc.tree.egt import egt_frontier, egt_init, egt_reference, egt_root_step, egt_step, egt_tree

pytestmark = pytest.mark.usefixtures("tree_code")  # every test on the NumPy and on the torch tree code

CASES = [(1, 1, 5, None), (3, 2, 7, None), (4, 3, 10, None), (5, 4, 12, None), (6, 8, 16, None),
         (4, 3, 10, 12), (3, 2, 7, 7)]


@pytest.mark.parametrize("D,W,vocab,k", CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_tensor_egt_matches_python_reference(D, W, vocab, k, seed):
    logps = _logps(D, W, vocab, seed)
    state, _ = _grow(D, W, vocab, k, logps)
    tokens, parents, depth, cum = egt_reference(3, logps, W, k=k)
    tree = egt_tree(state)
    assert tree.n_nodes == 1 + D * W == len(tokens)
    assert tree.tokens.tolist() == tokens
    assert tree.parents.tolist() == parents
    assert tree.depth.tolist() == depth
    torch.testing.assert_close(tree.cum_logp, torch.tensor(cum, dtype=torch.float64))


def _root_logp(vocab: int, seed: int) -> torch.Tensor:
    return torch.log_softmax(torch.randn(vocab, generator=torch.Generator().manual_seed(seed)), -1)


@pytest.mark.parametrize("D,W,vocab,k", CASES)
def test_root_step_equals_a_step_on_the_repeated_root_row(D, W, vocab, k):
    root_logp = _root_logp(vocab, D * W)
    once = egt_root_step(egt_init(3, D, W, vocab, k), root_logp)
    repeated = egt_step(egt_init(3, D, W, vocab, k), root_logp.expand(W, -1))
    for field in ("tokens", "parents", "depth", "cum_logp", "anc", "pool_logp", "pool_parent", "pool_token", "newest",
                  "valid", "step"):
        assert torch.equal(getattr(once, field), getattr(repeated, field)), field


@pytest.mark.parametrize("D,W,vocab,k", CASES)
def test_root_step_with_tied_candidates_grows_the_same_nodes(D, W, vocab, k):
    """torch.topk orders tied values as it likes, so a tie may swap two nodes' ids; the nodes are the same."""
    root_logp = _root_logp(vocab, D * W)
    root_logp[1] = root_logp[2]
    once = egt_root_step(egt_init(3, D, W, vocab, k), root_logp)
    repeated = egt_step(egt_init(3, D, W, vocab, k), root_logp.expand(W, -1))
    nodes = lambda s: sorted(zip(s.cum_logp[1: W + 1].tolist(), s.tokens[1: W + 1].tolist()))  # noqa: E731
    assert nodes(once) == nodes(repeated)
    assert once.cum_logp[1: W + 1].tolist() == sorted(once.cum_logp[1: W + 1].tolist(), reverse=True)
    for field in ("parents", "depth", "anc", "pool_logp", "newest"):
        assert torch.equal(getattr(once, field), getattr(repeated, field)), field


@pytest.mark.parametrize("D,W,vocab,k", CASES)
def test_egt_tree_invariants(D, W, vocab, k):
    logps = _logps(D, W, vocab, 7)
    state, frontiers = _grow(D, W, vocab, k, logps)
    tree = egt_tree(state)
    par, tok, dep, cum = tree.parents.tolist(), tree.tokens.tolist(), tree.depth.tolist(), tree.cum_logp.tolist()
    row_of = {}  # node id -> (step, frontier row) at which it was expanded
    for s, fr in enumerate(frontiers):
        for r, (i, ok) in enumerate(zip(fr.ids.tolist(), fr.valid.tolist(), strict=True)):
            if ok:
                row_of[i] = (s, r)
    kk = min(W if k is None else k, vocab)
    for i in range(1, tree.n_nodes):
        p = par[i]
        assert 0 <= p < i, "parent exists and was created earlier"
        assert dep[i] == dep[p] + 1
        s, r = row_of[p]
        assert s <= (i - 1) // W, "a child appears no earlier than its parent is expanded"
        assert tok[i] in logps[s][r].topk(kk).indices.tolist(), "only the parent's top-k children are offered"
        assert cum[i] == pytest.approx(cum[p] + float(logps[s][r][tok[i]]), abs=1e-12)
    for p in range(tree.n_nodes):  # distinct tokens among siblings
        kids = [tok[i] for i in range(1, tree.n_nodes) if par[i] == p]
        assert len(kids) == len(set(kids))
    # the incrementally kept ancestor mask equals the one rebuilt from parents
    assert torch.equal(state.anc, tree.ancestor_mask())


def test_frontier_rows_step1_padding_and_later_steps():
    D, W, vocab = 3, 4, 9
    state = egt_init(11, D, W, vocab)
    fr = egt_frontier(state)
    assert fr.ids.tolist() == [0] * W and fr.tokens.tolist() == [11] * W and fr.depth.tolist() == [0] * W
    assert fr.valid.tolist() == [True, False, False, False]
    assert fr.mask.shape == (W, 1 + D * W) and fr.mask[:, 0].all() and fr.mask[:, 1:].sum() == 0
    for logp in _logps(D, W, vocab, 3):
        state = egt_step(state, logp.float())
        fr = egt_frontier(state)
        n = egt_tree(state).n_nodes
        assert fr.ids.tolist() == list(range(n - W, n)) and fr.valid.all()
        assert torch.equal(fr.mask, egt_tree(state).ancestor_mask()[fr.ids])
        assert torch.equal(fr.depth, state.depth[fr.ids]) and torch.equal(fr.tokens, state.tokens[fr.ids])


@pytest.mark.parametrize("D,W", [(3, 2), (4, 3), (5, 2)])
def test_with_k_vocab_each_step_takes_the_best_children_anywhere(D, W):
    vocab = 6
    logps = _logps(D, W, vocab, 11)
    state, frontiers = _grow(D, W, vocab, vocab, logps)
    tree = egt_tree(state)
    tok, par, cum = tree.tokens.tolist(), tree.parents.tolist(), tree.cum_logp.tolist()
    expanded: dict[int, torch.Tensor] = {}
    for s, fr in enumerate(frontiers):
        for r, (i, ok) in enumerate(zip(fr.ids.tolist(), fr.valid.tolist(), strict=True)):
            if ok:
                expanded[i] = logps[s][r]
        new = range(1 + s * W, 1 + (s + 1) * W)
        present = {(par[i], tok[i]) for i in range(1, 1 + (s + 1) * W)}
        left_out = [cum[u] + float(lp[t]) for u, lp in expanded.items() for t in range(vocab) if (u, t) not in present]
        assert min(cum[i] for i in new) >= max(left_out) - 1e-12
    # D*W children per node are always enough for the exact rule
    exact, _ = _grow(D, W, vocab, D * W, logps)
    assert torch.equal(egt_tree(exact).tokens, tree.tokens) and torch.equal(egt_tree(exact).parents, tree.parents)


def test_step_shapes_are_fixed_and_minus_inf_logp_is_a_real_candidate():
    D, W, vocab = 3, 2, 5
    state = egt_init(0, D, W, vocab)
    shapes = {k: tuple(v.shape) for k, v in vars(state).items() if isinstance(v, torch.Tensor)}
    logp = torch.full((W, vocab), float("-inf"))
    logp[:, 0] = 0.0  # the drafter is certain; the other tokens have probability 0
    for _ in range(D):
        state = egt_step(state, logp)
        assert {k: tuple(v.shape) for k, v in vars(state).items() if isinstance(v, torch.Tensor)} == shapes
    tree = egt_tree(state)
    assert tree.n_nodes == 1 + D * W
    assert torch.isfinite(tree.cum_logp).all()
    assert (tree.parents[1:] >= 0).all()


def test_egt_step_traces_without_graph_breaks():
    D, W, vocab = 2, 2, 8
    compiled = torch.compile(egt_step, backend="eager", fullgraph=True)
    logps = _logps(D, W, vocab, 5)
    a = b = egt_init(1, D, W, vocab, dtype=torch.float64)
    for logp in logps:
        a, b = egt_step(a, logp), compiled(b, logp)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.parents, b.parents)
