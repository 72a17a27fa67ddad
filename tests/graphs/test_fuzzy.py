"""EasySpec fuzzy layer sets: which layers join a set (the paper's rule), and a fuzzy forward is algorithm 2."""
import pytest
import torch
from yggc.graphs import load_model
from yggc.graphs.fuzzy import FuzzyDrafter, fuzzy_groups

from yggc.artifacts.cache_layout import CacheLayout, causal_rows


def test_the_papers_sets_for_32_layers_in_fours():
    # easyspec.txt 3.1.1: layers 1-3, 4-7, ..., 28-30; the first and last layers run exactly
    want = ((1, 2, 3), *(tuple(range(s, s + 4)) for s in range(4, 28, 4)), (28, 29, 30))
    assert fuzzy_groups(32, 4) == want


@pytest.mark.parametrize("n_layers,size,span,want", [
    (3, 2, "inner", ()),  # only layer 1 is inner: a set of one runs exactly
    (3, 2, "all", ((0, 1),)),
    (6, 3, "inner", ((1, 2), (3, 4))),
    (6, 2, "all", ((0, 1), (2, 3), (4, 5))),
    (4, 8, "all", ((0, 1, 2, 3),)),
])
def test_fuzzy_groups(n_layers, size, span, want):
    assert fuzzy_groups(n_layers, size, span) == want


def algorithm_2(graph, groups, ids, pos, mask):
    """The paper's algorithm 2 written out layer by layer (the reference for FuzzyDrafter)."""
    x = graph.embed(ids)
    cos, sin = graph.rope(pos)
    start = {g[0]: g for g in groups}
    i = 0
    while i < len(graph.layers):
        group = start.get(i, (i,))
        h1 = x
        for layer in group:
            b = graph.layers[layer]
            x = x + b.attn(b.attn_norm(h1), cos, sin, pos, mask)  # every attention reads the set's input
            x = x + b.mlp(b.mlp_norm(x))
        i = group[-1] + 1
    return graph.lm_head(graph.norm(x)).float()


@torch.inference_mode()
def test_a_fuzzy_forward_is_algorithm_2_and_no_sets_is_the_exact_forward(checkpoint):
    layout = CacheLayout(64)
    graph = load_model(checkpoint("llama_deep"), layout.n_slots)
    ids = torch.randint(1, 300, (12,), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(12)
    mask = causal_rows(pos, layout.n_slots)
    exact = graph(ids, pos, pos, mask)
    assert torch.equal(FuzzyDrafter(graph, ())(ids, pos, pos, mask), exact)
    groups = fuzzy_groups(6, 3)
    fuzzy = FuzzyDrafter(graph, groups)(ids, pos, pos, mask)
    assert torch.allclose(fuzzy, algorithm_2(graph, groups, ids, pos, mask), atol=1e-6)
    assert (fuzzy - exact).abs().max() > 1e-3  # the sets really ran fuzzily


def test_sets_longer_than_the_ranks_are_refused(checkpoint):
    graph = load_model(checkpoint("llama_deep"), 64)
    with pytest.raises(ValueError, match="longer than the 2 ranks"):
        FuzzyDrafter(graph, ((1, 2, 3),), rank=0, world=2)
