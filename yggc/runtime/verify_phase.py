"""Greedy verification as one fixed-shape module: prune to V nodes, verify, accept, compact the KV.

Everything after drafting runs in one compiled call: top-V pruning (cum_logp only falls along a
path, so the top V form a rooted subtree), the tree-masked verifier forward, the greedy walk (an
accepted node's token is its parent's argmax and its parent is accepted; D rounds settle it) and
the move of the accepted path's K/V to the slots after the root. Eagerly on the CPU (O2, around the verifier's
package) the same work runs in the kernel library's tree ops, in one call with the package where its runner has
it (forward_ops), else in Python (forward_host).
"""
from __future__ import annotations

import torch
from torch import nn

from ..artifacts import kernel_ops
from ..tree import host, verify_host
from ..tree.sampling import row_argmax
from ..tree.token_tree import tree_mask


def prune_top(tokens, parents, depth, cum_logp, anc, V: int):
    """Root + the V best nodes by cum_logp (ties: shallower first), parents before children.

    -> kept ids [V+1], subtree parents [V+1] (-1 at the root), depth [V+1], ancestor rows [V+1, V+1]."""
    N = tokens.shape[0]
    ids = torch.arange(1, N, device=tokens.device)
    by_depth = torch.argsort(depth[1:], stable=True)
    order = by_depth[torch.argsort(-cum_logp[1:][by_depth], stable=True)]
    top = ids[order[:V]]
    top = top[torch.argsort(depth[top] * N + top)]
    kept = torch.cat([ids.new_zeros(1), top])
    remap = torch.full((N,), -1, dtype=torch.long, device=tokens.device).index_copy(
        0, kept, torch.arange(V + 1, device=tokens.device))
    par = parents[kept]
    sub_par = torch.where(par >= 0, remap[par.clamp(min=0)], par)
    return kept, sub_par, depth[kept], anc[kept][:, kept]


def greedy_accept(sub_tokens, sub_par, sub_depth, best, max_depth: int):
    """-> deepest accepted row [] (0 = only the root) given the verifier argmax per row `best` [V+1]."""
    is_root = sub_par < 0
    match = (sub_tokens == best[sub_par.clamp(min=0)]) & ~is_root
    acc = is_root
    for _ in range(max_depth):
        acc = is_root | (match & acc[sub_par.clamp(min=0)])
    return torch.argmax(torch.where(acc, sub_depth, -1))


class GreedyVerifyPhase(nn.Module):
    hands_over_rows = False  # score() hands over per-row tensors (FeatureVerifyPhase: the verifier's features)

    def __init__(self, verifier: nn.Module, depth: int, verify: int):
        super().__init__()
        self.verifier, self.depth, self.verify = verifier, depth, verify
        # run eagerly with keep_path_logits set, a call leaves the logits of the accepted path's rows, root first
        # ([min(D, V)+1, vocab]; row i chose emitted token i): what logprobs are computed from
        self.keep_path_logits, self.path_logits = False, None

    def score(self, tokens, positions, slots, mask) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """The verifier on the kept rows -> (logits [R, vocab], per-row tensors the drafter needs: none here)."""
        return self.verifier(tokens, positions, slots, mask), ()

    def forward(self, tokens, parents, depth, cum_logp, anc, n, view_slots):
        """Tree [N] from the draft phase, n [] = root slot, view_slots [S] (its length = cache view)
        -> emitted tokens [D+1] (the accepted path, then the bonus at index k, then padding),
        info [3] = (accepted count k, last accepted tree id, deepest verified depth),
        the next root's logits [vocab] (the bonus token's row; the depth predictor reads them),
        drafter K/V moves [2, D] for its next draft call (moves past k land beyond the new end),
        then score()'s per-row tensors at the path rows (root first). Eager on the CPU the tree work runs in the
        kernel library's tree ops where the process has them, else in tree/verify_host.py (forward_cpu), with the
        same results."""
        if host.eager_cpu(tokens):
            return self.forward_cpu(tokens, parents, depth, cum_logp, anc, int(n), view_slots.shape[0])
        V, D = self.verify, self.depth
        kept, sub_par, sub_depth, sub_anc = prune_top(tokens, parents, depth, cum_logp, anc, V)
        rows = torch.arange(V + 1, device=tokens.device)
        mask = tree_mask(n, sub_anc, view_slots.shape[0])
        logits, per_row = self.score(tokens[kept], n + sub_depth, n + rows, mask)  # [V+1, vocab]
        best = row_argmax(logits)  # [V+1]
        deepest = greedy_accept(tokens[kept], sub_par, sub_depth, best, D)
        on_path = sub_anc[deepest]  # [V+1] the accepted rows, root included
        path = torch.argsort(torch.where(on_path, sub_depth, D + 1 + rows))[: min(D, V) + 1]
        # move the accepted rows' K/V to the slots after the root; extra moves land past the new end
        dst = n + 1 + torch.arange(path.shape[0] - 1, device=tokens.device)
        self.verifier.move_kv(n + path[1:], dst)
        k = sub_depth[deepest]
        path_ids = kept[path]  # tree ids, root first
        emit = torch.where(rows[: path.shape[0]] == k, best[deepest], tokens[torch.roll(path_ids, -1)])
        info = torch.stack([k, path_ids[k], sub_depth.max()])
        root = logits.index_select(0, deepest.view(1))[0]
        if self.keep_path_logits:
            self.path_logits = logits[path]
        return emit, info, root, torch.stack([n + path_ids[1:], dst]), *(t[path] for t in per_row)

    def forward_cpu(self, tokens, parents, depth, cum_logp, anc, n: int, view: int):
        """forward() eagerly on the CPU, n and the view (view_slots' length) as ints: through the kernel library's
        tree ops where the process has them, else in Python."""
        if kernel_ops.has_tree_ops():
            return self.forward_ops(tokens, parents, depth, cum_logp, anc, n, view)
        return self.forward_host(tokens, parents, depth, cum_logp, anc, n, view)

    def forward_ops(self, tokens, parents, depth, cum_logp, anc, n: int, view: int):
        """forward() in one call where the verifier's package runner has it (a bundle's CompiledModel.verify_tree:
        the tree ops and the verifier's package inside), else through the two tree ops around the verifier."""
        fused = getattr(self.verifier, "verify_tree", None)
        out = None if fused is None or self.keep_path_logits else fused(
            (tokens, parents, depth, cum_logp, anc), n, view, self.verify, self.depth, self.hands_over_rows)
        if out is None:
            out = self.accept_around(tokens, parents, depth, cum_logp, anc, n, view)
        emit, info, root_logits, drafter_moves, _path, _moves, *path_rows = out
        return emit, info, root_logits, drafter_moves, *path_rows

    def accept_around(self, tokens, parents, depth, cum_logp, anc, n: int, view: int) -> list[torch.Tensor]:
        """The kernel library's tree ops (kernels/verify_tree.cpp) each side of score() -> verify_tree_accept's
        outputs; the K/V moved by the verifier's move_kv."""
        sub_tokens, positions, slots, mask, rows, sub_anc = kernel_ops.verify_tree_inputs(
            tokens, parents, depth, cum_logp, anc, n, view, self.verify)
        logits, per_row = self.score(sub_tokens, positions, slots, mask)  # [V+1, vocab]
        out = kernel_ops.verify_tree_accept(logits, sub_tokens, rows, sub_anc, n, self.depth, None, per_row)
        self.verifier.move_kv(out[5][0], out[5][1])
        if self.keep_path_logits:
            self.path_logits = logits[out[4]]
        return out

    def forward_host(self, tokens, parents, depth, cum_logp, anc, n: int, view: int):
        """forward() with its tree work in tree/verify_host.py's functions (n and the view as ints). Its
        K/V moves past the accepted rows are no-ops (dst onto dst), where forward moves rejected rows' K/V past
        the new end: no later call reads those slots before it writes them."""
        V, D = self.verify, self.depth
        kept, sub_par, sub_depth, sub_anc = verify_host.prune_top(parents.tolist(), depth.tolist(), cum_logp.tolist(),
                                                                  anc.numpy(), V)
        tok = tokens.tolist()
        sub_tok = [tok[i] for i in kept]
        inputs = (torch.tensor(sub_tok), torch.tensor([n + d for d in sub_depth]), torch.arange(n, n + V + 1),
                  torch.from_numpy(host.tree_mask(n, sub_anc, view)))
        logits, per_row = self.score(*inputs)  # [V+1, vocab]
        best = row_argmax(logits).tolist()  # [V+1]
        deepest = verify_host.deepest_accepted(sub_tok, sub_par, sub_depth, best)
        path = verify_host.path_rows(sub_anc[deepest].tolist(), sub_depth, min(D, V) + 1, D)
        k, path_ids = sub_depth[deepest], [kept[r] for r in path]
        # the moves past the accepted k rows become no-ops (forward moves them past the new end)
        dst = [n + 1 + i for i in range(len(path) - 1)]
        self.verifier.move_kv(torch.tensor([n + r if i < k else d for i, (r, d) in enumerate(zip(path[1:], dst))]),
                              torch.tensor(dst))
        emit = [best[deepest] if i == k else tok[path_ids[(i + 1) % len(path)]] for i in range(len(path))]
        drafter_src = [n + t if i < k else d for i, (t, d) in enumerate(zip(path_ids[1:], dst))]
        path_t = torch.tensor(path)
        if self.keep_path_logits:
            self.path_logits = logits[path_t]
        return (torch.tensor(emit), torch.tensor([k, path_ids[k], max(sub_depth)]), logits[deepest],
                torch.tensor([drafter_src, dst]),
                *(t[path_t] for t in per_row))
