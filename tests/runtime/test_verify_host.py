"""The greedy verify phase's NumPy tree work (tree/verify_host.py, eager CPU) gives what its torch code gives."""
import pytest
import torch
from trees import _grow, _logps

from yggc.runtime.verify_phase import GreedyVerifyPhase
from yggc.tree import host
from yggc.tree.egt import egt_tree

VOCAB = 12


class AgreeingVerifier:
    """Picks, after each tree row, one of its node's children's tokens with probability `agree` (else another
    token), so acceptance walks part of the tree; records its K/V moves."""

    def __init__(self, tree, agree: float, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.best = {}  # node's token path -> the token the verifier picks after it
        paths = {0: (int(tree.tokens[0]),)}
        for i in range(1, tree.n_nodes):
            paths[i] = paths[int(tree.parents[i])] + (int(tree.tokens[i]),)
        for i, path in paths.items():
            kids = [int(tree.tokens[c]) for c in tree.children(i)]
            pick = torch.rand((), generator=g) < agree and kids
            self.best[path] = kids[int(torch.randint(len(kids), (), generator=g))] if pick else VOCAB - 1
        self.moves = []

    def __call__(self, tokens, positions, slots, mask):
        n = int(slots[0])
        logits = torch.randn(tokens.shape[0], VOCAB, generator=torch.Generator().manual_seed(int(tokens.sum())))
        for r in range(tokens.shape[0]):
            rows = torch.nonzero(mask[r, n:n + tokens.shape[0]]).flatten().tolist()  # its ancestors' rows
            logits[r, self.best[tuple(int(tokens[a]) for a in rows)]] = 100.0
        return logits

    def move_kv(self, src, dst):
        self.moves.append((src.tolist(), dst.tolist()))


@pytest.mark.parametrize("D,W,V", [(1, 1, 1), (3, 2, 6), (4, 3, 5), (2, 4, 8), (5, 2, 10), (3, 3, 2)])
@pytest.mark.parametrize("seed", range(4))
def test_host_verify_equals_torch_verify(monkeypatch, D, W, V, seed):
    logps = _logps(D, W, VOCAB - 1, seed)  # the last token is never drafted: the verifier's "no" answer
    state, _ = _grow(D, W, VOCAB - 1, None, logps)
    tree = egt_tree(state)
    inputs = (tree.tokens, tree.parents, tree.depth, tree.cum_logp.float(), state.anc, torch.tensor(20),
              torch.arange(48))
    results = {}
    for code in ("numpy", "torch"):
        verifier = AgreeingVerifier(tree, agree=0.8, seed=seed)
        with monkeypatch.context() as m:
            if code == "torch":
                m.setattr(host, "eager_cpu", lambda t: False)
            out = GreedyVerifyPhase(verifier, D, V)(*inputs)
        results[code] = (out, verifier.moves)
    (got, got_moves), (want, want_moves) = results["numpy"], results["torch"]
    k = int(want[1][0])
    for a, b in zip(got[:3] + got[4:], want[:3] + want[4:], strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
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
