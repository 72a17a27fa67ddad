"""What a draft phase hands the verify phase: the drafted tree and what the verification rules need of it."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..tree.token_tree import TokenTree


@dataclass
class Draft:
    """A drafted tree and what its verification needs (SpeculativeDecoder.draft_* -> verify_*)."""

    tree: TokenTree
    q: torch.Tensor | None  # [D, vocab] drafter distributions of a sampled chain, else None
    n_fed: int  # tree nodes 0..n_fed-1 have their K/V in the drafter cache
    anc: torch.Tensor  # [N, N] ancestor-or-self mask
    q_rows: torch.Tensor | None = None  # [N, vocab] a sampled tree's drafter distribution after each node
    verify: int | None = None  # nodes to verify at most (None: the shape's V; suffix branches change it)

    def n_verified(self, shape_verify: int) -> int:
        """Draft nodes the verifier checks: the draft's own count (suffix branches set it) or else the shape's V,
        at most every drafted node."""
        return min(shape_verify if self.verify is None else self.verify, self.tree.n_nodes - 1)
