"""The standalone drafter kind: a small LM with the verifier's tokenizer (graphs.LlamaGraph), drafting token by token
on its own KV cache (StandaloneProposer in standalone_proposer.py, the fused DraftPhase and GreedyVerifyPhase). It
claims any folder and any graph, so it is the last kind `drafters.kind_of` asks.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ...artifacts.cache_inputs import CacheInputBucket
from ...graphs import check_pair
from ...plan.shape import TreeShape
from ..draft_phase import DraftPhase
from ..loading import LoadedModel, load
from ..verify_phase import GreedyVerifyPhase
from .standalone_proposer import StandaloneProposer


class StandaloneKind:
    """drafters.DrafterKind for a standalone LM drafter; stateless."""

    name = "llama"
    description = "a standalone drafter"
    proposer = StandaloneProposer
    head = False

    def claims_folder(self, path: str | Path) -> bool:
        """Any folder that no other kind claims."""
        return True

    def claims(self, graph: nn.Module) -> bool:
        """Any graph that no other kind claims (LlamaGraph's forward signature)."""
        return True

    def check_pair(self, verifier_dir: str | Path, drafter_dir: str | Path) -> None:
        """Same tokenizer as the verifier (graphs.check_pair)."""
        check_pair(verifier_dir, drafter_dir)

    def load(self, drafter_dir: str | Path, verifier: LoadedModel, dtype: torch.dtype, device: str = "cpu",
             weights: bool = True) -> LoadedModel:
        """The drafter with its own cache of the verifier's length (weights=False: see loading.load)."""
        return load(drafter_dir, dtype, verifier.layout.max_seq, device, weights)

    def features_package(self, name: str, opt: str) -> bool:
        """Neither model's packages return features."""
        return False

    def fuse_in_verifier(self, verifier, drafter, opt: str) -> None:
        """Nothing of the drafter's runs in the verifier's package."""

    def package_inputs(self, name: str, drafter) -> tuple[torch.Tensor, ...]:
        """Every O2 package takes its caches alone."""
        return ()

    def package_bucket(self, name: str) -> type[CacheInputBucket]:
        """Each model's O2 package takes its ids and its caches (CacheInputBucket)."""
        return CacheInputBucket

    def draft_phase(self, drafter_graph: nn.Module, shape: TreeShape, vocab: int, trash: int) -> nn.Module:
        """DraftPhase: the head step, D-1 tree steps and top-W growth of the drafter's own forward."""
        return DraftPhase(drafter_graph, shape.depth, shape.width, vocab, trash)

    def frozen_draft_phase(self, drafter_graph: nn.Module, shape: TreeShape, vocab: int, trash: int) -> None:
        """None: at O2 the standalone drafter's phase runs eagerly around its package (a frozen copy of the phase
        would hold the drafter's weights a second time)."""
        return None

    def verify_phase(self, verifier_graph: nn.Module, shape: TreeShape) -> nn.Module:
        """GreedyVerifyPhase: prune, verify, accept and compact."""
        return GreedyVerifyPhase(verifier_graph, shape.depth, shape.verify)

    def record(self, drafter_graph: nn.Module) -> dict:
        """The kind alone: the drafter folder holds the rest."""
        return {"kind": "llama"}

    def summary(self, record: dict) -> str:
        """One line for `yggc inspect` from the manifest's record."""
        return "a standalone LM with the verifier's tokenizer"
