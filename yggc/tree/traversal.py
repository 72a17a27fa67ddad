"""Traversal verification (Weng et al. 2025, "Traversal Verification for Speculative Tree Decoding")
for a tree whose siblings were drawn without replacement: a sequence-level rule that tests a node only
after its whole subtree has failed, so a weak token with a strong continuation can still be kept.

Derived here for without-replacement draws (the paper's main text draws siblings i.i.d.). Each node u
carries a weight pi(u), the probability, over the draws below u, that u's prefix survives; the root
has pi = 1. Walking u's children in draw order, child x (drawn from q, the drafter's distribution at u
with the earlier children removed) gets pi(x) = min(1, pi(u) p(x) / q(x)) and is verified first
(depth first). If x's subtree is rejected, u's state moves on:
    r = max(pi p - q, 0),  R = sum r,  pi <- R / (1 - pi + R),  p <- r / R,  q <- q without x.
Once every child is rejected, u itself is accepted with probability pi and the next token is drawn
from u's current p.

Why it is lossless (invariant: given u's prefix, u survives with probability pi and the token after
it follows p): child x delivers y = x with probability q(y) min(1, pi p(y) / q(y)) = min(pi p(y), q(y))
and is rejected with probability 1 - pi + R; what is left to deliver, r, is then delivered with
probability R / (1 - pi + R) times law r / R, whatever x was (so removing x from q for the next draw,
and any tree shape below, changes nothing). On a chain the rule is block verification (the h_i of
`block_verification` are the pi left after each rejection); at pi = 1 each rejection keeps pi = 1,
so the root always survives.
"""
from __future__ import annotations

import torch

from .sampling import sample_index
from .verification import TreeAccept, children_lists


class _NodeState:
    """u's weight pi and its current target p and draft q ([vocab] float64 each, normalised)."""

    def __init__(self, pi: float, p: torch.Tensor, q: torch.Tensor):
        self.pi, self.p, self.q = pi, p / p.sum(), _normalised(q)

    def child_weight(self, x: int) -> float | None:
        """pi of the child holding token x; None for a rank past q's support (skipped, as if absent)."""
        qx = float(self.q[x])
        return min(1.0, self.pi * float(self.p[x]) / qx) if qx > 0 else None

    def reject(self, x: int) -> None:
        """x's subtree was rejected: deliver the residual r with probability R / (1 - pi + R)."""
        r = (self.pi * self.p - self.q).clamp_min(0)
        R, lost = float(r.sum()), 1.0 - self.pi
        if R > 0:
            self.pi, self.p = R / (lost + R), r / R
        elif lost > 0:
            self.pi = 0.0  # nothing left to deliver: u fails once its other children have
        # else pi == 1 and p == q up to rounding: x's acceptance was certain; keep (pi, p)
        self.q = _normalised(self.q.index_fill(0, torch.tensor([x], device=self.q.device), 0.0))


def _normalised(q: torch.Tensor) -> torch.Tensor:
    """q [vocab] / its mass (an exhausted q, all zeros, stays as it is)."""
    mass = float(q.sum())
    return q / mass if mass > 0 else q


class _Tree:
    def __init__(self, tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                 draft_probs: torch.Tensor):
        self.tok, self.kids = tokens.tolist(), children_lists(parents, None)
        self.p, self.q = target_probs, draft_probs  # [n, vocab] each; rows are widened when visited

    def state(self, u: int, pi: float) -> _NodeState:
        return _NodeState(pi, self.p[u].to(torch.float64), self.q[u].to(torch.float64))


def _tested_children(tree: _Tree, u: int, s: _NodeState):
    """u's children in draw order with their weights pi (ranks past q's support skipped). Resuming the loop means
    the child's subtree was rejected: u's state then moves to its residual."""
    for c in tree.kids[u]:
        pi_c = s.child_weight(tree.tok[c])
        if pi_c is None:
            continue
        yield c, pi_c
        s.reject(tree.tok[c])


def _walk(tree: _Tree, u: int, pi: float, uniform: list[float], generator: torch.Generator
          ) -> TreeAccept | None:
    """Verify u's subtree with weight pi -> the accepted path below u and the next token, or None if u
    is rejected."""
    s = tree.state(u, pi)
    for c, pi_c in _tested_children(tree, u, s):
        found = _walk(tree, c, pi_c, uniform, generator) if pi_c > 0 else None
        if found is not None:
            return TreeAccept([c] + found.path, found.token)
    if uniform[u] < s.pi:
        return TreeAccept([], sample_index(s.p, generator))
    return None


def verify_tree_traversal(tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                          draft_probs: torch.Tensor, generator: torch.Generator) -> TreeAccept:
    """The inputs of `verify_tree_rrs` (children drawn without replacement, in id order) -> the accepted
    path and the next token, by traversal verification."""
    tree = _Tree(tokens, parents, target_probs, draft_probs)
    uniform = torch.rand(len(tree.tok), generator=generator, dtype=torch.float64, device=generator.device).tolist()
    uniform[0] = 0.0  # the root survives (pi stays 1 there); its draw is not needed
    found = _walk(tree, 0, 1.0, uniform, generator)
    assert found is not None, "traversal verification rejected the root"
    return found


def _outcome(tree: _Tree, u: int, pi: float, end: torch.Tensor, law: torch.Tensor, reach: float) -> float:
    """Fill end[v] (probability the accepted path ends at v) and law[v] for u's subtree, entered with
    probability `reach`; returns the probability, given the draws, that u survives."""
    s, kept = tree.state(u, pi), 0.0
    for c, pi_c in _tested_children(tree, u, s):
        kept += (1.0 - kept) * _outcome(tree, c, pi_c, end, law, reach * (1.0 - kept))
    end[u], law[u] = reach * (1.0 - kept) * s.pi, s.p
    return kept + (1.0 - kept) * s.pi


def traversal_outcome(tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                      draft_probs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact law of `verify_tree_traversal` given the drafts: end [n] float64, the probability that the
    accepted path ends at each node (the root: nothing accepted), and law [n, vocab], the next token's
    law when it does. Expected accepted length = sum(end * depth)."""
    tree = _Tree(tokens, parents, target_probs, draft_probs)
    end = torch.zeros(len(tree.tok), dtype=torch.float64)
    law = torch.zeros(target_probs.shape, dtype=torch.float64)
    _outcome(tree, 0, 1.0, end, law, 1.0)
    return end, law
