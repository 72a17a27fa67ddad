"""The greedy verify phase's tree work (runtime/verify_phase.py) in NumPy, for eager CPU decoding (see host.py):
the same results as prune_top and greedy_accept, with a few NumPy calls each."""
from __future__ import annotations

import numpy as np


def prune_top(parents: np.ndarray, depth: np.ndarray, cum_logp: np.ndarray, anc: np.ndarray, V: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """verify_phase.prune_top: the root + the V best nodes by cum_logp (ties: shallower, then lower id), parents
    before children. [N] arrays, anc [N, N] -> kept ids [V+1], subtree parents [V+1] (-1 at the root),
    depth [V+1], ancestor rows [V+1, V+1]."""
    N = parents.shape[0]
    ids = np.arange(1, N)
    top = ids[np.lexsort((depth[1:], -cum_logp[1:]))[:V]]  # lexsort: last key first, stable
    top = top[np.argsort(depth[top] * N + top, kind="stable")]
    kept = np.concatenate((np.zeros(1, np.int64), top))
    remap = np.full(N, -1, np.int64)
    remap[kept] = np.arange(V + 1)
    par = parents[kept]
    sub_par = np.where(par >= 0, remap[np.maximum(par, 0)], par)
    return kept, sub_par, depth[kept], anc[np.ix_(kept, kept)]


def deepest_accepted(sub_tokens: np.ndarray, sub_par: np.ndarray, sub_depth: np.ndarray, best: np.ndarray) -> int:
    """verify_phase.greedy_accept: a row is accepted when its token is its parent's argmax `best` and its parent
    is accepted (rows come parents first) -> the deepest accepted row, the first of its depth (0 = the root)."""
    acc = np.zeros(sub_par.shape[0], dtype=bool)
    acc[0] = True
    hits = sub_tokens == best[np.maximum(sub_par, 0)]
    for r in range(1, sub_par.shape[0]):
        acc[r] = hits[r] and acc[sub_par[r]]
    return int(np.argmax(np.where(acc, sub_depth, -1)))


def path_rows(on_path: np.ndarray, sub_depth: np.ndarray, length: int, max_depth: int) -> np.ndarray:
    """The accepted rows root first, then the other rows in order, cut to `length` (what the verify phase
    moves: the extra moves land past the new end)."""
    rows = np.arange(on_path.shape[0])
    return np.argsort(np.where(on_path, sub_depth, max_depth + 1 + rows), kind="stable")[:length]
