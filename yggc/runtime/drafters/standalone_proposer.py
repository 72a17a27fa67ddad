"""The standalone proposer: a small LM with the verifier's tokenizer drafting an Equal-Growth Tree on its own KV
cache (the fused DraftPhase), verified by GreedyVerifyPhase, which hands back the accepted path's K/V moves.

Cache invariant at the top of an iteration: the committed sequence minus its last token (the root) is in the
drafter's cache at slots 0..n-1, as in the verifier's. Tree node i sits at slot n + i while drafting; after
acceptance the accepted path's K/V is moved to slots n+1.. so the cache reads as if the drafter had decoded the
accepted tokens itself. It may lag one token (an accepted leaf it never ran on); the next head step feeds it
together with the new root, and a path through nodes it never ran on (suffix branches) is fed before that.
"""
from __future__ import annotations

import torch
from torch import nn

from ...artifacts.cache_layout import CacheLayout, prefill
from ...artifacts.timing import NoTrace
from ...plan.shape import HEAD_WIDTH, TreeShape
from ...tree.sampled_egt import RANK_ACCEPTANCE
from ...tree.token_tree import tree_mask
from .. import model_drafting, prompt_cache
from ..autoregressive import PREFILL_CHUNK
from ..draft import Draft, DraftRequest
from ..draft_phase import DraftPhase, align_vocab
from ..loading import model_device
from ..verify_phase import GreedyVerifyPhase


class StandaloneProposer:
    """Proposer of a standalone drafter LM. tree_drafter (default: the drafter) runs the D - 1 tree steps;
    recompute_accepted: the accepted tokens' drafter K/V are not moved but fed again with the bonus token in the
    next head step (EasySpec's bonus calibration, drafters/fuzzy_proposer.py)."""

    name = "llama"
    description = "a standalone drafter"
    verify_phase_kind = GreedyVerifyPhase
    extra_nodes = 0

    def __init__(self, verifier, drafter, layout: CacheLayout, shape: TreeShape, draft_phase=None,
                 tree_drafter: nn.Module | None = None, recompute_accepted: bool = False):
        self.verifier, self.drafter, self.layout = verifier, drafter, layout
        self.vocab, self.device = verifier.cfg.vocab_size, model_device(verifier)
        self.tree_drafter, self.recompute_accepted = tree_drafter, recompute_accepted
        self.phases = model_drafting.DraftPhases(self.make_phase, layout, self.device, shape, draft_phase)
        self.rank_rates: tuple[float, ...] | None = RANK_ACCEPTANCE
        self.trace = NoTrace()
        self.set_shape(shape)
        self.moves = self.no_moves  # [2, D] accepted K/V (src, dst) the drafter still has to move

    def make_phase(self, shape: TreeShape) -> nn.Module:
        return DraftPhase(self.drafter, shape.depth, shape.width, self.vocab, self.layout.trash,
                          tree_drafter=self.tree_drafter)

    def set_shape(self, shape: TreeShape) -> None:
        self.shape = shape
        self.phases.set_shape(shape)
        self.no_moves = torch.full((2, shape.depth), self.layout.trash, dtype=torch.long, device=self.device)
        # rows of a head step: the root and at most one accepted leaf, or every accepted token and the bonus
        self.head_width = shape.depth + 1 if self.recompute_accepted else HEAD_WIDTH

    def reusable(self, prompt_ids: list[int]) -> int:
        return prompt_cache.reusable(self.drafter, prompt_ids, len(prompt_ids) - 1)

    def prefill(self, prompt_ids: list[int], start: int) -> torch.Tensor:
        prefill(self.drafter, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)
        return prefill(self.verifier, prompt_ids[start:], start, self.layout, PREFILL_CHUNK)

    def propose(self, request: DraftRequest) -> Draft:
        return model_drafting.propose(self, request)

    def accept(self, new: list[int], last_id: int, draft: Draft, moves: torch.Tensor,
               rows: tuple[torch.Tensor, ...]) -> list[int]:
        """The next head step feeds the root and the accepted tokens the drafter never ran on (all of them where
        it recomputes them: the moves are dropped)."""
        if self.recompute_accepted:
            return list(new)
        self.moves = moves
        return new[draft.fed_on_path(last_id, len(new) - 1):]

    def catch_up(self, pending: list[int], n: int) -> list[int]:
        """The pending tokens (root last, at slot n) beyond what one head step takes fed to the drafter now, after
        the K/V moves the last acceptance left -> what the head step still feeds. Only a path through drafts the
        drafter never ran on (suffix branches) leaves more than head_width."""
        extra = len(pending) - self.head_width
        if extra <= 0:
            return pending
        self.drafter.move_kv(*self.moves)
        self.moves = self.no_moves
        prefill(self.drafter, pending[:extra], n + 1 - len(pending), self.layout, PREFILL_CHUNK)
        return pending[extra:]

    # -- ModelSteps ------------------------------------------------------------------------------------
    def head_inputs(self, pending: list[int], n: int) -> tuple[torch.Tensor, ...]:
        """Tokens the drafter has not seen (root last, at slot n), padded to head_width; (root row, n)."""
        tokens = torch.tensor(pending + [0] * (self.head_width - len(pending)))
        meta = torch.tensor([len(pending) - 1, n])
        return tokens, meta, self.phases.view_slots(n + self.shape.n_nodes)

    def phase_inputs(self, pending: list[int], n: int) -> tuple[torch.Tensor, ...]:
        return (*self.head_inputs(pending, n), self.moves)

    def root_logits(self, pending: list[int], n: int) -> torch.Tensor:
        tokens, meta, view = self.head_inputs(pending, n)
        self.drafter.move_kv(*self.moves)
        return self.phases.module.head(tokens, meta[0], meta[1], view)

    def node_logits(self, tokens, parents, ids, depth, anc_rows, n: int, view: int) -> torch.Tensor:
        model = self.drafter if self.tree_drafter is None else self.tree_drafter
        return align_vocab(model(tokens, n + depth, n + ids, tree_mask(n, anc_rows, view)), self.vocab)
