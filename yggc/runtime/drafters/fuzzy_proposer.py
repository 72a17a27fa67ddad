"""EasySpec drafting (easyspec.txt): fuzzy tree steps, then bonus calibration (`yggc run --draft-parallel fuzzy`).

The tree steps run the drafter fuzzily (graphs/fuzzy.py: a layer set's attention layers at once, one per
rank), so the K/V they write are approximate. They are never kept: after each verification the accepted
tokens and the bonus token are fed again in one exact, layer-by-layer head step, which rewrites their
drafter K/V and yields the next root's exact distribution (section 3.2). The verifier and its rule are
untouched, so output stays the verifier's own.
"""
from __future__ import annotations

from ...artifacts.cache_layout import CacheLayout
from ...errors import YggcError
from ...graphs.fuzzy import FuzzyDrafter, fuzzy_groups
from ...graphs.llama import LlamaGraph
from ...plan.shape import TreeShape
from ..tp_processes import rank_world
from .standalone_proposer import StandaloneProposer


class FuzzyProposer(StandaloneProposer):
    """The standalone proposer whose tree steps run EasySpec-fuzzily across tensor-parallel ranks (sets of
    attention layers at once); the accepted tokens' drafter K/V are recomputed exactly in the next head step."""

    name = "fuzzy"
    description = "a standalone drafter run layer-parallel (EasySpec)"

    def __init__(self, verifier, drafter, layout: CacheLayout, shape: TreeShape, fuzzy: FuzzyDrafter):
        super().__init__(verifier, drafter, layout, shape, tree_drafter=fuzzy, recompute_accepted=True)


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
