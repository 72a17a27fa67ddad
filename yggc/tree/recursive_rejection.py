"""Recursive rejection sampling over a tree whose siblings were drawn without replacement (Jeon et al.
2024, "Recursive Speculative Decoding"), the acceptance rule for `sampled_egt` trees at T > 0.

At node u with children x_1, x_2, ... (draw order) the rule keeps a residual target p and the draft
distribution q the next child was drawn from (q(.|u) with the earlier children removed, renormalised):
accept x_i with probability min(1, p(x_i) / q_i(x_i)); on rejection p <- norm(max(p - q_i, 0)) and
x_i leaves q. If every child is rejected, the emitted token is a draw from the final residual. Each
step emits exactly p's distribution whatever q is, so by induction the walk emits the verifier's
distribution, while a child that q and p agree on is accepted with high probability, unlike the
point-mass rule of `verify_tree_sampling`, whose acceptance is only p(x).
"""
from __future__ import annotations

import torch

from .sampling import sample_index
from .verification import TreeAccept, children_lists


class _Residual:
    """A node's state during the walk: the residual target p and the draft q the next child was drawn from, both
    unnormalised float64 [vocab], with their masses kept beside them (a vocabulary-wide sum only where p changes)."""

    def __init__(self, target: torch.Tensor, draft: torch.Tensor):
        self.p = target.to(torch.float64)
        self.q = draft.to(torch.float64, copy=True)  # its own copy: a rejected child is zeroed in place
        self.p_mass, self.q_mass = float(self.p.sum()), float(self.q.sum())

    def accept_prob(self, x: int) -> float:
        """min(1, p(x) / q(x)) normalised; 0 for a rank past q's support (not a draw: as if the child were not
        there)."""
        qx = float(self.q[x]) / self.q_mass if self.q_mass > 0 else 0.0
        return min(1.0, float(self.p[x]) / self.p_mass / qx) if qx > 0 else 0.0

    def reject(self, x: int) -> None:
        """Once x is rejected: p <- max(p - q, 0) (normalised, up to a scale) and x leaves q (both unchanged for a
        rank past q's support)."""
        qx = float(self.q[x])
        if self.q_mass <= 0 or qx == 0:
            return
        residual = torch.sub(self.p, self.q, alpha=self.p_mass / self.q_mass).clamp_min_(0)  # p_mass (p' - q')
        mass = float(residual.sum())
        if mass > 0:  # else p == q up to rounding: the acceptance was certain, p stays
            self.p, self.p_mass = residual, mass
        self.q[x] = 0.0
        self.q_mass -= qx


def acceptance_probs(tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                     draft_probs: torch.Tensor) -> torch.Tensor:
    """The same inputs as verify_tree_rrs -> [n] float64: for each node, the probability that the walk
    accepts it (1 for the root): the product along its path of each child's chance at its parent, where
    child i is tested only if children 1..i-1 were rejected. Exact, no sampling: what calibration prices
    a sampled tree (and any pruned or truncated part of it that keeps a prefix of each node's draws) by."""
    tok, kids = tokens.tolist(), children_lists(parents, None)
    out = torch.zeros(len(tok), dtype=torch.float64)
    out[0] = 1.0
    for node in range(len(tok)):  # parents precede their children
        if not kids[node] or out[node] == 0:
            continue
        state, reach = _Residual(target_probs[node], draft_probs[node]), 1.0
        for c in kids[node]:
            accept = state.accept_prob(tok[c])
            state.reject(tok[c])
            out[c] = out[node] * reach * accept
            reach *= 1.0 - accept
    return out


def verify_tree_rrs(tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                    draft_probs: torch.Tensor, generator: torch.Generator) -> TreeAccept:
    """tokens [n], parents [n] (children drawn without replacement, in id order), target_probs [n, vocab]
    and draft_probs [n, vocab] (the verifier's and the drafter's distributions after each node, with the
    same temperature/top-k/top-p) -> the accepted path and the next token."""
    tok = tokens.tolist()
    kids = children_lists(parents, None)
    u = torch.rand(len(tok), generator=generator, dtype=torch.float64, device=generator.device).tolist()
    path, cur = [], 0
    while True:
        state, accepted = _Residual(target_probs[cur], draft_probs[cur]), None
        for c in kids[cur]:
            if u[c] < state.accept_prob(tok[c]):
                accepted = c
                break
            state.reject(tok[c])
        if accepted is None:
            return TreeAccept(path, sample_index(state.p, generator))
        path.append(accepted)
        cur = accepted
