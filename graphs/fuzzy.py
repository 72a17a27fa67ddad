"""EasySpec fuzzy speculation for a Llama-family drafter (easyspec.txt, section 3.1, algorithm 2).

Consecutive layers' hidden states are nearly parallel, so within a set of consecutive layers every
attention layer may read the set's *input* hidden state instead of its own: the set's attention layers
then no longer depend on one another and run at once, one per rank. The MLPs still run in order on the
exact residual stream:

    a_i = Attn_i(norm(h_first))            for every layer i of the set (in parallel)
    h_{i+1} = h_i + a_i + MLP_i(norm(h_i + a_i))

The drafter's output changes (a fuzzy draft), the verifier's does not: lossless verification makes
any draft correct. The K/V a fuzzy step writes are fuzzy too; the decoder recomputes them exactly after
each verification (bonus calibration, yggc/runtime/drafters/fuzzy_proposer.py).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from .llama import LlamaGraph

SPANS = ("inner", "all")  # which layers may join a set: all but the first and last (the paper's), or all


def fuzzy_groups(n_layers: int, size: int, span: str = "inner") -> tuple[tuple[int, ...], ...]:
    """The layer sets run fuzzily: the eligible layers cut at multiples of `size` (for 32 layers in sets of
    4, the paper's 1-3, 4-7, ..., 28-30); a set of one layer runs exactly and is left out."""
    if span not in SPANS:
        raise ValueError(f"span {span!r} is not one of {SPANS}")
    lo, hi = (1, n_layers - 2) if span == "inner" else (0, n_layers - 1)
    groups: list[list[int]] = []
    for layer in range(lo, hi + 1):
        if not groups or layer % size == 0:
            groups.append([])
        groups[-1].append(layer)
    return tuple(tuple(g) for g in groups if len(g) > 1)


class FuzzyDrafter(nn.Module):
    """`graph`'s forward with each set in `groups` run fuzzily. On `world` > 1 ranks (an initialised
    process group), rank r computes the r-th attention layer of each set (and writes only that layer's
    K/V); the outputs are all-gathered and every rank runs the MLPs, so all ranks end with the same logits.
    One process computes the whole set itself: the same numbers, without the parallelism."""

    def __init__(self, graph: LlamaGraph, groups: tuple[tuple[int, ...], ...], rank: int = 0, world: int = 1):
        super().__init__()
        if world > 1 and any(len(g) > world for g in groups):
            raise ValueError(f"a fuzzy layer set is longer than the {world} ranks that run it")
        self.graph, self.groups, self.rank, self.world = graph, groups, rank, world
        self.first = {g[0]: g for g in groups}

    def forward(self, input_ids, position_ids, cache_slots, attn_mask) -> torch.Tensor:
        """The graph's forward signature: (input_ids, position_ids, cache_slots [W], attn_mask [W, S]) ->
        logits [W, V] float32."""
        g = self.graph
        x = g.embed(input_ids)  # [W, hidden]
        cos, sin = g.rope(position_ids)
        i = 0
        while i < len(g.layers):
            group = self.first.get(i, (i,))
            if len(group) == 1:
                x = g.layers[i](x, cos, sin, cache_slots, attn_mask)
            else:
                for layer, a in zip(group, self.attend(group, x, cos, sin, cache_slots, attn_mask)):
                    block = g.layers[layer]
                    x = x + a
                    x = x + block.mlp(block.mlp_norm(x))
            i = group[-1] + 1
        return g.lm_head(g.norm(x)).float()

    def attend(self, group, x, cos, sin, slots, mask) -> list[torch.Tensor]:
        """Every attention layer of `group` on the set's input x [W, hidden] -> their outputs [W, hidden]."""
        def attn(layer: int) -> torch.Tensor:
            block = self.graph.layers[layer]
            return block.attn(block.attn_norm(x), cos, sin, slots, mask)

        if self.world == 1:
            return [attn(layer) for layer in group]
        mine = attn(group[self.rank]) if self.rank < len(group) else torch.zeros_like(x)
        parts = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(parts, mine.contiguous())
        return parts[: len(group)]
