"""The EAGLE-3 head drafter kind (graphs.eagle3.Eagle3Graph): a one-layer head that drafts from the verifier's
features, checked against the verifier it was trained for and bound to its token embedding; it decodes with
Eagle3Proposer and compiles as Eagle3DraftPhase and FeatureVerifyPhase (eagle3.py).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from ...artifacts.cache_inputs import CacheInputBucket, HeadBucket
from ...graphs import load_config
from ...graphs.eagle3 import Eagle3Graph
from ...graphs.eagle3_checkpoint import check_eagle3_pair, is_eagle3, load_eagle3, load_eagle3_config
from ...graphs.packed_table import PackedEmbedding
from ...plan.shape import TreeShape
from ..draft_phase import FrozenPhase
from ..loading import LoadedModel
from .eagle3_proposer import Eagle3DraftPhase, Eagle3Proposer, FeatureVerifyPhase, unfused


def head_bucket(runner, head: nn.Module, fed: tuple[torch.Tensor, ...] = ()) -> HeadBucket:
    """A head's O2 package bound as a HeadBucket (the package takes nothing after its caches: `fed` is empty)."""
    return HeadBucket(runner, head)


class Eagle3Kind:
    """drafters.DrafterKind for an EAGLE-3 head; stateless."""

    name = "eagle3"
    description = "an EAGLE-3 head"
    proposer = Eagle3Proposer
    head = True

    def claims_folder(self, path: str | Path) -> bool:
        """A folder whose config.json names the EAGLE-3 architecture."""
        return is_eagle3(path)

    def claims(self, graph: nn.Module) -> bool:
        """An Eagle3Graph."""
        return isinstance(graph, Eagle3Graph)

    def check_pair(self, verifier_dir: str | Path, drafter_dir: str | Path) -> None:
        """The head was made for this verifier: sizes, feature layers (graphs.eagle3_checkpoint)."""
        check_eagle3_pair(load_eagle3_config(drafter_dir), load_config(verifier_dir), None,
                          f"EAGLE-3 head {drafter_dir}")

    def load(self, drafter_dir: str | Path, verifier: LoadedModel, dtype: torch.dtype, device: str = "cpu",
             weights: bool = True) -> LoadedModel:
        """The head with the verifier's cache layout and embedding, the verifier's feature_layers set to the head's;
        weights=False: the head reads its feature fusion alone where its folder keeps only that
        (graphs.eagle3_checkpoint.FUSION_ONLY)."""
        head = load_eagle3(drafter_dir, verifier.path, verifier.layout.n_slots, dtype, device, weights)
        verifier.graph.feature_layers = head.eagle.feature_layers  # what its forward_features taps
        return LoadedModel(head, verifier.tokenizer, verifier.layout, Path(drafter_dir))

    def features_package(self, name: str, opt: str) -> bool:
        """The O2 verifier's packages return (logits, features); at O1 the verify phase is its own package and the
        verifier's 1-token bucket needs no features."""
        return name == "verifier" and opt == "O2"

    def fuse_in_verifier(self, verifier, drafter, opt: str) -> None:
        """An O2 verifier runs the head's feature fusion (fc) inside its package, so its features come out fused
        ([W, head hidden]) and the head takes them as they are: an eager fc after each verifier call would find its
        weights evicted by the verifier's and run cold."""
        if self.features_package("verifier", opt):
            getattr(verifier, "graph", verifier).feature_fc = getattr(drafter, "graph", drafter).fc

    def package_inputs(self, name: str, drafter) -> tuple[torch.Tensor, ...]:
        """A head bound to a packed embedding table (graphs.packed_table) shares it with the verifier's package,
        which takes it as its last input."""
        embed = getattr(getattr(drafter, "graph", drafter), "embed", None)
        return (embed.packed,) if name == "verifier" and isinstance(embed, PackedEmbedding) else ()

    def package_bucket(self, name: str) -> Callable[..., CacheInputBucket]:
        """The head's O2 package (lowered from forward_embedded) takes the rows the runtime gathers from the
        verifier's embedding (HeadBucket); the verifier's takes its ids and caches (CacheInputBucket)."""
        return head_bucket if name == "drafter" else CacheInputBucket

    def draft_phase(self, drafter_graph: nn.Module, shape: TreeShape, vocab: int, trash: int) -> nn.Module:
        """Eagle3DraftPhase: the head step over the pending pairs, D-1 tree steps fed their parents' features."""
        return Eagle3DraftPhase(drafter_graph, shape.depth, shape.width, vocab, trash, draft_space=True)

    def frozen_draft_phase(self, drafter_graph: nn.Module, shape: TreeShape, vocab: int, trash: int) -> FrozenPhase:
        """Eagle3DraftPhase over the head's graph for an O2 package: it takes the features the verifier's package
        fused (fc stays out) and gathers its rows from the verifier's embedding, passed in (not a copy)."""
        phase = Eagle3DraftPhase(drafter_graph, shape.depth, shape.width, vocab, trash, fuse=unfused, draft_space=True)
        table = "embed.packed" if isinstance(drafter_graph.embed, PackedEmbedding) else "embed.weight"
        fc = tuple(f"head_model.fc.{name}" for name, _ in drafter_graph.fc.named_parameters())
        return FrozenPhase(phase, unused=fc, fed=(f"head_model.{table}",))

    def verify_phase(self, verifier_graph: nn.Module, shape: TreeShape) -> nn.Module:
        """FeatureVerifyPhase: greedy verification that also hands over the accepted path's features."""
        return FeatureVerifyPhase(verifier_graph, shape.depth, shape.verify)

    def record(self, drafter_graph: nn.Module) -> dict:
        """The kind and the verifier layers the head reads."""
        return {"kind": "eagle3", "feature_layers": list(drafter_graph.eagle.feature_layers)}

    def summary(self, record: dict) -> str:
        """One line for `yggc inspect` from the manifest's record."""
        return f"EAGLE-3 head over the verifier's layers {record['feature_layers']}"
