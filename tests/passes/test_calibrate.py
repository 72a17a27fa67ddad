"""A sampled chain is priced by the rule that verifies it: block verification's expected accepted drafts, exact
(block-verification.txt's toy example: 11/9 against token verification's 10/9), for every verify budget."""
import itertools
from fractions import Fraction

import torch
from yggc.passes.calibrate import block_chain_accepted, sampled_path_prob

from yggc.plan.calibration import as_tree_sample, tokens_per_iteration
from yggc.plan.shape import TreeShape
from yggc.runtime.draft import Draft
from yggc.tree.token_tree import TokenTree

# context-free: target (A, B) = (1/3, 2/3), drafter (2/3, 1/3), two drafts
P = torch.tensor([[1 / 3, 2 / 3]] * 3, dtype=torch.float64)  # [D + 1, vocab]
Q = torch.tensor([[2 / 3, 1 / 3]] * 2, dtype=torch.float64)  # [D, vocab]


def chain_draft(drafts: tuple[int, ...]) -> Draft:
    tree = TokenTree.from_root(0, 1 + len(drafts))
    for d, token in enumerate(drafts, start=1):
        tree.tokens[d], tree.parents[d], tree.depth[d] = token, d - 1, d
    tree.n_nodes = 1 + len(drafts)
    return Draft(tree, Q, len(drafts), torch.ones(1 + len(drafts), 1 + len(drafts), dtype=torch.bool).tril())


def test_a_chain_is_priced_by_block_verification_at_every_budget():
    kept = torch.arange(3)
    expected, token_level = torch.zeros(3, dtype=torch.float64), 0.0
    for xs in itertools.product(range(2), repeat=2):
        weight = float(Q[0, xs[0]] * Q[1, xs[1]])
        draft = chain_draft(xs)
        expected += weight * block_chain_accepted(draft, kept, P)
        token_level += weight * float(sampled_path_prob(draft, kept, P)[1:].sum())
    assert Fraction(float(expected[2])).limit_denominator(100) == Fraction(11, 9)  # both drafts verified
    assert Fraction(token_level).limit_denominator(100) == Fraction(10, 9)
    assert Fraction(float(expected[1])).limit_denominator(100) == Fraction(2, 3)  # one draft: sum min(p, q)
    assert expected[0] == 0


def test_tokens_per_iteration_of_a_chain_come_from_its_block_prices():
    draft = chain_draft((0, 1))
    sample = as_tree_sample(draft.tree, 1, [], path_prob=sampled_path_prob(draft, torch.arange(3), P),
                            chain_accepted=torch.tensor([0.0, 0.5, 1.25], dtype=torch.float64))
    table = tokens_per_iteration([sample], max_depth=2)
    assert table == {TreeShape(1, 1, 1): 1.5, TreeShape(2, 1, 1): 1.5, TreeShape(2, 1, 2): 2.25}


def test_a_tree_has_no_chain_price():
    tree = TokenTree.from_root(0, 3)
    assert block_chain_accepted(Draft(tree, None, 3, torch.eye(3, dtype=torch.bool)), torch.arange(3), P) is None
