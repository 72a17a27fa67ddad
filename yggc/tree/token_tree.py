"""TokenTree: a draft tree of fixed capacity N held in plain tensors (no model calls).

Node 0 is the root: the last committed token, not a draft. Every other node is a drafted token
whose parent index points at an earlier node. Slots at or beyond `n_nodes` are unused (parent -1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from . import host


@dataclass
class TokenTree:
    tokens: torch.Tensor    # [N] long, token id per node
    parents: torch.Tensor   # [N] long, parent node id, -1 for the root and unused slots
    depth: torch.Tensor     # [N] long, 0 for the root
    cum_logp: torch.Tensor  # [N] float, sum of draft log-probs along the path, 0.0 for the root
    n_nodes: int            # nodes in use; node ids 0..n_nodes-1

    @staticmethod
    def from_root(root_token: int, capacity: int, dtype: torch.dtype = torch.float32,
                  device: torch.device | str | None = None) -> TokenTree:
        """A tree with only the root in use and room for `capacity` nodes in all."""
        tokens = torch.zeros(capacity, dtype=torch.long, device=device)
        tokens[0] = root_token
        parents = torch.full((capacity,), -1, dtype=torch.long, device=device)
        depth = torch.zeros(capacity, dtype=torch.long, device=device)
        cum_logp = torch.zeros(capacity, dtype=dtype, device=device)
        return TokenTree(tokens, parents, depth, cum_logp, 1)

    @property
    def capacity(self) -> int:
        return self.tokens.shape[0]

    def ancestor_mask(self) -> torch.Tensor:
        """[N, N] bool: row i is True at j iff j == i or j is an ancestor of i (the tree attention mask)."""
        n = self.capacity
        idx = torch.arange(n, device=self.parents.device)
        has_parent = self.parents >= 0
        # one-hop reachability "i itself or its parent"; squaring it log2(N) times closes it over all ancestors
        step = torch.eye(n, dtype=torch.float32, device=self.parents.device)
        step[idx[has_parent], self.parents[has_parent]] = 1.0
        for _ in range(max(1, math.ceil(math.log2(max(n, 2))))):
            step = ((step @ step) > 0).float()
        return step.bool()

    def path_to(self, i: int) -> list[int]:
        """Node ids from the root's child down to node i (empty for the root)."""
        parents = self.parents.tolist()
        path = []
        while i > 0:
            path.append(i)
            i = parents[i]
        return path[::-1]

    def children(self, i: int) -> list[int]:
        """Ids of the children of node i, ascending."""
        used = self.parents[: self.n_nodes]
        return torch.nonzero(used == i).flatten().tolist()

    def leaves(self) -> list[int]:
        """Ids of nodes in use that have no child, ascending (the root alone is a leaf)."""
        used = self.parents[: self.n_nodes]
        has_child = torch.zeros(self.n_nodes, dtype=torch.bool, device=used.device)
        has_child[used[used >= 0]] = True
        return torch.nonzero(~has_child).flatten().tolist()

    def is_chain(self) -> bool:
        """Every node in use is the child of the one before it."""
        parents = self.parents[1: self.n_nodes]
        return bool((parents == torch.arange(parents.shape[0], device=parents.device)).all())

    def positions(self, offset: int) -> torch.Tensor:
        """[N] long RoPE positions: the root sits at `offset` (its position in the sequence)."""
        return self.depth + offset

    def subtree(self, ids: torch.Tensor) -> TokenTree:
        """The nodes `ids` [M] (root first, parents before children) re-indexed 0..M-1 as a new tree."""
        ids = ids.to(self.parents.device, torch.long)
        remap = torch.full((self.capacity,), -1, dtype=torch.long, device=ids.device)
        remap[ids] = torch.arange(ids.shape[0], device=ids.device)
        old_parents = self.parents[ids]
        # parents outside `ids` (only the root's -1) stay -1
        parents = torch.where(old_parents >= 0, remap[old_parents.clamp(min=0)], old_parents)
        if bool((parents[1:] < 0).any()) or int(parents[0]) != -1:
            raise ValueError("subtree ids must start with the root and be closed under parents")
        return TokenTree(self.tokens[ids].clone(), parents, self.depth[ids].clone(),
                         self.cum_logp[ids].clone(), int(ids.shape[0]))


def tree_mask(n: int | torch.Tensor, anc: torch.Tensor, view: int) -> torch.Tensor:
    """Rows see the prefix (slots < n) and their tree ancestors (tree node j at slot n + j).

    anc [R, N] ancestor-or-self rows -> mask [R, view]; n may be a tensor (no data-dependent shapes).
    Eager on the CPU: host.tree_mask's NumPy slices.
    """
    if host.eager_cpu(anc):
        return torch.from_numpy(host.tree_mask(int(n), anc.numpy(), view))
    col = torch.arange(view, device=anc.device)
    rel = col - n  # [view] tree node index each slot would hold
    in_tree = (rel >= 0) & (rel < anc.shape[1])
    return (col < n)[None, :] | (anc[:, rel.clamp(0, anc.shape[1] - 1)] & in_tree[None, :])
