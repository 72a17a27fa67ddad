"""The latency-aware objective (yggdrasil.txt, 4.1, Eq. 3) that picks an Equal-Growth Tree shape.

    speedup(D, W, V) = tokens per iteration x T_verifier(1) / (T_draft(D, W) + T_verifier(V + 1) + host)

A draft phase is one head step (the root plus a pending token: width HEAD_WIDTH) and D - 1 steps at
width W; verification runs the root and V nodes; tokens per iteration counts the verifier's bonus token.
"""
from __future__ import annotations

from dataclasses import dataclass

from .shape import TreeShape
from .stages import StageCosts


@dataclass(frozen=True)
class ShapeScore:
    shape: TreeShape
    tokens_per_iter: float  # mean accepted drafts + 1, from calibration
    iteration_ms: float     # estimated from the cost curves
    speedup: float          # over the verifier decoding alone

    @property
    def ms_per_token(self) -> float:
        return self.iteration_ms / self.tokens_per_iter

    def to_dict(self) -> dict:
        return {"depth": self.shape.depth, "width": self.shape.width, "verify": self.shape.verify,
                "tokens_per_iter": round(self.tokens_per_iter, 4), "iteration_ms": round(self.iteration_ms, 4),
                "ms_per_token": round(self.ms_per_token, 4), "speedup": round(self.speedup, 4)}


def score(shape: TreeShape, tokens_per_iter: float, costs: StageCosts) -> ShapeScore:
    it_ms = costs.iteration_ms(shape)
    return ShapeScore(shape, tokens_per_iter, it_ms, tokens_per_iter * costs.verifier(1) / it_ms)


def measured_speedup(tokens_per_iter: float, verifier_step_ms: float, iteration_ms: float) -> float:
    """Eq. 3 with measured latencies: the compiled draft and verify phases of the chosen shape against
    the compiled 1-token verifier step. The fitted curves that rank shapes can miss a CPU whose GEMMs
    are slower at 2-8 rows than at 1 or 16; this is the check the plan must pass to be used."""
    return tokens_per_iter * verifier_step_ms / iteration_ms


def rank_shapes(tokens_per_iter: dict[TreeShape, float], costs: StageCosts) -> list[ShapeScore]:
    """Every candidate scored, best first (ties: the smaller tree, then the shallower one)."""
    scores = [score(s, t, costs) for s, t in tokens_per_iter.items()]
    return sorted(scores, key=lambda c: (-c.speedup, c.shape.n_nodes, c.shape.verify, c.shape.depth))
