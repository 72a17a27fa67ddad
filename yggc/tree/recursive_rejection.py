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


def _accept_prob(p: torch.Tensor, q: torch.Tensor, x: int) -> float:
    """The probability child x is accepted at a node: min(1, p(x) / q(x)); p, q [vocab] float64
    (unnormalised). 0 for a rank past q's support (not a draw: as if the child were not there)."""
    q_mass = float(q.sum())
    qx = float(q[x]) / q_mass if q_mass > 0 else 0.0
    return min(1.0, float(p[x]) / float(p.sum()) / qx) if qx > 0 else 0.0


def _after_rejection(p: torch.Tensor, q: torch.Tensor, x: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Once x is rejected: the residual p = norm(max(p - q, 0)) and q without x, which the next child is
    tested against (both unchanged for a rank past q's support)."""
    q_mass = float(q.sum())
    if q_mass <= 0 or float(q[x]) == 0:
        return p, q
    residual = (p / p.sum() - q / q_mass).clamp_min(0)
    if float(residual.sum()) <= 0:  # p == q_i up to rounding: the acceptance was certain
        residual = p
    return residual, q.index_fill(0, torch.tensor([x], device=q.device), 0.0)


def _accept_child(p: torch.Tensor, q: torch.Tensor, x: int, u: float) -> tuple[bool, torch.Tensor, torch.Tensor]:
    """One rejection step at a node with u ~ U(0,1) -> (accepted, residual p, q without x)."""
    if u < _accept_prob(p, q, x):
        return True, p, q
    return False, *_after_rejection(p, q, x)


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
        p, q, reach = target_probs[node].to(torch.float64), draft_probs[node].to(torch.float64), 1.0
        for c in kids[node]:
            accept = _accept_prob(p, q, tok[c])
            p, q = _after_rejection(p, q, tok[c])
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
        p, q = target_probs[cur].to(torch.float64), draft_probs[cur].to(torch.float64)   # [vocab] each
        accepted = None
        for c in kids[cur]:
            ok, p, q = _accept_child(p, q, tok[c], u[c])
            if ok:
                accepted = c
                break
        if accepted is None:
            return TreeAccept(path, sample_index(p, generator))
        path.append(accepted)
        cur = accepted
