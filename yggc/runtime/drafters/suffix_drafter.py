"""Suffix drafting: the text's own repeats as the drafts (`yggc run --suffix`, no drafter model).

Each iteration the drafts are the continuations of the longest suffix of the text so far (prompt and output)
that also ends earlier in it (yggc/tree/suffix_match.py): up to `width` branches, one per distinct next
token, each up to `depth` tokens, at most `verify` nodes in all. The verifier scores the tree in one call and
the usual rules accept from it: greedy argmax, or at T > 0 the multi-draft rule for point-mass drafts
(verification.verify_tree_sampling), exact for any fixed tree. A text that does not repeat drafts nothing,
and the iteration is one verifier step.
"""
from __future__ import annotations

from functools import cached_property

import torch

from ...artifacts import kernel_ops
from ...artifacts.cache_layout import CacheLayout, prefill
from ...plan.shape import TreeShape
from ...tree.sampling import SamplingParams
from ...tree.suffix_match import MatchRates, Proposal, SuffixIndex
from ...tree.token_tree import TokenTree
from .. import prompt_cache
from ..autoregressive import PREFILL_CHUNK
from ..draft import Draft
from ..speculative import SpeculativeDecoder
from ..verify_phase import GreedyVerifyPhase

GREEDY = SamplingParams()
SUFFIX_SHAPE = TreeShape(6, 2, 8)  # tokens per branch, branches, nodes verified at most (yggc run --suffix)


class SuffixDrafter:
    """The drafter's state: the index of the text so far and the measured acceptance per match length."""

    def __init__(self, min_n: int = 2, max_n: int = 8):
        self.min_n, self.max_n = min_n, max_n
        self.index = SuffixIndex(min_n, max_n)
        self.rates = MatchRates()

    def restart(self, tokens: list[int]) -> None:
        """Index `tokens` (a new request's prompt): what it shares with the text indexed last is kept."""
        held, shared = self.index.tokens, 0
        while shared < min(len(held), len(tokens)) and held[shared] == tokens[shared]:
            shared += 1
        self.index.truncate(shared)
        self.index.extend(tokens[shared:])


class PointMassGreedy:
    """Mixin for decoders whose drafts are point masses (suffix proposals, alone or beside a model's tree): greedy
    verification is the multi-draft rule at T = 0, which accepts the greedy path through every branch. Siblings
    hold distinct tokens, so that path is the one the greedy verify phase finds: on the CPU its C++ path runs it
    (one call with the verifier's package where the runner has it), else the host rule."""

    @cached_property
    def point_phases(self) -> dict[int, GreedyVerifyPhase]:
        """V -> a greedy verify phase of the decoder's kind (verify_phase_kind) checking paths to depth V."""
        return {}

    def verify_greedy(self, draft: Draft, n: int) -> tuple[list[int], int, int]:
        if self.device.type != "cpu" or self.top_logprobs is not None or not kernel_ops.has_tree_ops():
            return self.verify_sampled(draft, n, GREEDY, None)
        return self.verify_greedy_ops(draft, n)

    def verify_greedy_ops(self, draft: Draft, n: int) -> tuple[list[int], int, int]:
        """The verify phase's tree ops on the draft's own verify count V, its paths checked to depth V; the
        drafter's K/V moves cut to the nodes it ran on (deeper ones are suffix drafts)."""
        V, t, N = draft.n_verified(self.shape.verify), draft.tree, draft.tree.n_nodes
        if V not in self.point_phases:
            self.point_phases[V] = self.verify_phase_kind(self.verifier, V, V)
        tree = (t.tokens, t.parents, t.depth, t.cum_logp, draft.anc)
        if t.capacity != N:  # padded (suffix drafting alone): the nodes in use
            tree = (*(x[:N] for x in tree[:4]), draft.anc[:N, :N])
        emit, info, self.bonus_logits, moves, *rows = self.point_phases[V].forward_ops(*tree, n, self.layout.view(n + V + 1))
        k, last_id, max_depth = info.tolist()
        fed = min(k, self.shape.depth)
        drafter_moves = self.no_moves.clone()
        drafter_moves[:, :fed] = moves[:, :fed]
        self.take_verify_outputs([drafter_moves, *rows], slice(0, k + 1))
        return emit[: k + 1].tolist(), last_id, max_depth


class SuffixDecoder(PointMassGreedy, SpeculativeDecoder):
    """Tree speculative decoding whose drafts are suffix matches (SuffixDrafter) instead of a drafter model's;
    `shape`: depth = tokens per branch, width = branches, verify = nodes verified at most."""

    def __init__(self, verifier, drafter: SuffixDrafter, layout: CacheLayout, shape: TreeShape, *args, **kwargs):
        super().__init__(verifier, drafter, layout, shape, *args, **kwargs)
        self.proposals: list[Proposal] = []  # the last draft's branches, cut to the tokens kept

    def make_draft_phase(self) -> None:
        return None  # nothing to run: drafting is a lookup

    def make_verify_phase(self) -> None:
        return None  # trees of any size up to V: verified on the host (verify_sampled)

    def prefill_models(self, prompt_ids: list[int], start: int = 0) -> torch.Tensor:
        self.drafter.restart(prompt_ids)
        return prefill(self.verifier, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)

    def prefill_start(self, prompt_ids: list[int]) -> int:
        return prompt_cache.reusable(self.verifier, prompt_ids, len(prompt_ids) - 1)

    def draft_tree(self, pending: list[int], n: int) -> Draft:
        """The suffix tree of the text up to root pending[-1] (at slot n): branches in the order proposed."""
        index = self.drafter.index
        missing = n + 1 - len(index.tokens)  # the index holds the n + 1 committed tokens, the root last
        if missing > 0:
            index.extend(pending[-missing:])
        D, W, V = self.shape.depth, self.shape.width, self.shape.verify
        tokens, parents, depth, logp = [pending[-1]], [-1], [0], [0.0]
        self.proposals = []
        for rank, proposal in enumerate(index.propose(min(D, V), W)):
            taken = proposal.tokens[: 1 + V - len(tokens)]
            if not taken:
                break
            self.proposals.append(Proposal(proposal.match, taken))
            for i, token in enumerate(taken):
                parents.append(0 if i == 0 else len(tokens) - 1)
                tokens.append(token)
                depth.append(i + 1)
                logp.append(-(i + 1) - 1e-3 * rank)  # a path's nodes rank before its later ones
        pad = 1 + V - len(tokens)
        tree = TokenTree(torch.tensor(tokens + [0] * pad, device=self.device),
                         torch.tensor(parents + [-1] * pad, device=self.device),
                         torch.tensor(depth + [0] * pad, device=self.device),
                         torch.tensor(logp + [0.0] * pad, device=self.device), len(tokens))
        return Draft(tree, None, 0, tree.ancestor_mask())

    def draft_tree_constrained(self, pending: list[int], n: int) -> Draft:
        return self.draft_tree(pending, n)  # under a grammar: verify_sampled masks every verified row

    def draft_sampled(self, pending: list[int], n: int, params: SamplingParams, gen: torch.Generator) -> Draft:
        return self.draft_tree(pending, n)  # point-mass drafts: verify_sampled's multi-draft rule keeps p exact

    def record(self, max_depth: int, n_verified: int, n_accepted: int) -> None:
        drafted = sum(len(p.tokens) for p in self.proposals)  # the tokens proposed, not the shape's V
        super().record(max_depth, drafted, n_accepted)

    def take_verify_outputs(self, handoff: list[torch.Tensor], path_rows: torch.Tensor | slice) -> None:
        pass  # no drafter cache to move

    def next_pending(self, new: list[int], last_id: int, draft: Draft) -> list[int]:
        self.drafter.rates.record_outcome(self.proposals, new)
        self.drafter.index.extend(new)
        return new[-1:]
