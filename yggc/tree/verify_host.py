"""The greedy verify phase's tree work (runtime/verify_phase.py) for eager CPU decoding (see host.py): the same
results as prune_top and greedy_accept, in plain Python over a tree's few nodes: right after a package call has
streamed the weights, each NumPy call costs many times what it does in a warm loop, and list operations on a few
nodes cost less (docs/benchmarks/host-costs.md)."""
from __future__ import annotations

import numpy as np


def prune_top(parents: list[int], depth: list[int], cum_logp: list[float], anc: np.ndarray, V: int
              ) -> tuple[list[int], list[int], list[int], np.ndarray]:
    """verify_phase.prune_top: the root + the V best nodes by cum_logp (ties: shallower, then lower id), parents
    before children. [N] lists, anc [N, N] -> kept ids [V+1], subtree parents [V+1] (-1 at the root),
    depth [V+1], ancestor rows [V+1, V+1]."""
    ranked = sorted(range(1, len(parents)), key=lambda i: (-cum_logp[i], depth[i]))  # stable: then by id
    kept = [0, *sorted(ranked[:V], key=lambda i: (depth[i], i))]
    row = {node: r for r, node in enumerate(kept)}
    sub_par = [row.get(parents[i], -1) for i in kept]  # the root's parent, -1, is no row
    return kept, sub_par, [depth[i] for i in kept], anc[np.ix_(kept, kept)]


def deepest_accepted(sub_tokens: list[int], sub_par: list[int], sub_depth: list[int], best: list[int]) -> int:
    """verify_phase.greedy_accept: a row is accepted when its token is its parent's argmax `best` and its parent
    is accepted (rows come parents first) -> the deepest accepted row, the first of its depth (0 = the root)."""
    accepted, deepest = [True] * len(sub_par), 0
    for r in range(1, len(sub_par)):
        parent = sub_par[r]
        accepted[r] = accepted[parent] and sub_tokens[r] == best[parent]
        if accepted[r] and sub_depth[r] > sub_depth[deepest]:
            deepest = r
    return deepest


def path_rows(on_path: list[bool], sub_depth: list[int], length: int, max_depth: int) -> list[int]:
    """The accepted rows root first, then the other rows in order, cut to `length` (what the verify phase
    moves: the extra moves land past the new end)."""
    key = [depth if on else max_depth + 1 + r for r, (on, depth) in enumerate(zip(on_path, sub_depth))]
    return sorted(range(len(key)), key=key.__getitem__)[:length]
