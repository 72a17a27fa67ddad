"""Suffix drafting: the text's own repeats as the drafts (`yggc run --suffix`, no drafter model).

Each iteration the drafts are the continuations of the longest suffix of the text so far (prompt and output)
that also ends earlier in it (yggc/tree/suffix_match.py): up to `width` branches, one per distinct next
token, each up to `depth` tokens, at most `verify` nodes in all. The verifier scores the tree in one call and
the usual rules accept from it: greedy argmax, or at T > 0 the multi-draft rule for point-mass drafts
(verification.verify_tree_sampling), exact for any fixed tree. A text that does not repeat drafts nothing,
and the iteration is one verifier step.
"""
from __future__ import annotations

import torch

from ...artifacts.cache_layout import CacheLayout, prefill
from ...artifacts.timing import NoTrace
from ...plan.shape import TreeShape
from ...tree.suffix_match import MatchRates, Proposal, SuffixIndex
from ...tree.token_tree import TokenTree
from ..autoregressive import PREFILL_CHUNK
from ..draft import Draft, DraftRequest
from ..loading import model_device
from ..verify_phase import GreedyVerifyPhase

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

    def propose(self, pending: list[int], n: int, depth: int, width: int) -> list[Proposal]:
        """At most `width` continuations of at most `depth` tokens after root pending[-1] at slot n; the index is
        first brought to the n + 1 committed tokens (pending holds those it has not seen)."""
        missing = n + 1 - len(self.index.tokens)
        if missing > 0:
            self.index.extend(pending[-missing:])
        return self.index.propose(depth, width)


class SuffixProposer:
    """Proposer whose drafts are the text's suffix matches (SuffixDrafter) instead of a drafter model's; `shape`:
    depth = tokens per branch, width = branches, verify = nodes verified at most."""

    name = "suffix"
    description = "suffix matches of the text so far (no drafter model)"
    verify_phase_kind = GreedyVerifyPhase
    extra_nodes = 0
    drafter = None  # no model: nothing for the prompt cache to note
    trace = NoTrace()  # nothing to time: drafting is a lookup

    def __init__(self, verifier, suffix: SuffixDrafter, layout: CacheLayout, shape: TreeShape):
        self.verifier, self.suffix, self.layout, self.shape = verifier, suffix, layout, shape
        self.device = model_device(verifier)
        self.proposals: list[Proposal] = []  # the last draft's branches, cut to the tokens kept

    def set_shape(self, shape: TreeShape) -> None:
        self.shape = shape

    def reusable(self, prompt_ids: list[int]) -> int:
        return len(prompt_ids)  # the index is rebuilt from any prompt at once

    def prefill(self, prompt_ids: list[int], start: int) -> torch.Tensor:
        self.suffix.restart(prompt_ids)
        return prefill(self.verifier, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)

    def propose(self, request: DraftRequest) -> Draft:
        """The suffix tree of the text up to the root (at slot n): branches in the order proposed. Under a grammar
        the loop's host rule masks every verified row; at T > 0 the point-mass rule keeps p exact."""
        D, W, V = self.shape.depth, self.shape.width, self.shape.verify
        tokens, parents, depth, logp = [request.pending[-1]], [-1], [0], [0.0]
        self.proposals = []
        for rank, proposal in enumerate(self.suffix.propose(request.pending, request.n, min(D, V), W)):
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
        return Draft(tree, None, 0, tree.ancestor_mask(), point_mass=True)

    def accept(self, new: list[int], last_id: int, draft: Draft, moves: torch.Tensor,
               rows: tuple[torch.Tensor, ...]) -> list[int]:
        self.suffix.rates.record_outcome(self.proposals, new)
        self.suffix.index.extend(new)
        return new[-1:]
