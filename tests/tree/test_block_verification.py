import functools
import itertools
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from yggc.tree.block_verification import (
    block_accept_probs,
    block_outcome,
    block_prefix_expected_accepted,
    tokenwise_outcome,
    verify_chain_block,
    verify_chain_tokenwise,
)

N = 12000  # samples per goodness-of-fit test: 5% of the mass misplaced gives chi2 > 100 >> threshold
ALPHA = 1e-3
RULES = {"tokenwise": verify_chain_tokenwise, "block": verify_chain_block}
OUTCOMES = {"tokenwise": tokenwise_outcome, "block": block_outcome}


class TinyLM:
    """A context-dependent toy LM: a fixed random distribution for every prefix up to `depth` tokens."""

    def __init__(self, vocab: int, depth: int, seed: int, scale: float = 1.0):
        rng = np.random.default_rng(seed)
        self.vocab = vocab
        self.table = {}
        for n in range(depth + 1):
            for prefix in itertools.product(range(vocab), repeat=n):
                z = np.exp(scale * rng.standard_normal(vocab))
                self.table[prefix] = z / z.sum()

    def __call__(self, prefix) -> np.ndarray:
        return self.table[tuple(prefix)]

    def rows(self, xs, n: int) -> torch.Tensor:
        """[n, vocab]: the distributions after xs[:0], ..., xs[:n-1]."""
        return torch.tensor(np.stack([self(xs[:i]) for i in range(n)]))


# ---------------------------------------------------------------- exact enumeration


def _expected_accepted(outcome, p_lm: TinyLM, q_lm: TinyLM, D: int) -> float:
    total = 0.0
    for xs in itertools.product(range(q_lm.vocab), repeat=D):
        w = np.prod([q_lm(xs[:i])[xs[i]] for i in range(D)])
        tau, _ = outcome(torch.tensor(xs), q_lm.rows(xs, D), p_lm.rows(xs, D + 1))
        total += w * float((tau * torch.arange(D + 1)).sum())
    return total


def _output_law(outcome, p_lm: TinyLM, q_lm: TinyLM, D: int) -> dict[tuple, float]:
    """Exact law of (accepted drafts, next token, then target continuation) up to D+1 tokens."""
    V = q_lm.vocab
    law: dict[tuple, float] = defaultdict(float)
    for xs in itertools.product(range(V), repeat=D):
        w = np.prod([q_lm(xs[:i])[xs[i]] for i in range(D)])
        tau, nxt = outcome(torch.tensor(xs), q_lm.rows(xs, D), p_lm.rows(xs, D + 1))
        for t in range(D + 1):
            for y in range(V):
                base = w * float(tau[t]) * float(nxt[t, y])
                if base == 0.0:
                    continue
                head = xs[:t] + (y,)
                for z in itertools.product(range(V), repeat=D - t):  # later iterations sample the target
                    seq = head + z
                    law[seq] += base * np.prod([p_lm(seq[:k])[seq[k]] for k in range(t + 1, D + 1)])
    return law


def _target_law(p_lm: TinyLM, D: int) -> dict[tuple, float]:
    return {s: float(np.prod([p_lm(s[:k])[s[k]] for k in range(D + 1)]))
            for s in itertools.product(range(p_lm.vocab), repeat=D + 1)}


def _max_gap(law: dict, target: dict) -> float:
    return max(abs(law.get(s, 0.0) - target[s]) for s in target)


def test_toy_example_of_the_paper_exactly():
    # context-free: target (A, B) = (1/3, 2/3), drafter (2/3, 1/3), gamma = 2
    p = torch.tensor([[1 / 3, 2 / 3]] * 3, dtype=torch.float64)
    q = torch.tensor([[2 / 3, 1 / 3]] * 2, dtype=torch.float64)
    exp_token = exp_block = 0.0
    for xs in itertools.product(range(2), repeat=2):
        w = float(q[0, xs[0]] * q[1, xs[1]])
        exp_token += w * float((tokenwise_outcome(torch.tensor(xs), q, p)[0] * torch.arange(3)).sum())
        exp_block += w * float((block_outcome(torch.tensor(xs), q, p)[0] * torch.arange(3)).sum())
    assert Fraction(exp_token).limit_denominator(100) == Fraction(10, 9)
    assert Fraction(exp_block).limit_denominator(100) == Fraction(11, 9)
    assert exp_token == pytest.approx(10 / 9, abs=1e-12) and exp_block == pytest.approx(11 / 9, abs=1e-12)
    A, B = 0, 1
    # the paper's walk-through: AA kept w.p. 1/4 else tau = 0 with the first token corrected to B
    tau, nxt = block_outcome(torch.tensor([A, A]), q, p)
    torch.testing.assert_close(tau, torch.tensor([3 / 4, 0.0, 1 / 4], dtype=torch.float64))
    assert float(nxt[0, B]) == pytest.approx(1.0)
    # BA: B always kept, A kept w.p. 1/2, else the second token is corrected to B
    tau, nxt = block_outcome(torch.tensor([B, A]), q, p)
    torch.testing.assert_close(tau, torch.tensor([0.0, 1 / 2, 1 / 2], dtype=torch.float64))
    assert float(nxt[1, B]) == pytest.approx(1.0)
    for xs in ([A, B], [B, B]):  # always kept in full
        torch.testing.assert_close(block_outcome(torch.tensor(xs), q, p)[0], torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64))


def test_prefix_expectations_equal_block_outcome_on_each_prefix():
    g = torch.Generator().manual_seed(3)
    for D, V in ((1, 5), (4, 7), (6, 3)):
        q = torch.softmax(2 * torch.randn(D, V, generator=g, dtype=torch.float64), -1)
        p = torch.softmax(2 * torch.randn(D + 1, V, generator=g, dtype=torch.float64), -1)
        drafts = torch.multinomial(q, 1, generator=g).flatten()
        want = [0.0] + [float((block_outcome(drafts[:v], q[:v], p[:v + 1])[0] * torch.arange(v + 1)).sum())
                        for v in range(1, D + 1)]
        torch.testing.assert_close(block_prefix_expected_accepted(drafts, q, p), torch.tensor(want, dtype=torch.float64))


CASES = [(3, 2, 0), (3, 3, 1), (4, 2, 2), (4, 3, 3), (3, 2, 4), (4, 2, 5)]


@pytest.mark.parametrize("V,D,seed", CASES)
def test_block_is_exact_and_accepts_at_least_as_much_by_enumeration(V, D, seed):
    p_lm, q_lm = TinyLM(V, D, seed), TinyLM(V, D, 1000 + seed, scale=1.5)
    target = _target_law(p_lm, D)
    for name in ("tokenwise", "block"):
        assert _max_gap(_output_law(OUTCOMES[name], p_lm, q_lm, D), target) < 1e-12, name
    e_tok = _expected_accepted(tokenwise_outcome, p_lm, q_lm, D)
    e_blk = _expected_accepted(block_outcome, p_lm, q_lm, D)
    assert e_blk >= e_tok - 1e-12


def _appendix_as_printed(xs, q, p):
    """The paper's appendix loop as printed: it stops after position D-1, never offering the full block."""
    h, nxt = block_accept_probs(xs, q, p)
    h = torch.cat([h[:-1], h.new_zeros(1)])
    later_miss = torch.cat([torch.flip(torch.cumprod(torch.flip(1.0 - h, [0]), 0), [0])[1:], h.new_ones(1)])
    return h * later_miss, nxt


def _wrong_residual(xs, q, p):
    """Block acceptance combined with token verification's residual."""
    return block_outcome(xs, q, p)[0], tokenwise_outcome(xs, q, p)[1]


@pytest.mark.parametrize("broken", [_appendix_as_printed, _wrong_residual])
def test_enumeration_detects_broken_rules(broken):
    # negative controls: the exactness check above is not vacuous
    p_lm, q_lm = TinyLM(3, 3, 1), TinyLM(3, 3, 1001, scale=1.5)
    assert _max_gap(_output_law(broken, p_lm, q_lm, 3), _target_law(p_lm, 3)) > 1e-3


def test_block_strictly_better_somewhere():
    gains = []
    for V, D, seed in CASES:
        p_lm, q_lm = TinyLM(V, D, seed), TinyLM(V, D, 1000 + seed, scale=1.5)
        gains.append(_expected_accepted(block_outcome, p_lm, q_lm, D) - _expected_accepted(tokenwise_outcome, p_lm, q_lm, D))
    assert max(gains) > 1e-3


# ---------------------------------------------------------------- sampling (chi-square)


def _pvalue(samples: list[int], probs: np.ndarray) -> float:
    counts = np.bincount(samples, minlength=probs.size).astype(float)
    expected = probs * len(samples)
    assert expected.min() >= 5
    return chisquare(counts, expected * counts.sum() / expected.sum()).pvalue


class _Chain:
    """Draft D tokens from q_lm (sampled), verify against p_lm with `rule`, emit the tokens."""

    def __init__(self, rule, p_lm: TinyLM, q_lm: TinyLM, D: int, seed: int):
        self.rule, self.p_lm, self.q_lm, self.D = rule, p_lm, q_lm, D
        self.rng = np.random.default_rng(seed)
        self.g = torch.Generator().manual_seed(seed)
        self.cdf = {k: np.cumsum(v) for k, v in q_lm.table.items()}
        self.p_cdf = {k: np.cumsum(v) for k, v in p_lm.table.items()}
        self.inputs = {}  # drafts -> (drafts, q rows, p rows) tensors, built once per chain

    def _sample(self, cdf: np.ndarray) -> int:
        return min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1], "right")), cdf.size - 1)

    def emit(self) -> list[int]:
        xs: tuple = ()
        for _ in range(self.D):
            xs += (self._sample(self.cdf[xs]),)
        if xs not in self.inputs:
            self.inputs[xs] = (torch.tensor(xs), self.q_lm.rows(xs, self.D), self.p_lm.rows(xs, self.D + 1))
        tau, y = self.rule(*self.inputs[xs], self.g)
        return list(xs[:tau]) + [y]

    def first_two(self) -> int:
        out = self.emit()
        if len(out) == 1:  # the next iteration samples the second token from the verifier
            out.append(self._sample(self.p_cdf[tuple(out)]))
        return out[0] * self.q_lm.vocab + out[1]


FIRST_LM = (TinyLM(6, 3, 7), TinyLM(6, 3, 8, scale=1.5))


@functools.cache
def _first_tokens(rule: str) -> tuple[int, ...]:
    chain = _Chain(RULES[rule], *FIRST_LM, D=3, seed=1)
    return tuple(chain.emit()[0] for _ in range(N))


@pytest.mark.parametrize("rule", ["tokenwise", "block"])
def test_chain_first_token_follows_target(rule):
    assert _pvalue(list(_first_tokens(rule)), FIRST_LM[0](())) > ALPHA


@pytest.mark.parametrize("rule", ["tokenwise", "block"])
def test_chain_first_two_tokens_follow_target(rule):
    V, D = 5, 2
    p_lm, q_lm = TinyLM(V, D, 17, scale=0.7), TinyLM(V, D, 18, scale=1.5)
    chain = _Chain(RULES[rule], p_lm, q_lm, D, seed=2)
    joint = (p_lm(())[:, None] * np.stack([p_lm((x,)) for x in range(V)])).ravel()  # p1(x1) p2(x2 | x1)
    assert _pvalue([chain.first_two() for _ in range(N)], joint) > ALPHA


def test_chain_goodness_of_fit_has_power_against_a_5_percent_bias():
    p1 = FIRST_LM[0](())
    rng = np.random.default_rng(0)
    worst = int(np.argmin(p1))
    biased = [worst if rng.random() < 0.05 else x for x in _first_tokens("block")]  # 5% of outputs misplaced
    assert _pvalue(biased, p1) < 1e-6


def test_chain_sampler_matches_exact_outcome():
    # the sampled (tau, token) law of each rule equals its exact law for a fixed draft chain
    V, D = 4, 3
    p_lm, q_lm = TinyLM(V, D, 21), TinyLM(V, D, 22, scale=1.5)
    xs = (2, 0, 1)
    x_t, q, p = torch.tensor(xs), q_lm.rows(xs, D), p_lm.rows(xs, D + 1)
    for name in ("tokenwise", "block"):
        tau, nxt = OUTCOMES[name](x_t, q, p)
        law = (tau[:, None] * nxt).numpy().ravel()
        g = torch.Generator().manual_seed(4)
        draws = [t * V + y for t, y in (RULES[name](x_t, q, p, g) for _ in range(N // 2))]
        counts = np.bincount(draws, minlength=law.size)
        assert counts[law == 0].sum() == 0, name
        keep = law * (N // 2) > 5
        assert chisquare(counts[keep], law[keep] / law[keep].sum() * counts[keep].sum()).pvalue > ALPHA, name
