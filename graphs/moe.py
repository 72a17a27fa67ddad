"""A sparse (mixture-of-experts) feed-forward for W tokens with fixed shapes: Mixtral and Qwen2-MoE.

Each token's router picks its top-k experts. At batch 1 a step is memory-bound, so what a step costs is
which experts' weights it reads: MoESD's N(t) = E(1 - (1 - K/E)^t) distinct experts for t tokens. Every
expert is one `torch.cond` branch that runs only when some token routes to it, so the expert's weights
are read only then; it runs over all W rows (W is small) and a row it does not serve gets weight exactly
0, so each row's output does not depend on the other rows. No data-dependent Python control flow:
torch.export keeps the branches in one graph and the draft/verify phases stay one compiled call each.
"""
from __future__ import annotations

import torch
from torch import nn

from .config import ModelConfig, MoeConfig
from .mlp import GatedMLP


def route(logits: torch.Tensor, top_k: int, renormalize: bool) -> torch.Tensor:
    """Router logits [W, E] -> mixing weights [W, E] float32: the softmax probability of each token's top_k
    experts (renormalised to sum 1 when asked), exactly 0 for the others."""
    probs = torch.softmax(logits.float(), dim=-1)
    top, idx = probs.topk(top_k, dim=-1)  # [W, K]
    if renormalize:
        top = top / top.sum(-1, keepdim=True)
    return torch.zeros_like(probs).scatter(1, idx, top)


def _run_expert(expert: nn.Module):
    def run(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return expert(x).float() * weight[:, None]  # [W, hidden]

    return run


def _skip(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return x.new_zeros(x.shape, dtype=torch.float32)


class MoeFeedForward(nn.Module):
    def __init__(self, hidden: int, moe: MoeConfig):
        super().__init__()
        self.moe = moe
        self.router = nn.Linear(hidden, moe.n_experts, bias=False)
        self.experts = nn.ModuleList(GatedMLP(hidden, moe.expert_size) for _ in range(moe.n_experts))
        if moe.shared_expert_size:
            self.shared = GatedMLP(hidden, moe.shared_expert_size)
            self.shared_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x [W, hidden] -> [W, hidden]; mixed in float32
        mix = route(self.router(x), self.moe.top_k, self.moe.norm_topk_prob)  # [W, E]
        out = x.new_zeros(x.shape, dtype=torch.float32)
        for e, expert in enumerate(self.experts):
            weight = mix[:, e]
            out = out + torch.cond(weight.gt(0).any(), _run_expert(expert), _skip, (x, weight))
        if self.moe.shared_expert_size:
            out = out + torch.sigmoid(self.shared_gate(x)).float() * self.shared(x).float()
        return out.to(x.dtype)


def feed_forward(cfg: ModelConfig, layer: int) -> nn.Module:
    """Layer `layer`'s feed-forward: sparse where the config says so, else a dense gated MLP."""
    if cfg.moe is not None and layer in cfg.moe.sparse_layers:
        return MoeFeedForward(cfg.hidden_size, cfg.moe)
    return GatedMLP(cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias)
