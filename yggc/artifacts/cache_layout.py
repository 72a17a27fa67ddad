"""Where tokens live in a model's static KV cache, and the attention masks that follow from it.

Slots 0..max_seq-1 hold real tokens (committed prefix, then scratch for draft trees); slot
max_seq is a trash slot that padding rows write to and no mask ever lets a real query see.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

# Attention reads a prefix of the cache rounded up to a multiple of this, not all of it. On CUDA each view
# length is one more captured graph; on a CPU the view is a dynamic size and attention's cost is linear in it.
VIEW_ALIGN = {"cuda": 128, "cpu": 32}


def view_align(device: str | torch.device) -> int:
    return VIEW_ALIGN.get(torch.device(device).type, VIEW_ALIGN["cuda"])


@dataclass(frozen=True)
class CacheLayout:
    max_seq: int
    align: int = VIEW_ALIGN["cuda"]

    @property
    def n_slots(self) -> int:
        return self.max_seq + 1

    @property
    def trash(self) -> int:
        return self.max_seq

    def view(self, n_used: int) -> int:
        """Cache prefix length the next call must attend over when slots < n_used are in use."""
        return min(-(-n_used // self.align) * self.align, self.max_seq)  # no real query sees the trash slot


def causal_rows(slots: torch.Tensor, view: int) -> torch.Tensor:
    """slots [W] of a linear sequence -> mask [W, view]: each query sees every slot up to its own."""
    return torch.arange(view, device=slots.device)[None, :] <= slots[:, None]


def takes_width(model, width: int) -> bool:
    """Whether a call of `width` rows runs as fast as it can: a graph, or a bundle's model with a bucket or an O2
    package for it (not the eager fallback of a model whose buckets miss that width)."""
    runner = getattr(model, "runner", None)
    return runner is None or runner(width) is not None


def prefill(model, ids: list[int], start: int, layout: CacheLayout, chunk: int) -> torch.Tensor:
    """Write K/V of `ids` at slots start.. in chunks of `chunk` rows -> last logits [V]. The last chunk runs at its
    own width where the model takes it (a follow-up turn's few new tokens are not padded to a whole chunk), else
    padded (padding rows go to the trash slot)."""
    logits = None
    for c0 in range(0, len(ids), chunk):
        part = ids[c0:c0 + chunk]
        n_real = len(part)
        width = n_real if takes_width(model, n_real) else chunk
        slots = torch.full((width,), layout.trash, dtype=torch.long)
        slots[:n_real] = torch.arange(start + c0, start + c0 + n_real)
        tokens = torch.zeros(width, dtype=torch.long)
        tokens[:n_real] = torch.tensor(part)
        positions = torch.where(slots == layout.trash, 0, slots)
        mask = causal_rows(slots, layout.view(start + c0 + n_real))
        logits = model(tokens, positions, slots, mask)[n_real - 1]
    return logits
