"""Prune a drafted tree to V verify nodes: the rooted connected subtree of V non-root nodes (plus the
root) with the largest sum of node values (yggdrasil.txt, 4.2 "verification width pruning").

A node's value is normally exp(cum_logp), the draft-model estimate of the probability that the node is
accepted, so the sum is the expected accepted length. Both functions return node ids [V+1]: the root
(id 0) first, then the kept nodes with parents before children (by depth, then id), so a verifier call
can lay them out in consecutive cache slots and `TokenTree.subtree(ids)` can re-index them.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from .token_tree import TokenTree


def _topo(ids: torch.Tensor, depth: torch.Tensor, n: int) -> torch.Tensor:
    """ids [M] sorted by (depth, id): parents always precede their children."""
    return ids[torch.argsort(depth[ids] * n + ids)]


def rank_nodes(tree: TokenTree) -> torch.Tensor:
    """Non-root node ids [n_nodes-1], best first: a node never ranks after its own child, so every
    prefix of the ranking is a rooted subtree (what `prune_topk` keeps for any V)."""
    n = tree.n_nodes
    parents, depth = tree.parents[:n], tree.depth[:n]
    # key = min cum_logp over the path, so a child never outranks its parent even if rounding made logp > 0
    key = tree.cum_logp[:n].clone()
    for _ in range(int(depth.max())):
        key = torch.where(parents >= 0, torch.minimum(key, key[parents.clamp(min=0)]), key)
    ids = torch.arange(1, n, device=parents.device)
    # rank by key desc, then depth asc (a parent tied with its child wins), then id asc
    order = torch.argsort(depth[1:], stable=True)
    order = order[torch.argsort(-key[1:][order], stable=True)]
    return ids[order]


def prune_topk(tree: TokenTree, V: int) -> torch.Tensor:
    """Root + the V nodes with the highest cum_logp -> ids [V+1]; optimal whenever values fall along paths."""
    n = tree.n_nodes
    if not 0 <= V <= n - 1:
        raise ValueError(f"cannot keep V={V} nodes of a tree with {n - 1} non-root nodes")
    kept = rank_nodes(tree)[:V]
    return torch.cat([kept.new_zeros(1), _topo(kept, tree.depth[:n], n)])


def prune_dp(parents: torch.Tensor, values: torch.Tensor, V: int) -> torch.Tensor:
    """Tree-knapsack DP for any values: parents [N] (root 0 has -1; other -1 nodes are ignored),
    values [N] (root's ignored) -> ids [V+1] of the best rooted connected subtree. O(N*V) merges."""
    par, val = parents.tolist(), values.tolist()
    n, cap = len(par), V + 1
    kids: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        if par[i] >= 0:
            kids[par[i]].append(i)
    order = [0]
    for u in order:  # BFS; the list grows while we walk it
        order.extend(kids[u])
    best: list[list[float]] = [[] for _ in range(n)]   # best[u][s]: max value of s nodes rooted at u
    split: list[list[list[int]]] = [[] for _ in range(n)]  # split[u][c][s]: nodes given to child c
    for u in reversed(order):  # children before parents
        f = [float("-inf"), 0.0 if u == 0 else val[u]]
        for c in kids[u]:
            f, choice = _merge(f, best[c], cap)
            split[u].append(choice)
        best[u] = f
    if len(best[0]) - 1 < cap:
        raise ValueError(f"cannot keep V={V} nodes of a tree with {len(best[0]) - 2} non-root nodes")
    keep, stack = [], [(0, cap)]
    while stack:  # walk the recorded splits back down
        u, s = stack.pop()
        keep.append(u)
        for ci in reversed(range(len(kids[u]))):
            sc = split[u][ci][s]
            if sc:
                stack.append((kids[u][ci], sc))
                s -= sc
    depth = [0] * n
    for u in order[1:]:
        depth[u] = depth[par[u]] + 1
    ids = torch.tensor(sorted(keep, key=lambda i: (depth[i], i)), dtype=torch.long, device=parents.device)
    return ids


def _merge(f: list[float], g: list[float], cap: int) -> tuple[list[float], list[int]]:
    """Knapsack-merge a child's table g into its parent's table f (index = node count, capped)."""
    size = min(len(f) - 1 + len(g) - 1, cap)
    new = f[: size + 1] + [float("-inf")] * (size + 1 - len(f))
    choice = [0] * (size + 1)
    for su in range(1, min(len(f) - 1, cap) + 1):
        for sc in range(1, min(len(g) - 1, cap - su) + 1):
            v = f[su] + g[sc]
            if v > new[su + sc]:
                new[su + sc], choice[su + sc] = v, sc
    return new, choice


def best_verify_count(values: list[float], iteration_ms: Callable[[int], float]) -> int:
    """How many of the ranked nodes to verify: values [M] (each node's chance of being accepted, best first, every
    prefix a rooted subtree), iteration_ms(r) the cost of an iteration verifying r nodes -> the r in 0..M that
    maximises expected tokens per ms, (1 + sum of the first r values) / iteration_ms(r) (yggdrasil.txt Eq. 3 for
    one tree: the bonus token is always had)."""
    best, best_rate, tokens = 0, 1.0 / iteration_ms(0), 1.0
    for r, value in enumerate(values, start=1):
        tokens += value
        rate = tokens / iteration_ms(r)
        if rate > best_rate:
            best, best_rate = r, rate
    return best
