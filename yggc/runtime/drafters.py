"""Which drafter kind a folder holds, loading it beside its verifier, and the decoder for the pair.

A standalone drafter is a small LM with the verifier's tokenizer (graphs.LlamaGraph, SpeculativeDecoder);
an EAGLE-3 head (graphs.eagle3.Eagle3Graph, Eagle3Decoder) drafts from the verifier's features and is
checked against the verifier it was trained for. Everything downstream takes either.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..graphs import check_pair, load_config
from ..graphs.eagle3 import Eagle3Graph
from ..graphs.eagle3_checkpoint import check_eagle3_pair, is_eagle3, load_eagle3, load_eagle3_config
from ..graphs.packed_table import PackedEmbedding
from ..plan.shape import TreeShape
from .cache_layout import CacheLayout
from .draft_phase import DraftPhase
from .eagle3_decoder import Eagle3Decoder, Eagle3DraftPhase, FeatureVerifyPhase
from .loading import LoadedModel, load
from .speculative import SpeculativeDecoder
from .verify_phase import GreedyVerifyPhase


def drafter_kind(drafter_dir: str | Path) -> str:
    return "eagle3" if is_eagle3(drafter_dir) else "llama"


def check_drafter(verifier_dir: str | Path, drafter_dir: str | Path) -> None:
    """The pair check before any weights are read: same tokenizer, or an EAGLE-3 head made for this verifier."""
    if drafter_kind(drafter_dir) == "llama":
        check_pair(verifier_dir, drafter_dir)
    else:
        check_eagle3_pair(load_eagle3_config(drafter_dir), load_config(verifier_dir), None,
                          f"EAGLE-3 head {drafter_dir}")


def load_drafter(drafter_dir: str | Path, verifier: LoadedModel, dtype: torch.dtype, device: str = "cpu",
                 weights: bool = True) -> LoadedModel:
    """The drafter with the verifier's cache layout (an EAGLE-3 head also gets the verifier's embedding);
    weights=False: see loading.load (a head then reads its feature fusion alone where its folder keeps only that:
    graphs.eagle3_checkpoint.FUSION_ONLY)."""
    if drafter_kind(drafter_dir) == "llama":
        return load(drafter_dir, dtype, verifier.layout.max_seq, device, weights)
    head = load_eagle3(drafter_dir, verifier.path, verifier.layout.n_slots, dtype, device, weights)
    verifier.graph.feature_layers = head.eagle.feature_layers  # what its forward_features taps
    return LoadedModel(head, verifier.tokenizer, verifier.layout, Path(drafter_dir))


def load_pair(verifier_dir: str | Path, drafter_dir: str | Path, dtype: torch.dtype,
              max_seq: int, load_verifier=load) -> tuple[LoadedModel, LoadedModel]:
    """The checked pair; load_verifier(dir, dtype, max_seq) may load a tensor-parallel rank's slice instead."""
    check_drafter(verifier_dir, drafter_dir)
    verifier = load_verifier(verifier_dir, dtype, max_seq)
    return verifier, load_drafter(drafter_dir, verifier, dtype)


def speculative_decoder(verifier, drafter, layout: CacheLayout, shape: TreeShape, chain_rule: str = "block",
                        tree_rule: str = "rrs", draft_phase=None, verify_phase=None,
                        policy=None) -> SpeculativeDecoder:
    """The decoder for the drafter's kind (verifier and drafter: graphs or compiled models around them);
    `policy` (a DepthPolicy) picks each greedy iteration's shape."""
    decoder = Eagle3Decoder if is_head(drafter) else SpeculativeDecoder
    return decoder(verifier, drafter, layout, shape, chain_rule, draft_phase, verify_phase, tree_rule, policy)


def features_package(name: str, opt: str, drafter) -> bool:
    """Whether model `name`'s packages return (logits, features): the O2 verifier of an EAGLE-3 pairing
    (at O1 the verify phase is its own package and the verifier's 1-token bucket needs no features)."""
    return name == "verifier" and opt == "O2" and is_head(drafter)


def fuse_in_verifier(verifier, drafter, opt: str) -> None:
    """An O2 verifier paired with an EAGLE-3 head runs the head's feature fusion (fc) inside its package, so its
    features come out fused ([W, head hidden]) and the head takes them as they are: an eager fc after each
    verifier call cost ~0.4 ms on SmolLM2 (its weights evicted by the verifier's; 0.15 ms warm)."""
    if features_package("verifier", opt, drafter):
        getattr(verifier, "graph", verifier).feature_fc = getattr(drafter, "graph", drafter).fc


def package_inputs(name: str, drafter) -> tuple[torch.Tensor, ...]:
    """What model `name`'s O2 package takes after its caches: an EAGLE-3 head bound to a packed embedding table
    (graphs.packed_table) shares it with the verifier's package, which takes it as its last input."""
    embed = getattr(getattr(drafter, "graph", drafter), "embed", None)
    return (embed.packed,) if name == "verifier" and isinstance(embed, PackedEmbedding) else ()


def is_head(drafter) -> bool:
    return isinstance(getattr(drafter, "graph", drafter), Eagle3Graph)


def draft_phase(drafter_graph, shape: TreeShape, vocab: int, trash: int) -> torch.nn.Module:
    """The fused draft phase module of the drafter's kind (what a bundle compiles)."""
    kind = Eagle3DraftPhase if is_head(drafter_graph) else DraftPhase
    return kind(drafter_graph, shape.depth, shape.width, vocab, trash)


def verify_phase(verifier_graph, drafter_graph, shape: TreeShape) -> torch.nn.Module:
    """The fused greedy verify phase; for an EAGLE-3 head it also hands over the path's features."""
    kind = FeatureVerifyPhase if is_head(drafter_graph) else GreedyVerifyPhase
    return kind(verifier_graph, shape.depth, shape.verify)


def drafter_record(drafter_graph) -> dict:
    """What a bundle manifest records of its drafter, checked again at load."""
    if not is_head(drafter_graph):
        return {"kind": "llama"}
    return {"kind": "eagle3", "feature_layers": list(drafter_graph.eagle.feature_layers)}
