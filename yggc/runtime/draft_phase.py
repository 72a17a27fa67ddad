"""The whole EGT draft phase as one fixed-shape module: head step + D-1 tree steps + top-W selection.

No Python control flow depends on data, so one export compiles D drafter calls and the on-device
top-W growth into a single call (yggdrasil.txt, section 4.2: all draft graphs launched at once).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..plan.shape import HEAD_WIDTH
from ..tree.egt import egt_from_root, egt_frontier, egt_step
from ..tree.token_tree import tree_mask


def align_vocab(logits: torch.Tensor, vocab: int) -> torch.Tensor:
    """Drafter logits [W, Vd] -> [W, vocab]: drop padding rows or give missing ids -inf."""
    if logits.shape[-1] >= vocab:
        return logits[..., :vocab]
    pad = logits.new_full((*logits.shape[:-1], vocab - logits.shape[-1]), float("-inf"))
    return torch.cat([logits, pad], dim=-1)


@dataclass(frozen=True)
class FrozenPhase:
    """A draft phase an O2 bundle compiles with the drafter's weights frozen in (DrafterKind.frozen_draft_phase):
    its package takes the module's forward inputs, then module.cache_tensors(), then the `fed` parameters."""
    module: nn.Module        # the phase: forward(*inputs, *caches), export_inputs(), cache_tensors()
    unused: tuple[str, ...]  # parameters (by the module's names) the phase never reads: not in the package
    fed: tuple[str, ...]     # parameters passed in after the caches instead of frozen in: tables the runtime shares

    def fed_tensors(self) -> tuple[torch.Tensor, ...]:
        params = dict(self.module.named_parameters(remove_duplicate=False))
        return tuple(params[name] for name in self.fed)


class DraftPhase(nn.Module):
    """`tree_drafter` (default: the drafter) runs the D - 1 tree steps: a fuzzy drafter (graphs/fuzzy.py)
    drafts faster there, while the head step stays exact."""

    def __init__(self, drafter: nn.Module, depth: int, width: int, vocab: int, trash: int,
                 tree_drafter: nn.Module | None = None):
        super().__init__()
        self.drafter, self.depth, self.width, self.vocab, self.trash = drafter, depth, width, vocab, trash
        self.tree_drafter = tree_drafter  # None: the drafter (not registered twice, for export)

    def head(self, pending_tokens, root_row, n, view_slots) -> torch.Tensor:
        """Feed the tokens the drafter has not seen, root last at slot n (padding rows go to the trash
        slot) -> root logits [vocab]. pending_tokens [P] (HEAD_WIDTH, or more after a bonus calibration),
        root_row [] (index of the root), n []."""
        rows = torch.arange(pending_tokens.shape[0], device=pending_tokens.device)
        slots = torch.where(rows <= root_row, n - root_row + rows, self.trash)  # position = slot
        mask = view_slots[None, :] <= slots[:, None]  # causal; padding rows see everything harmlessly
        logits = self.drafter(pending_tokens, slots, slots, mask)  # [P, Vd]
        return align_vocab(logits.index_select(0, root_row.view(1))[0], self.vocab)

    def export_inputs(self, max_seq: int, device: str) -> tuple[tuple[torch.Tensor, ...], int]:
        """Example inputs for torch.export, and the index of view_slots (its length is the dynamic dim)."""
        long = {"dtype": torch.long, "device": device}
        return (torch.zeros(HEAD_WIDTH, **long), torch.tensor([0, 1], **long), torch.arange(max_seq, device=device),
                torch.zeros(2, self.depth, **long)), 2

    def forward(self, pending_tokens, meta, view_slots, moves):
        """pending_tokens [P] (root last), meta [2] = (root row, root slot n), view_slots [S] = arange(S)
        (its length is the cache view), moves [2, D] = K/V (src, dst) slots the last acceptance left for
        the drafter -> tree tokens, parents, depth [N] long, cum_logp [N], ancestors [N, N]; N = 1 + D*W."""
        W, view = self.width, view_slots.shape[0]
        root_row, n = meta[0], meta[1]
        self.drafter.move_kv(moves[0], moves[1])
        root_logits = self.head(pending_tokens, root_row, n, view_slots)
        state = egt_from_root(pending_tokens.index_select(0, root_row.view(1)), root_logits, self.depth, W, self.vocab)
        tree_drafter = self.drafter if self.tree_drafter is None else self.tree_drafter
        for _ in range(self.depth - 1):
            f = egt_frontier(state)
            logits = tree_drafter(f.tokens, n + f.depth, n + f.ids, tree_mask(n, f.mask, view))
            state = egt_step(state, torch.log_softmax(align_vocab(logits, self.vocab), -1))
        return state.tokens, state.parents, state.depth, state.cum_logp, state.anc
