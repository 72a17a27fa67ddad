"""Sampled EGT growth + recursive rejection sampling: the emitted tokens follow the verifier's own
sampling law (chi-square on the joint of the first two and three tokens), for chains, wide and pruned
trees, with top-k and top-p; seeded runs repeat; the test has power against a 5% bias."""
import functools
import itertools
import sys

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from yggc.tree.egt import egt_frontier, egt_init, egt_tree
from yggc.tree.prune import prune_topk
from yggc.tree.recursive_rejection import verify_tree_rrs
from yggc.tree.sampled_egt import RANK_ACCEPTANCE, race_keys, rank_prices, sampled_egt_root_step, sampled_egt_step
from yggc.tree.sampling import SamplingParams, target_probs
from yggc.tree.traversal import verify_tree_traversal
from yggc.tree.verification import verify_tree_sampling

VOCAB = 5
ALPHA = 1e-3


class PathLM:
    """A next-token law for every prefix (seeded by the prefix): the verifier's, and a drafter's that
    is correlated with it but not equal."""

    def __init__(self, seed: int, drafter: bool = False):
        self.seed, self.drafter = seed, drafter

    def logits(self, prefix: tuple[int, ...]) -> torch.Tensor:
        return prefix_logits(self.seed, self.drafter, prefix)


@functools.cache
def prefix_logits(seed: int, drafter: bool, prefix: tuple[int, ...]) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash((seed, prefix)) % 2**31)
    z = 1.5 * torch.randn(VOCAB, generator=g, dtype=torch.float64)
    if drafter:
        z = 0.8 * z + 0.9 * torch.randn(VOCAB, generator=g, dtype=torch.float64)
    return z


def node_prefix(prefix: tuple, tokens: list[int], parents: list[int], i: int) -> tuple:
    path = []
    while i > 0:
        path.append(tokens[i])
        i = parents[i]
    return prefix + tuple(path[::-1])


def draft_and_verify(prefix: tuple, D: int, W: int, V: int, params: SamplingParams, target: PathLM,
                     drafter: PathLM, gen: torch.Generator, rule: str = "rrs") -> list[int]:
    """One iteration: grow a sampled EGT from `prefix`, prune to V, verify -> the emitted tokens."""
    state = egt_init(prefix[-1] if prefix else 0, D, W, VOCAB, dtype=torch.float64)
    draft_rows = torch.zeros(1 + D * W, VOCAB, dtype=torch.float64)
    for _ in range(D):
        f = egt_frontier(state)
        toks, pars = state.tokens.tolist(), state.parents.tolist()
        q = torch.stack([target_probs(drafter.logits(node_prefix(prefix, toks, pars, i)), params)
                         for i in f.ids.tolist()]).double()                            # [W, vocab]
        draft_rows[f.ids] = q
        state = sampled_egt_step(state, q, race_keys(q, gen))
    tree = egt_tree(state)
    sub_ids = prune_topk(tree, V)
    sub = tree.subtree(sub_ids)
    toks, pars = tree.tokens.tolist(), tree.parents.tolist()
    p = torch.stack([target_probs(target.logits(node_prefix(prefix, toks, pars, i)), params)
                     for i in sub_ids.tolist()]).double()                               # [V+1, vocab]
    if rule == "rrs":
        path, token = verify_tree_rrs(sub.tokens, sub.parents, p, draft_rows[sub_ids], gen)
    elif rule == "traversal":
        path, token = verify_tree_traversal(sub.tokens, sub.parents, p, draft_rows[sub_ids], gen)
    else:
        path, token = verify_tree_sampling(sub.tokens, sub.parents, p, gen, sub.cum_logp)
    return [int(sub.tokens[i]) for i in path] + [token]


def emit_n(n: int, shape: tuple[int, int, int], params: SamplingParams, seed: int, gen: torch.Generator,
           rule: str = "rrs") -> tuple[list[int], list[int]]:
    """The first n tokens of a decode (iterating as the runtime does) and the tokens per iteration."""
    target, drafter = PathLM(seed), PathLM(seed, drafter=True)
    out, per_iter = [], []
    while len(out) < n:
        new = draft_and_verify(tuple(out), *shape, params, target, drafter, gen, rule)
        per_iter.append(len(new))
        out += new
    return out[:n], per_iter


def joint_law(n: int, params: SamplingParams, seed: int) -> np.ndarray:
    """The verifier's own law of the first n tokens, over VOCAB**n outcomes in ravel order."""
    target = PathLM(seed)
    row = lambda prefix: target_probs(target.logits(prefix), params).double()  # noqa: E731
    return np.array([float(np.prod([row(seq[:i])[seq[i]] for i in range(n)]))
                     for seq in itertools.product(range(VOCAB), repeat=n)])


def pvalue(samples: np.ndarray, law: np.ndarray) -> float:
    counts = np.bincount(samples, minlength=law.size).astype(float)
    support = law > 0
    assert counts[~support].sum() == 0, "emitted a sequence of probability 0"
    keep = support & (law * len(samples) >= 5)  # pool the rare outcomes into one cell
    obs = np.append(counts[keep], counts[support & ~keep].sum())
    exp = np.append(law[keep], law[support & ~keep].sum())
    obs, exp = obs[exp > 0], exp[exp > 0]
    return chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def sample_codes(n_tokens: int, shape, params, seed: int, n: int, rule: str = "rrs") -> np.ndarray:
    gen = torch.Generator().manual_seed(seed)
    codes = []
    for _ in range(n):
        toks, _ = emit_n(n_tokens, shape, params, seed, gen, rule)
        codes.append(np.ravel_multi_index(toks, (VOCAB,) * n_tokens))
    return np.array(codes)


T1 = SamplingParams(temperature=1.0)
SHAPES = [  # (D, W, V): a chain, a wide tree, a pruned tree (V < D*W), a deep pruned tree
    ((3, 1, 3), T1),
    ((2, 3, 6), SamplingParams(temperature=0.7)),
    ((3, 3, 5), SamplingParams(temperature=1.0, top_k=3)),
    ((4, 2, 5), SamplingParams(temperature=1.2, top_p=0.9, min_p=0.05)),
]


@pytest.mark.parametrize("shape,params", SHAPES)
def test_first_two_tokens_follow_the_verifier(shape, params):
    seed = hash(shape) % 1000
    assert pvalue(sample_codes(2, shape, params, seed, 1500), joint_law(2, params, seed)) > ALPHA


def test_first_three_tokens_follow_the_verifier():
    shape, params = (3, 2, 4), SamplingParams(temperature=1.0, top_p=0.9)
    assert pvalue(sample_codes(3, shape, params, 7, 2500), joint_law(3, params, 7)) > ALPHA


def test_the_test_has_power_against_a_5_percent_bias():
    shape, params = SHAPES[1]
    seed = hash(shape) % 1000
    law = joint_law(2, params, seed)
    codes = sample_codes(2, shape, params, seed, 1500)
    rng = np.random.default_rng(0)
    rare = int(np.argmin(np.where(law > 0, law, np.inf)))
    biased = np.where(rng.random(codes.size) < 0.05, rare, codes)  # 5% of the outputs misplaced
    assert pvalue(biased, law) < 1e-6


@pytest.mark.parametrize("D,W,k", [(2, 3, None), (3, 2, 4), (1, 1, None)])
def test_root_step_grows_what_a_step_on_the_repeated_root_grows(D, W, k):
    """Padding rows draw nothing: the root's one row of keys grows the same tree as W rows of keys whose
    rows 1.. (the padding) are anything at all."""
    g = torch.Generator().manual_seed(D * 10 + W)
    q = torch.softmax(torch.randn(VOCAB, generator=g, dtype=torch.float64), -1)
    keys = race_keys(q[None].expand(W, -1), g)  # row 0: the root's keys; the rest: padding
    once = sampled_egt_root_step(egt_init(3, D, W, VOCAB, k, dtype=torch.float64), q, keys[0])
    repeated = sampled_egt_step(egt_init(3, D, W, VOCAB, k, dtype=torch.float64), q.expand(W, -1), keys)
    for field in ("tokens", "parents", "depth", "cum_logp", "anc", "pool_logp", "pool_parent"):
        assert torch.equal(getattr(once, field), getattr(repeated, field)), field
    live = once.pool_logp > float("-inf")  # the padding rows' slots are dead whatever tokens they hold
    assert torch.equal(once.pool_token[live], repeated.pool_token[live])


def test_seeded_runs_repeat():
    runs = [emit_n(12, (3, 2, 5), T1, 3, torch.Generator().manual_seed(42)) for _ in range(2)]
    assert runs[0] == runs[1]


def test_rrs_accepts_more_than_the_point_mass_rule():
    """Why the sampled tree exists: on the same sampled trees, RRS keeps more drafted tokens."""
    shape = (3, 3, 6)
    means = {}
    for rule in ("rrs", "point-mass"):
        gen = torch.Generator().manual_seed(1)
        per_iter = [k for _ in range(150) for k in emit_n(8, shape, T1, 11, gen, rule)[1]]
        means[rule] = float(np.mean(per_iter))
    assert means["rrs"] > 1.1 * means["point-mass"], means


def test_valuing_a_child_by_its_own_token_is_caught(monkeypatch):
    """The design point of sampled_egt: candidate values come from the rank, not from the drawn token.
    Keeping the children whose drawn tokens the drafter likes most biases what RRS sees, and the test
    catches it."""
    import yggc.tree.sampled_egt as sampled

    def by_token(state, q, keys):
        drawn = keys.topk(state.k, dim=-1).indices
        value = q.gather(1, drawn).log().clamp(min=-1e4)
        return sampled.egt_grow(state, state.cum_logp[state.newest].unsqueeze(1) + value, drawn, stable=True)

    monkeypatch.setattr(sys.modules[__name__], "sampled_egt_step", by_token)
    shape, params = SHAPES[2]
    seed = hash(shape) % 1000
    assert pvalue(sample_codes(2, shape, params, seed, 1500), joint_law(2, params, seed)) < 1e-6


@pytest.mark.parametrize("shape", [(3, 2, 6), (4, 3, 7), (4, 1, 4)])
def test_acceptance_probs_equal_the_rule_frequencies(shape):
    """What calibration prices a sampled tree by: each node's probability of being accepted, computed exactly
    from the rule, against how often verify_tree_rrs accepts it (20000 walks of one drafted tree)."""
    from yggc.tree.recursive_rejection import acceptance_probs

    D, W, V = shape
    params, prefix = SamplingParams(temperature=1.0), (1, 2)
    target, drafter, gen = PathLM(7), PathLM(7, drafter=True), torch.Generator().manual_seed(0)
    state = egt_init(prefix[-1], D, W, VOCAB, dtype=torch.float64)
    rows = torch.zeros(1 + D * W, VOCAB, dtype=torch.float64)
    for _ in range(D):
        f = egt_frontier(state)
        toks, pars = state.tokens.tolist(), state.parents.tolist()
        q = torch.stack([target_probs(drafter.logits(node_prefix(prefix, toks, pars, i)), params)
                         for i in f.ids.tolist()]).double()
        rows[f.ids] = q
        state = sampled_egt_step(state, q, race_keys(q, gen))
    tree = egt_tree(state)
    kept = prune_topk(tree, V)
    sub, toks, pars = tree.subtree(kept), tree.tokens.tolist(), tree.parents.tolist()
    p = torch.stack([target_probs(target.logits(node_prefix(prefix, toks, pars, i)), params)
                     for i in kept.tolist()]).double()
    want = acceptance_probs(sub.tokens, sub.parents, p, rows[kept])
    n, counts = 20000, torch.zeros(len(kept), dtype=torch.float64)
    for _ in range(n):
        path, _ = verify_tree_rrs(sub.tokens, sub.parents, p, rows[kept], gen)
        counts[path] += 1
    got = counts[1:] / n
    sigma = (want[1:] * (1 - want[1:]) / n).sqrt().clamp_min(1e-4)
    assert want[0] == 1.0 and ((got - want[1:]).abs() / sigma).max() < 4.5, (got, want)
    assert want[1:].sum() > 0.3  # the drafter is correlated with the target: something gets accepted


def test_race_keys_rank_as_log_q_plus_gumbel_noise():
    """q / E and log q - log E (the Gumbel-top-k keys) from the same uniform draws put tokens in one order."""
    q = torch.softmax(3.0 * torch.randn(2, 4096, generator=torch.Generator().manual_seed(5)), -1)
    keys = race_keys(q, torch.Generator().manual_seed(9))
    e = torch.rand(q.shape, dtype=torch.float32, generator=torch.Generator().manual_seed(9)).log_().neg_()
    gumbel = q.log() - e.log()
    assert torch.equal(keys.topk(32, dim=-1).indices, gumbel.topk(32, dim=-1).indices)


def positional_value(q_rows: dict, node: tuple[int, ...], rates: tuple[float, ...]) -> float:
    """The chance that the node reached by draw ranks `node` (root first) is accepted when the i-th draw below an
    accepted node is accepted with probability rates[i] (the positional model; 0 beyond the drafter's support)."""
    value, prefix = 1.0, ()
    for rank in node:
        value *= float(rank_prices(rank + 1, rates)[rank]) * bool(q_rows[prefix].sort(descending=True).values[rank])
        prefix += (rank,)
    return value


def grow_by_ranks(q_of, D: int, W: int, V: int, gen: torch.Generator, rates: tuple[float, ...] | None):
    """A sampled EGT over q_of(rank path) -> (kept nodes as rank paths, every drafted row by rank path)."""
    state = egt_init(0, D, W, VOCAB, dtype=torch.float64)
    paths, q_rows, drawn = {0: ()}, {}, {}  # node id -> rank path; rank path -> q; node id -> its draws
    for _ in range(D):
        ids = egt_frontier(state).ids.tolist() if int(state.step) else [0] * W
        q = torch.stack([q_of(paths[i]) for i in ids])
        keys = race_keys(q, gen)
        for row, i in enumerate(ids):
            q_rows[paths[i]] = q[row]
            drawn.setdefault(i, keys[row].topk(state.k).indices.tolist())
        before = int(state.step)
        state = (sampled_egt_root_step(state, q[0], keys[0], rates) if before == 0
                 else sampled_egt_step(state, q, keys, rates))
        for new in range(1 + before * W, 1 + (before + 1) * W):
            parent, token = int(state.parents[new]), int(state.tokens[new])
            paths[new] = paths[parent] + (drawn[parent].index(token),)
    kept = prune_topk(egt_tree(state), V).tolist()
    return [paths[i] for i in kept[1:]], q_rows


def random_q(trial: int):
    """A drafter over rank paths: q(.|path) seeded by (trial, path), flat to sharp by trial."""
    g = torch.Generator().manual_seed(trial)
    sharp = 0.5 + 3.0 * torch.rand((), generator=g, dtype=torch.float64)
    return functools.cache(lambda path: torch.softmax(sharp * torch.randn(
        VOCAB, generator=torch.Generator().manual_seed(hash((trial, path)) % 2**31), dtype=torch.float64), 0))


def tree_and_chain(trial: int, D: int, W: int, V: int, rates: tuple[float, ...],
                   priced: tuple[float, ...] | None) -> tuple[float, float]:
    """(the pruned tree grown with draws `priced` so, the chain of first draws with min(V, D) nodes), both valued
    by the positional model with acceptance `rates`."""
    q_of = random_q(trial)
    first_draws = {(0,) * d: q_of((0,) * d) for d in range(D)}
    chain = sum(positional_value(first_draws, (0,) * d, rates) for d in range(1, min(V, D) + 1))
    kept, rows = grow_by_ranks(q_of, D, W, V, torch.Generator().manual_seed(1000 + trial), priced)
    return sum(positional_value(rows, node, rates) for node in kept), chain


@pytest.mark.parametrize("rates", [RANK_ACCEPTANCE, (0.85, 0.1, 0.05), (0.3, 0.25, 0.2, 0.1)])
@pytest.mark.parametrize("D, W, V", [(4, 3, 8), (3, 4, 8), (2, 2, 4), (4, 2, 4)])
def test_a_sampled_tree_expects_at_least_the_best_chain_it_could_hold(D, W, V, rates):
    """Priced by its acceptance rates, the grown and pruned V-node tree expects at least the chain of first draws
    (min(V, D) nodes, the best chain of the positional model) on every context, flat or sharp drafter."""
    for trial in range(40):
        tree, chain = tree_and_chain(trial, D, W, V, rates, rates)
        assert tree >= chain - 1e-12


def test_draws_priced_at_the_drafters_probabilities_lose_depth_to_the_chain():
    """Priced at q instead (the i-th draw at the i-th largest probability), a well-matched drafter's tree trades
    depth for siblings: on the demo pair at T = 1 a D4 W3 V8 tree made 2.88 tokens per call, a 4-deep chain 3.68."""
    rates = (0.85, 0.1, 0.05)
    losses = [tree < chain - 1e-12 for tree, chain in (tree_and_chain(t, 4, 2, 4, rates, None) for t in range(60))]
    assert sum(losses) >= 10
