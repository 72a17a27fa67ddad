"""Lossless acceptance rules for a verified token tree (index 0 = root = last committed token).

Rows of the verifier output are per tree node: row i is the verifier's prediction for the token that
follows node i's path. Both rules walk down from the root and emit the accepted path plus one more
token (the bonus at the last accepted node, or a residual sample where every child was rejected).
Chains (W = 1) sampled from the drafter may instead use the rules re-exported from block_verification.
Randomness comes only from the passed torch.Generator (on the probabilities' device).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .block_verification import ChainAccept, verify_chain_block, verify_chain_tokenwise
from .sampling import row_argmax, sample_index

__all__ = ["ChainAccept", "TreeAccept", "verify_chain_block", "verify_chain_tokenwise", "verify_greedy",
           "verify_tree_sampling"]


class TreeAccept(NamedTuple):
    path: list[int]  # accepted node ids from the root's child downwards (root excluded)
    token: int       # the next token to emit after the path (bonus or residual sample)


def children_lists(parents: torch.Tensor, scores: torch.Tensor | None) -> list[list[int]]:
    """Children lists per node, best draft score first (ties: lower id first)."""
    n = parents.shape[0]
    if scores is None:
        order = list(range(n))
    else:
        order = torch.argsort(-scores.detach().to(torch.float64).cpu(), stable=True).tolist()
    par = parents.tolist()
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in order:
        if i > 0 and par[i] >= 0:
            kids[par[i]].append(i)
    return kids


def verify_greedy(tokens: torch.Tensor, parents: torch.Tensor, target_logits: torch.Tensor) -> TreeAccept:
    """tokens [n], parents [n], target_logits [n, vocab]: follow the verifier argmax from the root."""
    best = row_argmax(target_logits).tolist()  # [n] verifier's greedy next token per node
    tok = tokens.tolist()
    kids = children_lists(parents, None)
    path, cur = [], 0
    while True:
        nxt = next((c for c in kids[cur] if tok[c] == best[cur]), None)
        if nxt is None:
            return TreeAccept(path, best[cur])
        path.append(nxt)
        cur = nxt


def verify_tree_sampling(tokens: torch.Tensor, parents: torch.Tensor, target_probs: torch.Tensor,
                         generator: torch.Generator, scores: torch.Tensor | None = None) -> TreeAccept:
    """Multi-draft rule with each child a point mass: tokens [n], parents [n], target_probs [n, vocab]
    (verifier probabilities after temperature/top-k/top-p), scores [n] sibling order (e.g. cum_logp,
    tried best first; default: by id). Emits exactly the verifier's distribution for any fixed tree."""
    tok = tokens.tolist()
    kids = children_lists(parents, scores)
    # p(x) of every node's token under its parent's target row, and one uniform per node: [n] each
    flat = parents.clamp(min=0) * target_probs.shape[-1] + tokens                      # [n]
    p_tok = target_probs.reshape(-1).take(flat).tolist()
    u = torch.rand(len(tok), generator=generator, dtype=torch.float64, device=generator.device).tolist()
    path, cur = [], 0
    while True:
        row = target_probs[cur]                                                        # [vocab]
        mass, removed, accepted = float(row.sum(dtype=torch.float64)), [], None
        for c in kids[cur]:
            if tok[c] in removed:  # a repeated sibling token already has residual mass 0
                continue
            if u[c] * mass < p_tok[c]:  # accept x with prob residual(x) / residual mass
                accepted = c
                break
            removed.append(tok[c])  # rejected: zero x out; the renormalisation is implicit in `mass`
            mass -= p_tok[c]
        if accepted is None:
            residual = row.to(torch.float64)
            if removed:
                residual = residual.index_fill(0, torch.tensor(removed, device=row.device), 0.0)
            return TreeAccept(path, sample_index(residual, generator))
        path.append(accepted)
        cur = accepted
