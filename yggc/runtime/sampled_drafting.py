"""Drafting at T > 0 (SpeculativeDecoder's, eager around the drafter's forward): a chain or a tree of draws from
the drafter's distribution, whose rules (block verification, RRS, traversal) need the drafter's probabilities; or
the greedy-grown tree, verified by the point-mass rule."""
from __future__ import annotations

import torch

from ..tree.egt import egt_frontier, egt_init, egt_tree
from ..tree.sampled_egt import race_keys, sampled_egt_root_step, sampled_egt_step
from ..tree.sampling import SamplingParams, sample_index, target_probs
from ..tree.token_tree import TokenTree
from .draft import Draft


class SampledDrafting:
    """Mixin of SpeculativeDecoder: its T > 0 draft phases, through its root_logits and node_logits."""

    def draft_sampled(self, pending: list[int], n: int, params: SamplingParams, gen: torch.Generator) -> Draft:
        """T > 0: a sampled chain (W = 1), a sampled tree (rrs, traversal) or the greedy-grown tree (point-mass)."""
        if self.shape.width == 1:
            return self.draft_chain_sampled(pending, n, params, gen)
        if self.tree_rule.sampled:
            return self.draft_tree_sampled(pending, n, params, gen)
        return self.draft_tree(pending, n)

    def draft_tree_sampled(self, pending: list[int], n: int, params: SamplingParams, gen: torch.Generator) -> Draft:
        """T > 0: the EGT grown from draws of the drafter's distribution (sampled_egt), for recursive
        rejection sampling; eager, around the drafter's forward."""
        D, W, N = self.shape.depth, self.shape.width, self.shape.n_nodes
        view = self.layout.view(n + N)
        q = target_probs(self.root_logits(pending, n), params)  # [vocab]
        q_rows = torch.zeros(N, self.vocab)
        q_rows[0] = q
        state = sampled_egt_root_step(egt_init(pending[-1], D, W, self.vocab), q, race_keys(q, gen), self.rank_rates)
        for _ in range(D - 1):
            f = egt_frontier(state)
            logits = self.node_logits(f.tokens, state.parents[f.ids], f.ids, f.depth, f.mask, n, view)
            q = target_probs(logits, params)                     # [W, vocab]
            q_rows[state.newest] = q
            state = sampled_egt_step(state, q, race_keys(q, gen), self.rank_rates)
        tree = egt_tree(state)
        return Draft(tree, None, 1 + (D - 1) * W, state.anc, q_rows)

    def draft_chain_sampled(self, pending: list[int], n: int, params: SamplingParams,
                            gen: torch.Generator) -> Draft:
        """W = 1 at temperature > 0: each draft is SAMPLED from the drafter (the chain rules need it)."""
        D = self.shape.depth
        tree = TokenTree.from_root(pending[-1], 1 + D)
        q = torch.empty(D, self.vocab)
        logits = self.root_logits(pending, n)
        chain = torch.ones(1 + D, 1 + D, dtype=torch.bool).tril()  # [N, N] ancestor-or-self rows of a chain
        for d in range(1, D + 1):
            q[d - 1] = target_probs(logits, params)
            tree.tokens[d] = sample_index(q[d - 1], gen)
            tree.parents[d], tree.depth[d] = d - 1, d
            if d < D:
                node = torch.tensor([d])
                logits = self.node_logits(tree.tokens[node], node - 1, node, node, chain[node], n,
                                          self.layout.view(n + d + 1))[0]
        tree.n_nodes = 1 + D
        return Draft(tree, q, D, chain)
