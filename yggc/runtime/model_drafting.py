"""Drafting with a model (the standalone and EAGLE-3 proposers share it, around their own steps): the fused
greedy draft phase per shape, greedy EGT growth under a grammar, and at T > 0 a chain or a tree of draws from the
drafter's distribution, whose rules (block verification, RRS, traversal) need the drafter's probabilities, or the
greedy-grown tree, verified by the point-mass rule.

A proposer hands these functions `steps`, anything with the ModelSteps members: its fused phase runner and its
eager root and node steps (yggc/runtime/drafters/standalone_proposer.py, eagle3_proposer.py).
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from typing import Protocol

import torch
from torch import nn

from ..plan.shape import TreeShape
from ..tree.egt import egt_frontier, egt_init, egt_step, egt_tree
from ..tree.sampled_egt import race_keys, sampled_egt_root_step, sampled_egt_step
from ..tree.sampling import SamplingParams, sample_index, target_probs
from ..tree.token_tree import TokenTree
from .constraint import path_to
from .draft import Draft, DraftRequest


class ModelSteps(Protocol):
    """What a model proposer gives the drafting below."""

    shape: TreeShape
    vocab: int
    layout: object
    phases: DraftPhases
    rank_rates: tuple[float, ...] | None  # a sampled tree's price of an i-th draw (tree/sampled_egt.py)
    trace: object

    def catch_up(self, pending: list[int], n: int) -> list[int]:
        """What one head step cannot take of `pending` (a path through suffix drafts) fed to the drafter now
        -> what the head step still feeds."""

    def phase_inputs(self, pending: list[int], n: int) -> tuple[torch.Tensor, ...]:
        """The fused draft phase's inputs."""

    def root_logits(self, pending: list[int], n: int) -> torch.Tensor:
        """Eager head step: the drafter catches up on `pending` (root last, at slot n) -> root logits [vocab]."""

    def node_logits(self, tokens, parents, ids, depth, anc_rows, n: int, view: int) -> torch.Tensor:
        """Eager tree step on nodes `ids` (tokens, parent ids, depths [R], ancestor rows [R, N]) -> [R, vocab]."""


class ViewSlots:
    """arange(view) per cache view length, built once: the draft phases' view_slots input."""

    def __init__(self, layout, device: torch.device):
        self.layout, self.device, self.built = layout, device, {}

    def __call__(self, n_used: int) -> torch.Tensor:
        view = self.layout.view(n_used)
        if view not in self.built:
            self.built[view] = torch.arange(view, device=self.device)
        return self.built[view]


class DraftPhases:
    """A model proposer's draft phase per shape: the eager module (built once by `make`) and what runs it, the
    bundle's compiled phase of the shape's (D, W) where it has one (`draft_phase`: the first shape's); and the
    view_slots inputs of its cache views."""

    def __init__(self, make: Callable[[TreeShape], nn.Module], layout, device: torch.device, shape: TreeShape,
                 draft_phase=None):
        self.make = make
        # (D, W) -> the bundle's draft phase runner
        self.compiled = {} if draft_phase is None else {(shape.depth, shape.width): draft_phase}
        self.built: dict[TreeShape, tuple[nn.Module, object]] = {}
        self.module = self.run = None  # the current shape's
        self.view_slots = ViewSlots(layout, device)

    def set_shape(self, shape: TreeShape) -> None:
        if shape not in self.built:
            module = self.make(shape)
            self.built[shape] = (module, self.compiled.get((shape.depth, shape.width), module))
        self.module, self.run = self.built[shape]


def propose(steps: ModelSteps, request: DraftRequest) -> Draft:
    """The draft a request asks for, once the drafter caught up on what one head step cannot take: greedy (fused,
    or under a grammar) or at T > 0 (sampled_draft)."""
    n = request.n
    pending = steps.catch_up(request.pending, n)
    if request.params.greedy:
        if request.constraint is None:
            return fused_draft(steps, pending, n)
        return constrained_draft(steps, pending, n, request.constraint)
    return sampled_draft(steps, pending, request)


def fused_draft(steps: ModelSteps, pending: list[int], n: int) -> Draft:
    """The EGT draft phase in one call: D drafter calls, W new nodes each."""
    inputs, shape, phases = steps.phase_inputs(pending, n), steps.shape, steps.phases
    with steps.trace.span("draft phase", "models") if phases.run is not phases.module else nullcontext():
        tokens, parents, depth, cum_logp, anc = phases.run(*inputs)
    tree = TokenTree(tokens, parents, depth, cum_logp, shape.n_nodes)
    return Draft(tree, None, 1 + (shape.depth - 1) * shape.width, anc)


def constrained_draft(steps: ModelSteps, pending: list[int], n: int, constraint) -> Draft:
    """Greedy EGT growth under the request's grammar: each node's drafter logits masked by what the grammar
    allows after its path, so every draft can be accepted; eager, around the drafter's forward."""
    D, W = steps.shape.depth, steps.shape.width
    view = steps.layout.view(n + steps.shape.n_nodes)
    root = constraint.mask(steps.root_logits(pending, n))[None]  # [1, vocab]
    state = egt_step(egt_init(pending[-1], D, W, steps.vocab), torch.log_softmax(root, -1).expand(W, -1))
    for _ in range(D - 1):
        f = egt_frontier(state)
        logits = steps.node_logits(f.tokens, state.parents[f.ids], f.ids, f.depth, f.mask, n, view)  # [W, vocab]
        tokens, parents = state.tokens.tolist(), state.parents.tolist()
        masks = constraint.masks_after([path_to(i, tokens, parents) for i in f.ids.tolist()])  # [W, vocab]
        state = egt_step(state, torch.log_softmax(logits.masked_fill(~masks, float("-inf")), -1))
    return Draft(egt_tree(state), None, 1 + (D - 1) * W, state.anc)


def sampled_draft(steps: ModelSteps, pending: list[int], request: DraftRequest) -> Draft:
    """T > 0: a sampled chain (W = 1), a sampled tree (rrs, traversal) or the greedy-grown tree (point-mass)."""
    n = request.n
    if steps.shape.width == 1:
        return sampled_chain(steps, pending, n, request.params, request.gen)
    if request.sampled_tree:
        return sampled_tree(steps, pending, n, request.params, request.gen)
    return fused_draft(steps, pending, n)


def sampled_tree(steps: ModelSteps, pending: list[int], n: int, params: SamplingParams, gen: torch.Generator) -> Draft:
    """T > 0: the EGT grown from draws of the drafter's distribution (sampled_egt), for recursive
    rejection sampling; eager, around the drafter's forward."""
    D, W, N = steps.shape.depth, steps.shape.width, steps.shape.n_nodes
    view = steps.layout.view(n + N)
    q = target_probs(steps.root_logits(pending, n), params)  # [vocab]
    q_rows = torch.zeros(N, steps.vocab)
    q_rows[0] = q
    state = sampled_egt_root_step(egt_init(pending[-1], D, W, steps.vocab), q, race_keys(q, gen), steps.rank_rates)
    for _ in range(D - 1):
        f = egt_frontier(state)
        logits = steps.node_logits(f.tokens, state.parents[f.ids], f.ids, f.depth, f.mask, n, view)
        q = target_probs(logits, params)                     # [W, vocab]
        q_rows[state.newest] = q
        state = sampled_egt_step(state, q, race_keys(q, gen), steps.rank_rates)
    tree = egt_tree(state)
    return Draft(tree, None, 1 + (D - 1) * W, state.anc, q_rows)


def sampled_chain(steps: ModelSteps, pending: list[int], n: int, params: SamplingParams, gen: torch.Generator) -> Draft:
    """W = 1 at temperature > 0: each draft is SAMPLED from the drafter (the chain rules need it)."""
    D = steps.shape.depth
    tree = TokenTree.from_root(pending[-1], 1 + D)
    q = torch.empty(D, steps.vocab)
    logits = steps.root_logits(pending, n)
    chain = torch.ones(1 + D, 1 + D, dtype=torch.bool).tril()  # [N, N] ancestor-or-self rows of a chain
    for d in range(1, D + 1):
        q[d - 1] = target_probs(logits, params)
        tree.tokens[d] = sample_index(q[d - 1], gen)
        tree.parents[d], tree.depth[d] = d - 1, d
        if d < D:
            node = torch.tensor([d])
            logits = steps.node_logits(tree.tokens[node], node - 1, node, node, chain[node], n,
                                       steps.layout.view(n + d + 1))[0]
    tree.n_nodes = 1 + D
    return Draft(tree, q, D, chain)
