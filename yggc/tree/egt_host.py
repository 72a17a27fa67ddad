"""EGT growth (egt.py) in NumPy, for eager CPU decoding (see host.py).

A state is egt.EGTState's tensor fields as NumPy arrays, by field name. Every function returns new arrays and
leaves its input untouched, as the torch code does. The drafter's top-k over the vocabulary stays in torch
(egt.offered_children); what is here is the small pool and tree bookkeeping. The W best candidates are taken
with a stable sort, so ties go to the earlier pool slot: the order egt_grow's stable=True gives, and one of
the orders torch.topk may give.
"""
from __future__ import annotations

import numpy as np

Arrays = dict[str, np.ndarray]


def init(root_token: int, D: int, W: int, k: int, dtype: np.dtype = np.float32) -> Arrays:
    """egt.egt_init: a fresh EGT holding only the root."""
    n, p = 1 + D * W, D * W * k
    tokens = np.zeros(n, np.int64)
    tokens[0] = root_token
    valid = np.zeros(W, dtype=bool)
    valid[0] = True
    return {"tokens": tokens, "parents": np.full(n, -1, np.int64), "depth": np.zeros(n, np.int64),
            "cum_logp": np.zeros(n, dtype), "anc": np.eye(n, dtype=bool), "pool_logp": np.full(p, -np.inf, dtype),
            "pool_parent": np.zeros(p, np.int64), "pool_token": np.zeros(p, np.int64),
            "newest": np.zeros(W, np.int64), "valid": valid, "step": np.zeros((), np.int64)}


def root_step(s: Arrays, top_logp: np.ndarray, top_tok: np.ndarray, W: int, k: int) -> Arrays:
    """egt.egt_root_step on a fresh state, given the root's offered children [k] (best first)."""
    out = {f: s[f].copy() for f in ("tokens", "parents", "depth", "cum_logp", "anc", "pool_logp", "pool_token")}
    new = slice(1, W + 1)
    out["tokens"][new], out["parents"][new], out["depth"][new] = top_tok[:W], 0, 1
    out["cum_logp"][new] = top_logp[:W]
    out["anc"][new, 0] = True
    out["pool_logp"][W:k] = top_logp[W:]
    out["pool_token"][: W * k] = np.tile(top_tok, W)
    return {**s, **out, "newest": np.arange(1, W + 1), "valid": np.ones(W, dtype=bool),
            "step": np.asarray(s["step"] + 1)}


def frontier(s: Arrays) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """egt.egt_frontier: the newest nodes' ids, tokens, depths and ancestor rows."""
    ids = s["newest"]
    return ids, s["tokens"][ids], s["depth"][ids], s["anc"][ids]


def grow(s: Arrays, cand: np.ndarray, cand_tokens: np.ndarray, W: int, k: int) -> Arrays:
    """egt.egt_grow: candidates cand [W, k] (cumulative log-probs; padding rows' are ignored) with tokens
    [W, k] join the pool, and the W best in the pool become nodes."""
    step = int(s["step"])
    slots = slice(step * W * k, (step + 1) * W * k)
    pool_logp, pool_parent, pool_token = s["pool_logp"].copy(), s["pool_parent"].copy(), s["pool_token"].copy()
    pool_logp[slots] = np.where(s["valid"][:, None], cand, -np.inf).reshape(-1)
    pool_parent[slots] = np.repeat(s["newest"], k)
    pool_token[slots] = cand_tokens.reshape(-1)
    best = np.argsort(-pool_logp, kind="stable")[:W]
    best_logp = pool_logp[best]
    pool_logp[best] = -np.inf  # each candidate used once
    new_ids = 1 + step * W + np.arange(W)
    par = pool_parent[best]
    out = {f: s[f].copy() for f in ("tokens", "parents", "depth", "cum_logp", "anc")}
    out["tokens"][new_ids], out["parents"][new_ids] = pool_token[best], par
    out["depth"][new_ids], out["cum_logp"][new_ids] = s["depth"][par] + 1, best_logp
    out["anc"][new_ids] = s["anc"][par]
    out["anc"][new_ids, new_ids] = True
    return {**s, **out, "pool_logp": pool_logp, "pool_parent": pool_parent, "pool_token": pool_token,
            "newest": new_ids, "valid": np.ones(W, dtype=bool), "step": np.asarray(s["step"] + 1)}
