"""The gated feed-forward every Llama-family layer (and each MoE expert) uses."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class GatedMLP(nn.Module):
    """silu(x W_gate) * (x W_up) -> W_down, gate and up fused in one weight."""

    def __init__(self, hidden: int, ffn: int, bias: bool = False):
        super().__init__()
        self.ffn = ffn
        self.w13 = nn.Linear(hidden, 2 * ffn, bias=bias)  # gate | up
        self.w2 = nn.Linear(ffn, hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).split(self.ffn, -1)
        return self.w2(F.silu(gate) * up)
