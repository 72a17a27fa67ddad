"""The proposers and the drafter kinds, in one registry: every proposer (PROPOSERS: what the CLI builds by name) and
every kind of drafter model (KINDS: what a folder or a graph is, how it loads, the modules its packages are bound to
and what a manifest records; how it is lowered is the compile's, passes/drafter_lowering.py),
with the pair-level entry points built on them (the pair check, loading, the decoder, compiled models).

One file per proposer, each a class with the Proposer members (yggc/runtime/draft.py):
`standalone_proposer` (a small LM with the verifier's tokenizer), `eagle3_proposer` (an EAGLE-3 head drafting from
the verifier's features), `fuzzy_proposer` (the standalone drafter run layer-parallel, EasySpec), `suffix_proposer`
(the text's own repeats, no model) and `suffix_branches` (a model proposer's tree with the suffix matches merged in:
two proposers as one). A kind of drafter model is a file beside its proposer (`standalone_kind`, `eagle3_kind`)
naming the proposer it drafts with. Only those files test which kind something is; everything else asks `kind_of`
/ `kind_of_folder`. A new proposer is a new file here and one more entry in PROPOSERS (and in KINDS where it loads
a new kind of model).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from ...artifacts.aoti_package import load_package
from ...artifacts.buckets import CompiledModel
from ...artifacts.cache_inputs import CacheInputBucket
from ...artifacts.cache_layout import CacheLayout
from ...bundle import OptLevel
from ...plan.shape import TreeShape
from ...tree.rules import ChainRule, TreeRule
from ..draft_phase import FrozenPhase
from ..loading import LoadedModel, load
from ..speculative import SpeculativeDecoder
from .eagle3_kind import Eagle3Kind
from .eagle3_proposer import Eagle3Proposer
from .fuzzy_proposer import FuzzyProposer
from .standalone_kind import StandaloneKind
from .standalone_proposer import StandaloneProposer
from .suffix_branches import SuffixBranches
from .suffix_proposer import SuffixProposer

# how a loaded O2 package (its runner) is bound to its model: (runner, graph, fed) -> the callable bucket
PackageBinder = Callable[[object, nn.Module, tuple[torch.Tensor, ...]], CacheInputBucket]


class DrafterKind(Protocol):
    """What one kind of drafter provides to loading and decoding, and what the compile shares with the load (the
    phase modules and packages it binds, the manifest record it checks); what only the compile asks of a kind is
    its lowering, beside the passes (passes/drafter_lowering.py). `drafter` arguments take the graph or anything
    around it with a `.graph` (a LoadedModel, a CompiledModel)."""

    name: str  # what a bundle's manifest records as the drafter's kind ("llama", "eagle3")
    description: str  # the kind in a message ("a standalone drafter", "an EAGLE-3 head")
    proposer: type  # the proposer that drafts with this kind of model (a PROPOSERS entry)
    # drafts from the verifier's features rather than being a whole LM: it has no forward buckets at O1 (it runs
    # inside the draft phase), its O2 package is lowered from forward_embedded, its steps are timed fed zero features,
    # and an O2 bundle keeps its feature fusion and the verifier's embedding beside the packages
    head: bool

    def claims_folder(self, path: str | Path) -> bool:
        """Whether the checkpoint folder `path` holds a drafter of this kind."""

    def claims(self, graph: nn.Module) -> bool:
        """Whether the loaded graph is a drafter of this kind."""

    def check_pair(self, verifier_dir: str | Path, drafter_dir: str | Path) -> None:
        """The pair check before any weights are read; raises YggcError with the fix."""

    def load(self, drafter_dir: str | Path, verifier: LoadedModel, dtype: torch.dtype, device: str = "cpu",
             weights: bool = True) -> LoadedModel:
        """The drafter with the verifier's cache layout (weights=False: see loading.load)."""

    def features_package(self, name: str, opt: str) -> bool:
        """Whether model `name`'s packages return (logits, features) in a pairing with this drafter."""

    def fuse_in_verifier(self, verifier, drafter, opt: str) -> None:
        """Whatever the verifier's package must run of the drafter's (set on the verifier's graph before lowering
        and at load)."""

    def package_inputs(self, name: str, drafter) -> tuple[torch.Tensor, ...]:
        """What model `name`'s O2 package takes after its caches."""

    def package_bucket(self, name: str) -> PackageBinder:
        """How model `name`'s loaded O2 package is bound to its graph (buckets.load_forward_bucket's `bind`)."""

    def draft_phase(self, drafter_graph: nn.Module, shape: TreeShape, vocab: int, trash: int) -> nn.Module:
        """The fused draft phase module at `shape` (what an O1 bundle compiles)."""

    def frozen_draft_phase(self, drafter_graph: nn.Module, shape: TreeShape, vocab: int,
                           trash: int) -> FrozenPhase | None:
        """The draft phase at `shape` an O2 bundle compiles with the drafter's weights frozen in, or None where
        the kind's phase runs eagerly around its package."""

    def verify_phase(self, verifier_graph: nn.Module, shape: TreeShape) -> nn.Module:
        """The fused greedy verify phase module at `shape` (what an O1 bundle compiles)."""

    def summary(self, record: dict) -> str:
        """One line describing a bundle's drafter from its manifest record."""

    def record(self, drafter_graph: nn.Module) -> dict:
        """What a bundle manifest records of its drafter, checked again at load."""


# every proposer, by the name the CLI and a manifest use (its class's `name`)
PROPOSERS: dict[str, type] = {p.name: p for p in (StandaloneProposer, Eagle3Proposer, FuzzyProposer, SuffixProposer,
                                                   SuffixBranches)}
# asked in turn: the first kind that claims a folder or a graph is its kind; the standalone kind claims any
KINDS: tuple[DrafterKind, ...] = (Eagle3Kind(), StandaloneKind())


def kind_of(drafter) -> DrafterKind:
    """The kind of a drafter (its graph, or a LoadedModel / CompiledModel around it)."""
    graph = getattr(drafter, "graph", drafter)
    return next(kind for kind in KINDS if kind.claims(graph))


def kind_named(name: str) -> DrafterKind | None:
    """The kind a manifest records by this name (None: a kind this yggc does not know)."""
    return next((kind for kind in KINDS if kind.name == name), None)


def kind_of_folder(drafter_dir: str | Path) -> DrafterKind:
    """The kind of drafter a checkpoint folder holds (read from its config.json, no weights)."""
    return next(kind for kind in KINDS if kind.claims_folder(drafter_dir))


def check_drafter(verifier_dir: str | Path, drafter_dir: str | Path) -> None:
    """The pair check before any weights are read: same tokenizer, or an EAGLE-3 head made for this verifier."""
    kind_of_folder(drafter_dir).check_pair(verifier_dir, drafter_dir)


def load_drafter(drafter_dir: str | Path, verifier: LoadedModel, dtype: torch.dtype, device: str = "cpu",
                 weights: bool = True) -> LoadedModel:
    """The drafter of `drafter_dir` with the verifier's cache layout, loaded by its kind."""
    return kind_of_folder(drafter_dir).load(drafter_dir, verifier, dtype, device, weights)


def load_pair(verifier_dir: str | Path, drafter_dir: str | Path, dtype: torch.dtype,
              max_seq: int, load_verifier=load) -> tuple[LoadedModel, LoadedModel]:
    """The checked pair; load_verifier(dir, dtype, max_seq) may load a tensor-parallel rank's slice instead."""
    check_drafter(verifier_dir, drafter_dir)
    verifier = load_verifier(verifier_dir, dtype, max_seq)
    return verifier, load_drafter(drafter_dir, verifier, dtype)


def speculative_decoder(verifier, drafter, layout: CacheLayout, shape: TreeShape,
                        chain_rule: ChainRule = ChainRule.BLOCK, tree_rule: TreeRule = TreeRule.RRS,
                        draft_phase=None, verify_phase=None,
                        policy=None) -> SpeculativeDecoder:
    """The decode loop over the proposer of the drafter's kind (verifier and drafter: graphs or compiled models
    around them); `policy` (a DepthPolicy) picks each greedy iteration's shape."""
    proposer = kind_of(drafter).proposer(verifier, drafter, layout, shape, draft_phase)
    return SpeculativeDecoder(proposer, chain_rule, verify_phase, tree_rule, policy)


def compiled_model(name: str, graph: nn.Module, packages: dict[int, Path], drafter, opt: OptLevel = OptLevel.O1,
                   backend: str = "inductor", package_width: int = 0) -> CompiledModel:
    """Model `name` ("verifier" or "drafter") of a pairing with `drafter` behind its packages; whether they return
    features, what they take after the caches and how an O2 package is bound are the drafter kind's."""
    kind = kind_of(drafter)
    return CompiledModel(graph, packages, opt, backend, package_width, kind.features_package(name, opt),
                         kind.package_inputs(name, drafter), kind.package_bucket(name))


def frozen_draft_runner(path: Path, drafter_graph: nn.Module, shape: TreeShape, vocab: int) -> CacheInputBucket:
    """An O2 bundle's draft phase package (DrafterKind.frozen_draft_phase) bound to the drafter's caches and the
    tables it is fed."""
    phase = kind_of(drafter_graph).frozen_draft_phase(drafter_graph, shape, vocab, drafter_graph.n_slots - 1)
    runner = load_package(path, next(drafter_graph.buffers()).is_cuda)
    return CacheInputBucket(runner, phase.module, phase.fed_tensors())
