"""Acceptance statistics from calibration decoding, for every tree shape at once (no model calls here).

A calibration run decodes greedily with the largest tree of one width W (depth D_max, all D_max*W
nodes verified) and keeps each iteration's draft tree with the verifier's own continuation after its
root (greedy output is lossless, so the decoded sequence *is* that continuation). Two facts make one
run price every smaller shape of the same width exactly:
  - EGT nodes are numbered in growth order, so the first 1 + D*W nodes are the depth-D tree;
  - top-V pruning keeps a prefix of one ranking (`prune.rank_nodes`), so the accepted length under
    every V follows from the ranks along the single path that matches the continuation.
At T > 0 (a tree sampled for recursive rejection sampling) a sample carries, instead of a continuation,
each node's probability of being accepted (`recursive_rejection.acceptance_probs`): a node's chance
depends only on the draws before it at its parent, and truncation and pruning keep a prefix of each
node's draws, so the same two facts price every smaller shape by expectation.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from ..tree.prune import rank_nodes
from ..tree.token_tree import TokenTree
from .shape import TreeShape


@dataclass
class TreeSample:
    tree: TokenTree           # a depth-D_max EGT of width W as drafted (node ids in growth order)
    width: int
    continuation: list[int]   # the verifier's next D_max tokens after the tree's root (greedy)
    features: torch.Tensor | None = None  # [F] the root's features for the depth predictor
    path_prob: torch.Tensor | None = None  # [n_nodes] P(the walk accepts each node), a tree sampled at T > 0
    # a chain sampled at T > 0: [D + 1] expected drafts accepted when its first v are verified by block verification,
    # v = 0..D (which accepts more than the token-level walk path_prob prices)
    chain_accepted: torch.Tensor | None = None


def node_weights(sample: TreeSample) -> torch.Tensor:
    """[n_nodes] float64: how much each node counts as accepted: its acceptance probability at T > 0; greedy,
    1 on the path matching the continuation (and the root), else 0."""
    if sample.path_prob is not None:
        return sample.path_prob.to(torch.float64)
    weights = torch.zeros(sample.tree.n_nodes, dtype=torch.float64)
    weights[[0, *matching_path(sample.tree, sample.continuation)]] = 1.0
    return weights


def truncate(tree: TokenTree, n_nodes: int) -> TokenTree:
    """The tree as it stood after its first n_nodes - 1 grown nodes."""
    return TokenTree(tree.tokens, tree.parents, tree.depth, tree.cum_logp, n_nodes)


def matching_path(tree: TokenTree, continuation: list[int]) -> list[int]:
    """Node ids of the longest root path whose tokens equal the continuation (siblings differ in token)."""
    tokens, parents = tree.tokens[: tree.n_nodes].tolist(), tree.parents[: tree.n_nodes].tolist()
    path, node = [], 0
    for want in continuation:
        child = next((i for i in range(1, tree.n_nodes) if parents[i] == node and tokens[i] == want), None)
        if child is None:
            break
        path.append(child)
        node = child
    return path


def accepted_by_budget(tree: TokenTree, weights: torch.Tensor) -> list[float]:
    """[V] -> (expected) accepted drafts when the tree is pruned to its top V nodes, for V = 0..n_nodes-1;
    weights from node_weights (the tree may be a truncation: only its first n_nodes count)."""
    ranked = rank_nodes(tree).tolist()
    # ranks grow along a path, so budget V keeps exactly the nodes ranked below V, each with its weight
    return [0.0, *itertools.accumulate(float(weights[node]) for node in ranked)]


def tokens_per_iteration(samples: list[TreeSample], max_depth: int) -> dict[TreeShape, float]:
    """Mean tokens per iteration (accepted + the bonus token) of every (D <= max_depth, W, V <= D*W)."""
    sums: dict[TreeShape, float] = {}
    counts: dict[int, int] = {}
    for s in samples:
        counts[s.width] = counts.get(s.width, 0) + 1
        weights = node_weights(s)
        for depth in range(1, max_depth + 1):
            accepted = (s.chain_accepted[: depth + 1].tolist() if s.chain_accepted is not None
                        else accepted_by_budget(truncate(s.tree, 1 + depth * s.width), weights))
            for verify in range(1, depth * s.width + 1):
                shape = TreeShape(depth, s.width, verify)
                sums[shape] = sums.get(shape, 0.0) + accepted[verify] + 1
    return {shape: total / counts[shape.width] for shape, total in sums.items()}


def acceptance_rates(samples: list[TreeSample]) -> list[float]:
    """[d] -> P(the d+1-th draft is accepted | the first d were) for full trees, the calibration's summary.
    A path the tree never grew that deep counts as a rejection: this is the acceptance of the tree as drafted."""
    reached, accepted = [], []
    for s in samples:
        weights, depth = node_weights(s), s.tree.depth[: s.tree.n_nodes]
        for d in range(max(len(s.continuation), int(depth.max()))):
            if d >= len(reached):
                reached.append(0.0)
                accepted.append(0.0)
            reached[d] += float(weights[depth == d].sum())
            accepted[d] += float(weights[depth == d + 1].sum())
    return [a / r if r else 0.0 for a, r in zip(accepted, reached)]


def as_tree_sample(tree: TokenTree, width: int, continuation: list[int],
                   features: torch.Tensor | None = None, path_prob: torch.Tensor | None = None,
                   chain_accepted: torch.Tensor | None = None) -> TreeSample:
    """A host copy of a drafted tree (the decoder reuses its device tensors)."""
    copy = TokenTree(tree.tokens.cpu().clone(), tree.parents.cpu().clone(), tree.depth.cpu().clone(),
                     tree.cum_logp.cpu().clone(), tree.n_nodes)
    return TreeSample(copy, width, continuation, None if features is None else features.cpu().float().clone(),
                      path_prob, chain_accepted)
