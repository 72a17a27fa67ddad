"""EasySpec drafting (easyspec.txt): fuzzy tree steps, then bonus calibration (`yggc run --draft-parallel fuzzy`).

The tree steps run the drafter fuzzily (graphs/fuzzy.py: a layer set's attention layers at once, one per
rank), so the K/V they write are approximate. They are never kept: after each verification the accepted
tokens and the bonus token are fed again in one exact, layer-by-layer head step, which rewrites their
drafter K/V and yields the next root's exact distribution (section 3.2). The verifier and its rule are
untouched, so output stays the verifier's own.
"""
from __future__ import annotations

import torch

from ...artifacts.cache_layout import CacheLayout
from ...errors import YggcError
from ...graphs.fuzzy import FuzzyDrafter, fuzzy_groups
from ...graphs.llama import LlamaGraph
from ...plan.shape import TreeShape
from ...tree.rules import ChainRule, TreeRule
from ...tree.token_tree import tree_mask
from ..draft import Draft
from ..draft_phase import DraftPhase, align_vocab
from ..speculative import SpeculativeDecoder
from ..tp_processes import rank_world


class FuzzyDecoder(SpeculativeDecoder):
    """SpeculativeDecoder whose drafter runs EasySpec-fuzzily across tensor-parallel ranks (sets of attention
    layers at once); the accepted tokens' drafter K/V are recomputed exactly after each verification."""

    def __init__(self, verifier, drafter, layout: CacheLayout, shape: TreeShape, fuzzy: FuzzyDrafter,
                 chain_rule: ChainRule = ChainRule.BLOCK, tree_rule: TreeRule = TreeRule.RRS):
        self.fuzzy = fuzzy  # the make_draft_phase below reads it
        super().__init__(verifier, drafter, layout, shape, chain_rule, tree_rule=tree_rule)

    @property
    def head_width(self) -> int:
        return self.shape.depth + 1  # every accepted token (at most D) and the bonus token

    def make_draft_phase(self) -> torch.nn.Module:
        return DraftPhase(self.drafter, self.shape.depth, self.shape.width, self.vocab, self.layout.trash,
                          tree_drafter=self.fuzzy)

    def node_logits(self, tokens, parents, ids, depth, anc_rows, n: int, view: int) -> torch.Tensor:
        logits = self.fuzzy(tokens, n + depth, n + ids, tree_mask(n, anc_rows, view))
        return align_vocab(logits, self.vocab)

    def take_verify_outputs(self, handoff: list[torch.Tensor], path_rows: torch.Tensor | slice) -> None:
        """The accepted nodes' fuzzy K/V are dropped, not moved: the next head step recomputes them."""

    def next_pending(self, new: list[int], last_id: int, draft: Draft) -> list[int]:
        """Bonus calibration: the next head step feeds every accepted token and the bonus token."""
        return list(new)


def fuzzy_drafter(drafter, set_size: int, span: str) -> FuzzyDrafter:
    """The drafter run fuzzily in sets of `set_size` layers, across the process group's ranks if one is
    initialised (then set_size must be its size); one clear error where nothing would run fuzzily."""
    if not isinstance(drafter, LlamaGraph):
        raise YggcError("fuzzy drafting splits a standalone drafter's layers; an EAGLE-3 head has one layer, "
                        "run it with --draft-parallel sequential")
    rank, world = rank_world()
    if world > 1 and set_size != world:
        raise YggcError(f"--fuzzy-layers {set_size} on {world} ranks: each rank runs one attention layer of a "
                        f"set, so use --fuzzy-layers {world}")
    groups = fuzzy_groups(drafter.cfg.n_layers, set_size, span)
    if not groups:
        raise YggcError(f"the drafter's {drafter.cfg.n_layers} layers hold no set of {set_size} {span} layers to "
                        "run fuzzily; try --fuzzy-span all, or a smaller --fuzzy-layers")
    return FuzzyDrafter(drafter, groups, rank, world)
