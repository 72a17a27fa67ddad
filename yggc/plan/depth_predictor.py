"""The draft-depth predictor (yggdrasil.txt, 4.1-4.2): per iteration, the tree shape worth drafting.

Input: a summary of the verifier's distribution at the iteration's root (the row that produced the
bonus token): its top-K log-probabilities and its entropy. Both are functions of the verifier's last
hidden state, read off logits the verify phase computes anyway, so the predictor needs no extra model
output and no extra call (the paper feeds the hidden state itself; a confident verifier is what makes
long accepted paths likely, and these K + 1 numbers say how confident it is).

Model: a two-layer MLP encoder and one head per candidate depth; head d predicts the tokens an
iteration yields with that depth's tree shape (its width and verify budget chosen by the objective at
that depth). The policy picks the depth whose predicted tokens per estimated millisecond is highest.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import nn

from .bundle_plan import AdaptivePlan
from .shape import TreeShape

TOP_K = 8
N_FEATURES = TOP_K + 1


def root_features(logits: torch.Tensor) -> torch.Tensor:
    """logits [..., vocab] -> [..., TOP_K + 1]: the top-K log-probabilities (descending) and the entropy (float32)."""
    logp = torch.log_softmax(logits.float(), -1)
    entropy = -(logp.exp() * logp).nan_to_num().sum(-1, keepdim=True)
    return torch.cat([logp.topk(TOP_K, -1).values, entropy], -1)


class DepthPredictor(nn.Module):
    """features [B, F] -> predicted tokens per iteration [B, S], one head per candidate shape."""

    def __init__(self, n_shapes: int, n_features: int = N_FEATURES, hidden: int = 32):
        super().__init__()
        self.register_buffer("mean", torch.zeros(n_features))
        self.register_buffer("std", torch.ones(n_features))
        self.encoder = nn.Sequential(nn.Linear(n_features, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU())
        self.heads = nn.Linear(hidden, n_shapes)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return 1.0 + nn.functional.softplus(self.heads(self.encoder((features - self.mean) / self.std)))


@dataclass(frozen=True)
class DepthPolicy:
    """The trained predictor over its candidate shapes (one per depth) and their estimated iteration times."""
    predictor: DepthPredictor
    shapes: tuple[TreeShape, ...]
    iteration_ms: tuple[float, ...]
    ms: torch.Tensor = field(init=False, repr=False, compare=False)  # [S] iteration_ms, built once

    def __post_init__(self):
        object.__setattr__(self, "ms", torch.tensor(self.iteration_ms))

    def choose_index(self, features: torch.Tensor) -> torch.Tensor:
        """features [B, F] -> [B] index of the shape with the most predicted tokens per millisecond."""
        with torch.no_grad():
            tokens = self.predictor(features.float().to(self.predictor.mean.device))
        return (tokens / self.ms).argmax(-1)

    def choose(self, features: torch.Tensor) -> TreeShape:
        """features [F] of one root -> the shape to draft this iteration."""
        return self.shapes[int(self.choose_index(features[None])[0])]

    def recorded_in(self, plan: AdaptivePlan) -> AdaptivePlan:
        """plan with what from_plan rebuilds this policy from (beside its weights, the predictor's state dict)."""
        return replace(plan, shapes=self.shapes, iteration_ms=tuple(round(t, 4) for t in self.iteration_ms),
                       n_features=self.predictor.mean.shape[0], hidden=self.predictor.heads.in_features)

    @classmethod
    def from_plan(cls, plan: AdaptivePlan, state: dict[str, torch.Tensor]) -> DepthPolicy:
        """The policy a plan records (recorded_in), with its predictor's weights."""
        predictor = DepthPredictor(len(plan.shapes), plan.n_features, plan.hidden)
        predictor.load_state_dict(state)
        return cls(predictor.eval(), plan.shapes, plan.iteration_ms)


def shape_per_depth(tokens_per_iter: dict[TreeShape, float], iteration_ms) -> dict[int, TreeShape]:
    """Depth -> the (W, V) the objective ranks first at that depth (the paper's width choice at the
    predicted depth): most tokens per estimated millisecond, ties to the smaller tree."""
    best: dict[int, TreeShape] = {}
    for s, t in sorted(tokens_per_iter.items(), key=lambda kv: (kv[0].n_nodes, kv[0].verify)):
        if s.depth not in best or t / iteration_ms(s) > tokens_per_iter[best[s.depth]] / iteration_ms(best[s.depth]):
            best[s.depth] = s
    return dict(sorted(best.items()))
