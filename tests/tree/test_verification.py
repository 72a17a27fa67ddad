import functools

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from yggc.tree.verification import verify_greedy, verify_tree_sampling

VOCAB = 6
N = 12000  # samples per goodness-of-fit test: 5% of the mass misplaced gives chi2 > 100 >> threshold
ALPHA = 1e-3


def _pvalue(samples: list[int], probs: np.ndarray) -> float:
    counts = np.bincount(samples, minlength=probs.size).astype(float)
    support = probs > 0
    assert counts[~support].sum() == 0, "sampled a token of probability 0"
    expected = probs[support] * len(samples)
    assert expected.min() >= 5
    return chisquare(counts[support], expected * counts.sum() / expected.sum()).pvalue


def _dist(rng: np.random.Generator, size: int, scale: float = 1.0) -> np.ndarray:
    z = np.exp(scale * rng.standard_normal(size))
    return z / z.sum()


# ---------------------------------------------------------------- greedy

def _onehot_logits(argmax: list[int]) -> torch.Tensor:
    logits = torch.randn(len(argmax), 10, generator=torch.Generator().manual_seed(0))
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 50.0
    return logits


# root(9) -> 1:tok3 -> 3:tok7 -> 4:tok1 ; root -> 2:tok5 -> 5:tok2
TOKENS = torch.tensor([9, 3, 5, 7, 1, 2])
PARENTS = torch.tensor([-1, 0, 0, 1, 3, 2])


def test_greedy_full_acceptance_with_bonus():
    logits = _onehot_logits([3, 7, 0, 1, 8, 0])
    assert verify_greedy(TOKENS, PARENTS, logits) == ([1, 3, 4], 8)


def test_greedy_no_acceptance():
    logits = _onehot_logits([4, 7, 2, 1, 8, 0])
    assert verify_greedy(TOKENS, PARENTS, logits) == ([], 4)


def test_greedy_partial_acceptance_on_second_branch():
    logits = _onehot_logits([5, 7, 6, 1, 8, 0])  # root -> 5 (node 2), node 2 wants 6 but only 2 was drafted
    assert verify_greedy(TOKENS, PARENTS, logits) == ([2], 6)


@pytest.mark.parametrize("seed", range(5))
def test_greedy_emits_the_verifier_argmax_chain(seed):
    g = torch.Generator().manual_seed(seed)
    n = 12
    parents = torch.tensor([-1] + [int(torch.randint(i, (1,), generator=g)) for i in range(1, n)])
    tokens = torch.randint(3, (n,), generator=g)  # tiny vocab: many matches
    logits = torch.randn(n, 3, generator=g)
    path, bonus = verify_greedy(tokens, parents, logits)
    prev = 0
    for node in path:
        assert int(parents[node]) == prev and int(tokens[node]) == int(logits[prev].argmax())
        prev = node
    assert bonus == int(logits[prev].argmax())
    kids = (parents == prev).nonzero().flatten()
    assert bonus not in tokens[kids].tolist(), "stopped only where no child matches"


def test_sampling_with_one_hot_targets_is_greedy():
    probs = torch.softmax(_onehot_logits([3, 7, 0, 1, 8, 0]), -1).double()
    probs = (probs > 0.5).double()
    g = torch.Generator().manual_seed(0)
    assert verify_tree_sampling(TOKENS, PARENTS, probs, g) == ([1, 3, 4], 8)


# ---------------------------------------------------------------- sampling (point-mass rule)

# (parents, tokens): several children at the root, some deeper nodes, one repeated sibling token
TREES = [
    ([-1, 0, 0, 0], [0, 1, 4, 2]),
    ([-1, 0, 0, 0, 0, 0, 1, 1, 2], [0, 5, 0, 3, 1, 2, 1, 4, 4]),
    ([-1, 0, 0, 1, 1, 3], [0, 2, 2, 0, 5, 3]),
    ([-1, 0, 0, 0, 0, 0, 0], [0, 0, 1, 2, 3, 4, 5]),  # every token drafted: residual is empty unless all rejected
]


class TinyLM:
    """p(. | last emitted prefix) for prefixes of length <= 2, as fixed random tables."""

    def __init__(self, seed: int):
        rng = np.random.default_rng(seed)
        self.p1 = _dist(rng, VOCAB)
        self.p2 = np.stack([_dist(rng, VOCAB) for _ in range(VOCAB)])  # [x1, x2]
        self.p3 = _dist(rng, VOCAB)  # used beyond depth 2 (irrelevant to two-token laws)

    def row(self, prefix: list[int]) -> np.ndarray:
        if not prefix:
            return self.p1
        return self.p2[prefix[0]] if len(prefix) == 1 else self.p3


def _tree_target(parents, tokens, lm: TinyLM) -> torch.Tensor:
    rows = []
    for i in range(len(parents)):
        path, j = [], i
        while j > 0:
            path.append(tokens[j])
            j = parents[j]
        rows.append(lm.row(path[::-1]))
    return torch.tensor(np.stack(rows))


def _emitter(parents, tokens, probs, scores, g):
    tok_t, par_t = torch.tensor(tokens), torch.tensor(parents)

    def emit() -> list[int]:
        path, nxt = verify_tree_sampling(tok_t, par_t, probs, g, scores)
        return [tokens[i] for i in path] + [nxt]
    return emit


@functools.cache
def _first_tokens(tree: int) -> tuple[int, ...]:
    parents, tokens = TREES[tree]
    lm = TinyLM(tree)
    probs = _tree_target(parents, tokens, lm)
    scores = torch.tensor(np.random.default_rng(tree).standard_normal(len(parents)))
    emit = _emitter(parents, tokens, probs, scores, torch.Generator().manual_seed(tree))
    return tuple(emit()[0] for _ in range(N))


@pytest.mark.parametrize("tree", range(len(TREES)))
def test_tree_sampling_first_token_follows_target(tree):
    assert _pvalue(list(_first_tokens(tree)), TinyLM(tree).p1) > ALPHA


@pytest.mark.parametrize("tree", [1, 2])
def test_tree_sampling_first_two_tokens_follow_target(tree):
    parents, tokens = TREES[tree]
    lm = TinyLM(10 + tree)
    probs = _tree_target(parents, tokens, lm)
    g = torch.Generator().manual_seed(tree)
    rng = np.random.default_rng(tree)
    cdf2 = np.cumsum(lm.p2, axis=1)
    emit = _emitter(parents, tokens, probs, None, g)
    pairs = []
    for _ in range(N):
        out = emit()
        if len(out) == 1:  # the next iteration would sample the second token from the verifier
            out.append(min(int(np.searchsorted(cdf2[out[0]], rng.random() * cdf2[out[0], -1], "right")), VOCAB - 1))
        pairs.append(out[0] * VOCAB + out[1])
    assert _pvalue(pairs, (lm.p1[:, None] * lm.p2).ravel()) > ALPHA


def test_goodness_of_fit_has_power_against_a_5_percent_bias():
    rng = np.random.default_rng(0)
    p1 = TinyLM(1).p1
    worst = int(np.argmin(p1))
    biased = [worst if rng.random() < 0.05 else x for x in _first_tokens(1)]  # 5% of outputs misplaced
    assert _pvalue(list(_first_tokens(1)), p1) > ALPHA
    assert _pvalue(biased, p1) < 1e-6


def test_naive_rule_without_renormalisation_is_caught():
    # a plausible bug: accepting each child with its raw p(x) (no renormalisation after rejections)
    parents, tokens = TREES[3]
    lm = TinyLM(3)
    p = lm.p1
    rng = np.random.default_rng(0)
    out = []
    for _ in range(N):
        for x in tokens[1:]:
            if rng.random() < p[x]:
                out.append(x)
                break
        else:
            out.append(int(rng.choice(VOCAB, p=p)))
    assert _pvalue(out, p) < 1e-6
