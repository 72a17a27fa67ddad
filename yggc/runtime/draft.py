"""What a proposer and the decode loop hand each other: the `Proposer` interface, the `DraftRequest` the loop asks
with and the `Draft` tree a proposer answers (vLLM's spec_decode shape: proposers behind one small interface, one
verifier, one set of acceptance rules in yggc/tree).

Each iteration the loop (runtime/speculative.py) asks `propose` for a draft from root request.pending[-1] at cache
slot request.n, verifies it in one verifier call, and hands `accept` what the verification decided: the accepted
tokens, the drafter K/V moves the verify phase computed and its per-row tensors on the accepted path (an EAGLE-3
head's features). A proposer keeps whatever state it needs between calls (a drafter's KV cache, a suffix index);
the proposers are listed in one registry, yggc/runtime/drafters/__init__.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from ..plan.shape import TreeShape
from ..tree.sampling import SamplingParams
from ..tree.token_tree import TokenTree


@dataclass
class Draft:
    """A drafted tree and what its verification needs (Proposer.propose -> the loop's verify)."""

    tree: TokenTree
    q: torch.Tensor | None  # [D, vocab] drafter distributions of a sampled chain, else None
    n_fed: int  # tree nodes 0..n_fed-1 have their K/V in the drafter cache
    anc: torch.Tensor  # [N, N] ancestor-or-self mask
    q_rows: torch.Tensor | None = None  # [N, vocab] a sampled tree's drafter distribution after each node
    verify: int | None = None  # nodes to verify at most (None: the shape's V; suffix branches change it)
    # nodes are point masses (suffix matches, alone or beside a model's tree): greedy verification runs the verify
    # ops on the draft's own V, and T > 0 the point-mass multi-draft rule, exact for any fixed tree
    point_mass: bool = False

    def n_verified(self, shape_verify: int) -> int:
        """Draft nodes the verifier checks: the draft's own count (suffix branches set it) or else the shape's V,
        at most every drafted node."""
        return min(shape_verify if self.verify is None else self.verify, self.tree.n_nodes - 1)

    def fed_on_path(self, last_id: int, k: int) -> int:
        """How many of the k accepted nodes (the deepest is last_id) the drafter ran on: those below n_fed. A node's
        ancestors have smaller ids, so a path ending below n_fed is all fed; a grown tree's deepest level alone lies
        past it; a point-mass draft's path is walked."""
        if last_id < self.n_fed:
            return k
        if not self.point_mass:
            return k - 1
        parents, fed, node = self.tree.parents.tolist(), 0, last_id
        while node > 0:
            fed += node < self.n_fed
            node = parents[node]
        return fed


@dataclass(frozen=True)
class DraftRequest:
    """What the loop asks a proposer for, once per iteration."""

    pending: list[int]  # tokens the proposer has not been handed yet, the root (the last committed token) last
    n: int  # the root's cache slot: the committed sequence less the root fills slots 0..n-1
    params: SamplingParams  # the request's sampling: greedy, or T > 0 (draws need the drafter's probabilities)
    gen: torch.Generator | None  # the request's generator for draws
    constraint: object | None  # the request's grammar (runtime/constraint.Constraint): drafts it forbids are waste
    sampled_tree: bool  # T > 0, W > 1: grow the tree from draws (rrs, traversal), not greedily (point-mass)


class Proposer(Protocol):
    """One way of drafting. The loop reads `verifier`, `layout`, `shape` and `drafter` (the model whose cache the
    prompt cache notes, or None), builds the greedy verify phase of `verify_phase_kind` (what it hands over after
    a verification: GreedyVerifyPhase, or an EAGLE-3 head's FeatureVerifyPhase) and leaves `extra_nodes` cache
    slots past the shape's nodes for nodes a draft adds."""

    verifier: object
    layout: object
    shape: TreeShape
    drafter: object | None
    verify_phase_kind: type
    extra_nodes: int
    trace: object  # where it times its model calls (the loop sets a StageTrace for `yggc run --trace`)

    def set_shape(self, shape: TreeShape) -> None:
        """Draft trees of `shape` from the next call on."""

    def reusable(self, prompt_ids: list[int]) -> int:
        """How many leading prompt tokens the proposer's own state already holds (runtime/prompt_cache.py)."""

    def prefill(self, prompt_ids: list[int], start: int) -> torch.Tensor:
        """A new request: the verifier's cache and the proposer's state take the prompt from token `start` on
        -> the verifier's logits after the prompt [vocab]."""

    def propose(self, request: DraftRequest) -> Draft:
        """The draft tree from root request.pending[-1] at slot request.n."""

    def accept(self, new: list[int], last_id: int, draft: Draft, moves: torch.Tensor,
               rows: tuple[torch.Tensor, ...]) -> list[int]:
        """After verifying `draft`: the new tokens (the accepted ones, the verifier's bonus token last), the deepest
        accepted tree id, the drafter's K/V moves [2, D] and the verify phase's per-row tensors on the accepted path
        (root first) -> the tokens the next request.pending starts with."""
