"""Suffix branches beside a drafter model's: one tree holding both, verified in one call (`yggc run --with-suffix`).

Each iteration the model's draft tree (its EGT) gets the text's suffix-match continuations merged in
(yggc/tree/suffix_match.py): a branch follows the nodes that already hold its tokens and adds new ones where it
departs. A suffix node is priced at the measured chance that a match of its length is accepted so far
(MatchRates: the first token's rate times the later tokens' rate per further depth); nodes below `min_chance`
are not added. Pruning ranks model and suffix nodes on one scale (exp(cum_logp): the drafter's probability, or
the suffix price). How many to verify: with the bundle's profiled costs, the count that makes the most expected
tokens per ms (verifier rows are not free: on a 2-core AVX2 CPU 12 rows of SmolLM2 cost 2.5x one); without
them, the shape's V plus the nodes the branches added. The merged tree is a point-mass draft: greedy, the verify
phase's tree ops on its own V; at T > 0 the point-mass multi-draft rule, exact for any fixed tree; so the output
stays the verifier's.

A path that leaves the model's nodes ends in tokens the drafter never ran on: the next iteration feeds them
to it first (the model proposer's catch_up), so its cache reads as if it had decoded them.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import torch

from ...plan.shape import TreeShape
from ...tree import host
from ...tree.prune import best_verify_count
from ...tree.token_tree import TokenTree
from ..draft import Draft, DraftRequest
from ..speculative import GREEDY, SpeculativeDecoder
from .suffix_proposer import SuffixDrafter

# tokens per branch, branches, suffix nodes added at most. Long branches pay where text repeats at length (code
# completion) and cost nothing measurable on chat, where the profiled costs keep the verify count where it pays
# (docs/benchmarks/drafters.md)
BRANCHES_SHAPE = TreeShape(16, 2, 20)
MIN_CHANCE = 0.2  # a suffix node whose estimated acceptance is below this is not worth its verifier row


def branches_by_default(device_type: str, world: int, sampling: bool) -> bool:
    """Whether a request drafts suffix branches beside its drafter's tree unless it says: greedy, on a CPU, in one
    process. Measured faster there on general chat, stdlib chat and code alike (docs/benchmarks/drafters.md); not
    measured on a GPU or across tensor-parallel ranks."""
    return not sampling and device_type == "cpu" and world == 1


class SuffixBranches:
    """Proposer combining two into one tree: a model proposer's draft (`model`) with the suffix matches of the text
    (`suffix`: the suffix proposer's index and rates). `shape`: tokens per branch, branches, suffix nodes added at
    most."""

    name = "suffix-branches"
    description = "a model's tree with the text's suffix matches merged in"

    def __init__(self, model, suffix: SuffixDrafter | None = None, shape: TreeShape = BRANCHES_SHAPE,
                 min_chance: float = MIN_CHANCE, iteration_ms: Callable[[int], float] | None = None):
        self.model, self.suffix = model, suffix or SuffixDrafter()
        self.branches_shape, self.min_chance, self.iteration_ms = shape, min_chance, iteration_ms
        self.verifier, self.layout, self.drafter = model.verifier, model.layout, model.drafter
        self.verify_phase_kind = model.verify_phase_kind
        self.extra_nodes = model.extra_nodes + shape.verify
        self.proposals: list = []  # the last draft's suffix proposals (yggc.tree.suffix_match.Proposal)

    @property
    def shape(self) -> TreeShape:
        return self.model.shape

    @property
    def trace(self):
        return self.model.trace

    @trace.setter
    def trace(self, trace) -> None:
        self.model.trace = trace  # where the model proposer times its draft phase

    def set_shape(self, shape: TreeShape) -> None:
        self.model.set_shape(shape)

    def reusable(self, prompt_ids: list[int]) -> int:
        return self.model.reusable(prompt_ids)

    def prefill(self, prompt_ids: list[int], start: int) -> torch.Tensor:
        self.suffix.restart(prompt_ids)
        return self.model.prefill(prompt_ids, start)

    def propose(self, request: DraftRequest) -> Draft:
        """Greedy: the model's tree with the branches. T > 0: with suffix proposals, the model's greedy-grown tree
        and the branches, verified by the point-mass multi-draft rule; without, the model's own sampled draft and
        its rule (the rule follows the draft)."""
        self.proposals = self.suffix.propose(request.pending, request.n, self.branches_shape.depth,
                                             self.branches_shape.width)
        if request.params.greedy:
            return self.with_branches(self.model.propose(request))
        if not self.proposals:
            return self.model.propose(request)
        greedy = DraftRequest(request.pending, request.n, GREEDY, request.gen, None, request.sampled_tree)
        return self.with_branches(self.model.propose(greedy))

    def accept(self, new: list[int], last_id: int, draft: Draft, moves: torch.Tensor,
               rows: tuple[torch.Tensor, ...]) -> list[int]:
        self.suffix.rates.record_outcome(self.proposals, new)
        self.suffix.index.extend(new[:-1])  # the bonus token (the next root) joins with the next draft
        return self.model.accept(new, last_id, draft, moves, rows)

    def with_branches(self, draft: Draft) -> Draft:
        """The model's `draft` with the suffix branches merged in, a point-mass draft."""
        V = self.branches_shape.verify
        t = draft.tree
        tokens, parents = t.tokens[:t.n_nodes].tolist(), t.parents[:t.n_nodes].tolist()
        depth, cum = t.depth[:t.n_nodes].tolist(), t.cum_logp[:t.n_nodes].tolist()
        n_head = len(tokens)
        child = {(parents[i], tokens[i]): i for i in range(1, n_head)}
        for proposal in self.proposals:
            node = 0
            for i, token in enumerate(proposal.tokens):
                chance = self.suffix.rates.chance(proposal.match, i + 1)
                if chance < self.min_chance:
                    break
                logp = math.log(chance)
                nxt = child.get((node, token))
                if nxt is None:
                    if len(tokens) - n_head == V:
                        break
                    nxt = child[(node, token)] = len(tokens)
                    tokens.append(token), parents.append(node), depth.append(depth[node] + 1), cum.append(logp)
                cum[nxt] = max(cum[nxt], logp)
                node = nxt
        if len(tokens) == n_head and self.iteration_ms is None:
            return replace(draft, point_mass=True)
        on = {"device": t.tokens.device}
        tree = TokenTree(torch.tensor(tokens, **on), torch.tensor(parents, **on), torch.tensor(depth, **on),
                         torch.tensor(cum, dtype=t.cum_logp.dtype, **on), len(tokens))
        if self.iteration_ms is None:
            verify = min(self.shape.verify, n_head - 1) + len(tokens) - n_head
        else:
            verify = best_verify_count(ranked_values(parents, depth, cum), self.iteration_ms)
        anc = torch.from_numpy(host.ancestor_rows(parents)).to(t.tokens.device)  # model nodes, then suffix nodes
        return Draft(tree, None, draft.n_fed, anc, verify=verify, point_mass=True)


def ranked_values(parents: list[int], depth: list[int], cum_logp: list[float]) -> list[float]:
    """The non-root nodes' chances of acceptance, best first, in prune.rank_nodes' order (a node's value is the
    least along its path, so every prefix is a rooted subtree); parents precede their children in id order."""
    key = list(cum_logp)
    for i in range(1, len(key)):
        key[i] = min(key[i], key[parents[i]])
    order = sorted(range(1, len(key)), key=lambda i: (-key[i], depth[i], i))
    return [math.exp(key[i]) for i in order]


def with_suffix_branches(decoder: SpeculativeDecoder, suffix: SuffixDrafter | None = None,
                         shape: TreeShape = BRANCHES_SHAPE, min_chance: float = MIN_CHANCE,
                         iteration_ms: Callable[[int], float] | None = None) -> SpeculativeDecoder:
    """`decoder` (of any model proposer) drafting the suffix branches beside its model's from now on; `shape`:
    tokens per branch, branches, suffix nodes added at most. iteration_ms(r): what an iteration verifying r nodes
    costs (a bundle's profile, plan.bundle_profile.iteration_cost): each draft then verifies the number of its best
    nodes that makes the most tokens per ms; None: the shape's V plus every suffix node added. A decoder that has them
    already is returned as it is."""
    if not has_suffix_branches(decoder):
        decoder.proposer = SuffixBranches(decoder.proposer, suffix, shape, min_chance, iteration_ms)
    return decoder


def has_suffix_branches(decoder) -> bool:
    """Whether `decoder` (any decoder) drafts suffix branches beside its model's tree."""
    return isinstance(getattr(decoder, "proposer", None), SuffixBranches)
