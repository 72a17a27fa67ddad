"""The greedy verify phase's eager CPU tree work, in Python (tree/verify_host.py) and in the kernel library's tree
ops (kernels/verify_tree.cpp), gives what its torch code gives."""
import pytest
import torch
from trees import _grow, _logps
from yggc.passes.kernels import kernel_library

from yggc.artifacts import kernel_ops
from yggc.runtime.verify_phase import GreedyVerifyPhase
from yggc.tree import host, verify_host
from yggc.tree.egt import egt_tree
from yggc.tree.prune import prune_topk
from yggc.tree.token_tree import TokenTree

VOCAB = 12


class AgreeingVerifier:
    """Picks, after each tree row, one of its node's children's tokens with probability `agree` (else another
    token), so acceptance walks part of the tree; records its K/V moves."""

    def __init__(self, tree, agree: float, seed: int, dtype: torch.dtype = torch.float32):
        g = torch.Generator().manual_seed(seed)
        self.best = {}  # node's token path -> the token the verifier picks after it
        paths = {0: (int(tree.tokens[0]),)}
        for i in range(1, tree.n_nodes):
            paths[i] = paths[int(tree.parents[i])] + (int(tree.tokens[i]),)
        for i, path in paths.items():
            kids = [int(tree.tokens[c]) for c in tree.children(i)]
            pick = torch.rand((), generator=g) < agree and kids
            self.best[path] = kids[int(torch.randint(len(kids), (), generator=g))] if pick else VOCAB - 1
        self.moves, self.dtype = [], dtype

    def __call__(self, tokens, positions, slots, mask):
        n = int(slots[0])
        logits = torch.randn(tokens.shape[0], VOCAB, generator=torch.Generator().manual_seed(int(tokens.sum())))
        for r in range(tokens.shape[0]):
            rows = torch.nonzero(mask[r, n:n + tokens.shape[0]]).flatten().tolist()  # its ancestors' rows
            logits[r, self.best[tuple(int(tokens[a]) for a in rows)]] = 100.0
        return logits.to(self.dtype)

    def move_kv(self, src, dst):
        self.moves.append((src.tolist(), dst.tolist()))


class RowFeaturesPhase(GreedyVerifyPhase):
    """Hands over a per-row tensor as an EAGLE-3 verify phase hands over the verifier's features."""

    def score(self, tokens, positions, slots, mask):
        return self.verifier(tokens, positions, slots, mask), (torch.stack([positions, slots], 1).float(),)


def verify_three_ways(monkeypatch, tree, anc, D: int, V: int, seed: int, logits_dtype=torch.float32) -> dict:
    """code -> (the phase's outputs, the verifier's K/V moves) for the Python, the ops' and the torch tree work."""
    kernel_library.build()  # the process has the tree ops
    inputs = (tree.tokens, tree.parents, tree.depth, tree.cum_logp.float(), anc, torch.tensor(20), torch.arange(48))
    results = {}
    for code in ("python", "ops", "torch"):
        verifier = AgreeingVerifier(tree, agree=0.8, seed=seed, dtype=logits_dtype)
        with monkeypatch.context() as m:
            if code == "torch":
                m.setattr(host, "eager_cpu", lambda t: False)
            if code == "python":
                m.setattr(kernel_ops, "has_tree_ops", lambda: False)
            out = RowFeaturesPhase(verifier, D, V)(*inputs)
        results[code] = (out, verifier.moves)
    return results


@pytest.mark.parametrize("D,W,V", [(1, 1, 1), (3, 2, 6), (4, 3, 5), (2, 4, 8), (5, 2, 10), (3, 3, 2)])
@pytest.mark.parametrize("seed", range(4))
def test_host_verify_equals_torch_verify(monkeypatch, D, W, V, seed):
    logps = _logps(D, W, VOCAB - 1, seed)  # the last token is never drafted: the verifier's "no" answer
    state, _ = _grow(D, W, VOCAB - 1, None, logps)
    results = verify_three_ways(monkeypatch, egt_tree(state), state.anc, D, V, seed,
                                (torch.float32, torch.bfloat16)[seed % 2])
    want, want_moves = results["torch"]
    k = int(want[1][0])
    for code in ("python", "ops"):
        got, got_moves = results[code]
        for a, b in zip(got[:3] + got[4:], want[:3] + want[4:], strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b), code
        # the K/V moves (the verifier's, then the drafter's): the accepted rows' alike, the rest no-ops
        (src, dst), (want_src, want_dst) = got_moves[0], want_moves[0]
        assert dst == want_dst and src[:k] == want_src[:k] and src[k:] == dst[k:]
        drafter_moves, want_drafter = got[3].tolist(), want[3].tolist()
        assert drafter_moves[1] == want_drafter[1] and drafter_moves[0][:k] == want_drafter[0][:k]
        assert drafter_moves[0][k:] == drafter_moves[1][k:]


def test_agreeing_verifier_accepts_deep_paths():
    """The fixture's verifier makes the comparison above walk real paths, not just the root."""
    depths = []
    for seed in range(8):
        state, _ = _grow(4, 2, VOCAB - 1, None, _logps(4, 2, VOCAB - 1, seed))
        tree = egt_tree(state)
        out = GreedyVerifyPhase(AgreeingVerifier(tree, 0.8, seed), 4, 8)(
            tree.tokens, tree.parents, tree.depth, tree.cum_logp.float(), state.anc, torch.tensor(20), torch.arange(48))
        depths.append(int(out[1][0]))
    assert max(depths) >= 3 and min(depths) < max(depths)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tree_ops_argmax_takes_the_first_maximum_and_nan(dtype):
    """The accept op's argmax is torch.argmax's: the first of tied maxima, the first NaN over any number, at any
    place in a row (in and past the vector part)."""
    kernel_library.build()
    vocab = 100
    logits = torch.randn(5, vocab, generator=torch.Generator().manual_seed(0)).to(dtype)
    logits[0, [3, 70]] = 9.0  # tied: the first
    logits[1, [5, 98]] = float("nan")  # NaN wins, the first
    logits[1, 6] = float("inf")
    logits[2, 99] = 50.0  # in the scalar tail
    logits[3] = float("-inf")  # all equal: index 0
    chain = torch.arange(5)  # a chain 0 <- 1 <- 2 <- 3 <- 4 whose tokens each row's argmax accepts
    best = logits.float().argmax(-1)
    tokens = torch.cat([torch.tensor([7]), best[:-1]])
    rows = torch.stack([chain, chain - 1, chain])
    anc = torch.ones(5, 5, dtype=torch.bool).tril()
    emit, info, *_ = kernel_ops.verify_tree_accept(logits, tokens, rows, anc, 0, 4, None)
    assert info.tolist() == [4, 4, 4] and emit.tolist() == best.tolist()  # the whole chain, then the bonus
    assert best[:4].tolist() == [3, 5, 99, 0]


@pytest.mark.parametrize("n,view", [(3, 10), (3, 5), (0, 4)])
def test_tree_ops_prune_ties_as_python(n, view):
    """Tied cum_logp: the shallower node first, then the lower id; the mask cut where the view ends."""
    kernel_library.build()
    parents = torch.tensor([-1, 0, 0, 0, 1, 2, 4])
    depth = torch.tensor([0, 1, 1, 1, 2, 2, 3])
    cum_logp = torch.tensor([0.0, -1.0, -1.0, -2.0, -1.0, -1.5, -1.0])
    anc = torch.zeros(7, 7, dtype=torch.bool)
    for i in range(7):
        j = i
        while j >= 0:
            anc[i, j], j = True, int(parents[j])
    tokens = torch.arange(10, 17)
    sub_tokens, positions, slots, mask, rows, sub_anc = kernel_ops.verify_tree_inputs(
        tokens, parents, depth, cum_logp, anc, n, view, 4)
    kept, sub_par, sub_depth, want_anc = verify_host.prune_top(parents.tolist(), depth.tolist(), cum_logp.tolist(),
                                                               anc.numpy(), 4)
    assert kept == [0, 1, 2, 4, 6] and rows.tolist() == [kept, sub_par, sub_depth]
    assert torch.equal(sub_anc, torch.from_numpy(want_anc)) and sub_tokens.tolist() == [10, 11, 12, 14, 16]
    assert positions.tolist() == [n + d for d in sub_depth] and slots.tolist() == list(range(n, n + 5))
    assert torch.equal(mask, torch.from_numpy(host.tree_mask(n, want_anc, view)))


def test_tree_ops_keep_a_parent_its_child_outprices():
    """A suffix branch's node may be priced above the model node it hangs from: pruning ranks by the least cum_logp
    along the path (prune.rank_nodes), so a kept node's parent is kept (prune_topk's ids)."""
    kernel_library.build()
    parents = torch.tensor([-1, 0, 0, 1, 3, 2])
    depth = torch.tensor([0, 1, 1, 2, 3, 2])
    cum_logp = torch.tensor([0.0, -2.0, -0.5, -0.1, -0.2, -3.0])  # 3 and 4 (a suffix branch under 1) outprice 1
    tree = TokenTree(torch.arange(6), parents, depth, cum_logp, 6)
    anc = tree.ancestor_mask()
    for V in range(1, 6):
        *_, rows, _ = kernel_ops.verify_tree_inputs(tree.tokens, parents, depth, cum_logp, anc, 4, 16, V)
        assert rows[0].tolist() == prune_topk(tree, V).tolist(), V
