"""Equal-Growth Tree (EGT) drafting with fixed depth D and width W (yggdrasil.txt, section 4.2).

Each draft step runs the drafter once on the W newest nodes and adds exactly W new nodes: the W best
candidates anywhere in the tree by cumulative log-probability. Candidates live in a fixed-size pool:
every expanded node offers its top-k children (k = W unless told), each (parent, token) pair once, so
siblings always carry distinct tokens. `egt_step` is fixed-shape tensor code with no data-dependent
Python branching, so it can be compiled once per (D, W, k, vocab).

Step 1 input: the root alone. Its W input rows are the root in slot 0 and W-1 copies of the root as
padding (same token, position and mask row, so attention stays well defined); `valid` marks slot 0
only and the padding rows' outputs are ignored. From step 2 on all W rows are the previous step's
new nodes. After D steps the tree holds 1 + D*W nodes; node ids follow creation order, and within
one step the W new nodes are sorted by descending cumulative log-prob.

With k = W a node can gain at most W children over the whole growth. k = D*W makes the step exactly
"W best children anywhere" (a node never gets more than D*W children, and the chosen children of a
node are always a best-first prefix of its ranking).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from . import egt_host, host
from .token_tree import TokenTree

LOGP_FLOOR = -1e4  # drafter log-probs are clamped here so a real candidate (even p=0) beats an empty pool slot (-inf)


@dataclass
class EGTState:
    tokens: torch.Tensor       # [N] long, N = 1 + D*W
    parents: torch.Tensor      # [N] long, -1 for root / not yet grown
    depth: torch.Tensor        # [N] long
    cum_logp: torch.Tensor     # [N] float
    anc: torch.Tensor          # [N, N] bool ancestor-or-self mask, kept incrementally
    pool_logp: torch.Tensor    # [P] float candidate cum log-prob, -inf when empty or used; P = D*W*k
    pool_parent: torch.Tensor  # [P] long candidate's parent node id
    pool_token: torch.Tensor   # [P] long candidate's token
    newest: torch.Tensor       # [W] long ids of the nodes the next drafter call runs on
    valid: torch.Tensor        # [W] bool, False for step 1's padding rows
    step: torch.Tensor         # [] long, draft steps done so far
    D: int
    W: int
    k: int


STATE_TENSORS = ("tokens", "parents", "depth", "cum_logp", "anc", "pool_logp", "pool_parent", "pool_token", "newest",
                 "valid", "step")


@dataclass
class Frontier:
    ids: torch.Tensor     # [W] long tree ids of the newest nodes (padding rows point at the root)
    tokens: torch.Tensor  # [W] long their tokens (drafter input ids)
    depth: torch.Tensor   # [W] long their depths (RoPE position = prefix position of root + depth)
    mask: torch.Tensor    # [W, N] bool their ancestor-or-self rows over tree slots
    valid: torch.Tensor   # [W] bool, False for padding rows


def host_arrays(state: EGTState) -> egt_host.Arrays:
    """The state's tensors as NumPy arrays (shared memory), for egt_host."""
    return {name: getattr(state, name).numpy() for name in STATE_TENSORS}


def from_host(arrays: egt_host.Arrays, D: int, W: int, k: int) -> EGTState:
    """An EGTState over egt_host's arrays (every tensor field; shared memory)."""
    return EGTState(**{name: torch.from_numpy(np.asarray(arrays[name])) for name in STATE_TENSORS}, D=D, W=W, k=k)


def offer_width(W: int, k: int | None, vocab: int) -> int:
    """Children offered per expanded node: k (default W), at most the vocabulary, at least W."""
    k = min(W if k is None else k, vocab)
    if not 1 <= W <= k:
        raise ValueError(f"need 1 <= W <= min(k, vocab), got W={W}, k={k}, vocab={vocab}")
    return k


def egt_init(root_token: int, D: int, W: int, vocab: int, k: int | None = None,
             dtype: torch.dtype = torch.float32, device: torch.device | str | None = None) -> EGTState:
    """A fresh EGT holding only the root; `k` children offered per expanded node (default W)."""
    k = offer_width(W, k, vocab)
    n, p = 1 + D * W, D * W * k
    tree = TokenTree.from_root(root_token, n, dtype, device)
    anc = torch.eye(n, dtype=torch.bool, device=device)
    newest = torch.zeros(W, dtype=torch.long, device=device)  # slot 0 = root, the rest pad with the root
    valid = torch.zeros(W, dtype=torch.bool, device=device)
    valid[0] = True
    return EGTState(tree.tokens, tree.parents, tree.depth, tree.cum_logp, anc,
                    torch.full((p,), float("-inf"), dtype=dtype, device=device),
                    torch.zeros(p, dtype=torch.long, device=device),
                    torch.zeros(p, dtype=torch.long, device=device),
                    newest, valid, torch.zeros((), dtype=torch.long, device=device), D, W, k)


def egt_frontier(state: EGTState) -> Frontier:
    """What the next drafter call needs: the W newest nodes' ids, tokens, depths and mask rows."""
    if host.eager_cpu(state.newest):
        return Frontier(*map(torch.from_numpy, egt_host.frontier(host_arrays(state))), state.valid)
    ids = state.newest
    return Frontier(ids, state.tokens[ids], state.depth[ids], state.anc[ids], state.valid)


def offered_children(state: EGTState, logp: torch.Tensor,
                     ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """logp [..., vocab] -> each row's top-k (log-prob, token) [..., k]: the children a node offers. ids [Vd]:
    the token of each column where logp covers a sub-vocabulary [..., Vd] (an EAGLE-3 head's draft vocabulary).
    The floor is applied after the top-k (the same values, without clamping every log-prob of the vocabulary)."""
    top_logp, top_tok = logp.topk(state.k, dim=-1)
    return top_logp.to(state.pool_logp.dtype).clamp(min=LOGP_FLOOR), top_tok if ids is None else ids[top_tok]


def egt_step(state: EGTState, logp: torch.Tensor, ids: torch.Tensor | None = None) -> EGTState:
    """One draft step: logp [W, vocab] = drafter log-probs for the frontier rows (ids: as offered_children);
    returns the grown state."""
    top_logp, top_tok = offered_children(state, logp, ids)                                   # [W, k]
    if host.eager_cpu(logp):
        a = host_arrays(state)
        cand = a["cum_logp"][a["newest"]][:, None] + top_logp.numpy()
        return from_host(egt_host.grow(a, cand, top_tok.numpy(), state.W, state.k), state.D, state.W, state.k)
    return egt_grow(state, state.cum_logp[state.newest].unsqueeze(1) + top_logp, top_tok)  # padding rows offer nothing


def grow_from_root(state: EGTState, cand: torch.Tensor, cand_tokens: torch.Tensor, stable: bool = False) -> EGTState:
    """Step 1, whose frontier is the root repeated W times (rows 1.. are padding): the root's candidates
    cand, cand_tokens [k], computed once, stand for every row (the root's cumulative log-prob is 0)."""
    return egt_grow(state, cand.expand(state.W, -1), cand_tokens.expand(state.W, -1), stable)


def egt_root_step(state: EGTState, root_logp: torch.Tensor, ids: torch.Tensor | None = None) -> EGTState:
    """egt_step on a fresh state's root log-probs [vocab] (the root repeated W times), built directly: the
    pool is empty, so the root's W best children become nodes 1..W in rank order and its other offered
    children (k > W) take the pool slots W..k-1, where egt_step would leave them (the padding rows' slots hold
    the same tokens at -inf, as there). ~25 tensor ops, not ~60."""
    W, k = state.W, state.k
    top_logp, top_tok = offered_children(state, root_logp, ids)  # [k] best first
    if host.eager_cpu(root_logp):
        return from_host(egt_host.root_step(host_arrays(state), top_logp.numpy(), top_tok.numpy(), W, k), state.D, W, k)
    new = slice(1, W + 1)
    tokens, parents, depth = state.tokens.clone(), state.parents.clone(), state.depth.clone()
    cum_logp, anc = state.cum_logp.clone(), state.anc.clone()
    tokens[new], parents[new], depth[new], cum_logp[new] = top_tok[:W], 0, 1, top_logp[:W]
    anc[new, 0] = True
    pool_logp, pool_token = state.pool_logp.clone(), state.pool_token.clone()
    pool_logp[W:k], pool_token[: W * k] = top_logp[W:], top_tok.repeat(W)
    return EGTState(tokens=tokens, parents=parents, depth=depth, cum_logp=cum_logp, anc=anc, pool_logp=pool_logp,
                    pool_parent=state.pool_parent, pool_token=pool_token,
                    newest=torch.arange(1, W + 1, device=tokens.device), valid=torch.ones_like(state.valid),
                    step=state.step + 1, D=state.D, W=W, k=k)


def egt_from_root(root_token: torch.Tensor, root_logits: torch.Tensor, D: int, W: int, vocab: int,
                  ids: torch.Tensor | None = None) -> EGTState:
    """A fresh EGT grown one step from a root given as tensors, as the compiled draft phases hold it:
    root_token [1] long, root_logits [vocab] (the drafter's, at the root; ids: as offered_children)."""
    if host.eager_cpu(root_token):
        k = offer_width(W, None, vocab)
        state = from_host(egt_host.init(int(root_token), D, W, k), D, W, k)
    else:
        state = egt_init(0, D, W, vocab, device=root_token.device)
        state.tokens = state.tokens.index_copy(0, root_token.new_zeros(1), root_token)
    return egt_root_step(state, torch.log_softmax(root_logits, -1), ids)


def egt_grow(state: EGTState, cand: torch.Tensor, cand_tokens: torch.Tensor, stable: bool = False) -> EGTState:
    """Add the frontier's candidates cand [W, k] (cumulative log-probs) with tokens [W, k] to the pool and
    make the W best in the pool the new nodes. stable=True breaks ties by pool order (torch.topk may not)."""
    W, k = state.W, state.k
    if host.eager_cpu(cand):  # always stable
        return from_host(egt_host.grow(host_arrays(state), cand.numpy(), cand_tokens.numpy(), W, k), state.D, W, k)
    dev = cand.device
    cand = torch.where(state.valid.unsqueeze(1), cand, torch.full_like(cand, float("-inf")))
    slots = state.step * (W * k) + torch.arange(W * k, device=dev)                            # [W*k]
    pool_logp = state.pool_logp.index_copy(0, slots, cand.reshape(-1))
    pool_parent = state.pool_parent.index_copy(0, slots, state.newest.repeat_interleave(k))
    pool_token = state.pool_token.index_copy(0, slots, cand_tokens.reshape(-1))
    # the W best candidates anywhere in the tree become the new nodes
    if stable:
        best_logp, order = torch.sort(pool_logp, descending=True, stable=True)
        best_logp, best = best_logp[:W], order[:W]                                            # [W]
    else:
        best_logp, best = pool_logp.topk(W)                                                   # [W]
    pool_logp = pool_logp.index_fill(0, best, float("-inf"))                                  # each candidate used once
    new_ids = 1 + state.step * W + torch.arange(W, device=dev)                                # [W]
    par = pool_parent[best]
    anc_rows = state.anc[par]                                                                 # [W, N] parent's rows
    anc_rows[torch.arange(W, device=dev), new_ids] = True                                     # plus the self bit
    return EGTState(
        tokens=state.tokens.index_copy(0, new_ids, pool_token[best]),
        parents=state.parents.index_copy(0, new_ids, par),
        depth=state.depth.index_copy(0, new_ids, state.depth[par] + 1),
        cum_logp=state.cum_logp.index_copy(0, new_ids, best_logp),
        anc=state.anc.index_copy(0, new_ids, anc_rows),
        pool_logp=pool_logp, pool_parent=pool_parent, pool_token=pool_token,
        newest=new_ids, valid=torch.ones_like(state.valid), step=state.step + 1,
        D=state.D, W=W, k=k)


def egt_tree(state: EGTState) -> TokenTree:
    """The grown tree as a TokenTree (capacity 1 + D*W; 1 + step*W nodes in use)."""
    n_nodes = 1 + int(state.step) * state.W
    return TokenTree(state.tokens, state.parents, state.depth, state.cum_logp, n_nodes)


def egt_reference(root_token: int, logps: list[torch.Tensor], W: int, k: int | None = None
                  ) -> tuple[list[int], list[int], list[int], list[float]]:
    """Plain-Python EGT for tests: logps[s] [W, vocab] is the drafter output at step s (rows in frontier
    order; at step 0 only row 0 is used). Returns tokens, parents, depths, cum_logps of all nodes."""
    vocab = logps[0].shape[-1]
    k = min(W if k is None else k, vocab)
    tokens, parents, depth, cum = [root_token], [-1], [0], [0.0]
    pool: list[tuple[float, int, int]] = []  # (cum_logp, parent, token)
    frontier = [0]
    for logp in logps:
        for row, node in enumerate(frontier):
            vals = [max(float(v), LOGP_FLOOR) for v in logp[row].tolist()]
            for tok in sorted(range(vocab), key=lambda t: -vals[t])[:k]:
                pool.append((cum[node] + vals[tok], node, tok))
        pool.sort(key=lambda c: -c[0])
        chosen, pool = pool[:W], pool[W:]
        frontier = []
        for c, par, tok in chosen:
            frontier.append(len(tokens))
            tokens.append(tok)
            parents.append(par)
            depth.append(depth[par] + 1)
            cum.append(c)
    return tokens, parents, depth, cum
