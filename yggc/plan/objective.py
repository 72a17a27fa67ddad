"""The latency-aware objective (yggdrasil.txt, 4.1, Eq. 3) that picks an Equal-Growth Tree shape.

    speedup(D, W, V) = tokens per iteration x T_verifier(1) / (T_draft(D, W) + T_verifier(V + 1) + host)

A draft phase is one head step (the root plus a pending token: width HEAD_WIDTH) and D - 1 steps at
width W; verification runs the root and V nodes; tokens per iteration counts the verifier's bonus token.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .bundle_plan import ShapeEstimate
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

    def to_estimate(self) -> ShapeEstimate:
        """This score as plan.json records it (rounded to 4 decimals)."""
        return ShapeEstimate(self.shape, round(self.tokens_per_iter, 4), round(self.iteration_ms, 4),
                             round(self.ms_per_token, 4), round(self.speedup, 4))


def score(shape: TreeShape, tokens_per_iter: float, costs: StageCosts | SamplingCosts) -> ShapeScore:
    it_ms = costs.iteration_ms(shape)
    return ShapeScore(shape, tokens_per_iter, it_ms, tokens_per_iter * costs.verifier(1) / it_ms)


def measured_speedup(tokens_per_iter: float, verifier_step_ms: float, iteration_ms: float) -> float:
    """Eq. 3 with measured latencies: the compiled draft and verify phases of the chosen shape against
    the compiled 1-token verifier step. The fitted curves that rank shapes can miss a CPU whose GEMMs
    are slower at 2-8 rows than at 1 or 16; this is the check the plan must pass to be used."""
    return tokens_per_iter * verifier_step_ms / iteration_ms


@dataclass(frozen=True)
class SamplingCosts:
    """The profile's stage costs plus the host work sampling adds to each draft step at T > 0 (filtering and
    drawing from the drafter's distributions, the rejection walk over the verifier's), measured per width
    while calibrating at the temperature. The baseline (plain decoding) pays for drawing its token too."""
    base: StageCosts
    step_ms: dict[int, float]  # width -> host ms per draft step
    token_ms: float = 0.0  # drawing one token from the verifier's distribution

    def verifier(self, width: float) -> float:
        """A verifier step at T > 0: the forward, and the draw plain decoding makes after it (the baseline)."""
        return self.base.verifier(width) + self.token_ms

    def iteration_ms(self, shape: TreeShape) -> float:
        return self.base.iteration_ms(shape) + shape.depth * self.step_ms.get(shape.width, 0.0)


def rank_shapes(tokens_per_iter: dict[TreeShape, float], costs: StageCosts | SamplingCosts) -> list[ShapeScore]:
    """Every candidate scored, best first (ties: the smaller tree, then the shallower one)."""
    scores = [score(s, t, costs) for s, t in tokens_per_iter.items()]
    return sorted(scores, key=lambda c: (-c.speedup, c.shape.n_nodes, c.shape.verify, c.shape.depth))


def choice_tokens_per_ms(tokens: torch.Tensor, iteration_ms: torch.Tensor, choice: torch.Tensor) -> float:
    """Tokens per ms over all iterations when iteration m runs shape choice[m]: tokens [M, S], iteration_ms [S]."""
    return float(tokens.gather(1, choice[:, None]).sum() / iteration_ms[choice].sum())


def oracle_choice(tokens: torch.Tensor, iteration_ms: torch.Tensor) -> torch.Tensor:
    """The per-iteration shape choice with the most tokens per millisecond over all iterations when each
    iteration's yield under every shape is known (an oracle: the bound any depth or width predictor is under).

    tokens: [M, S] tokens iteration m yields under shape s; iteration_ms: [S] -> [M] chosen shape indices.
    Maximises sum(tokens[m, c_m]) / sum(iteration_ms[c_m]) exactly by Dinkelbach's iteration: choose
    argmax(tokens - lam * ms) per iteration, set lam to the ratio that choice reaches, until lam stops rising.
    """
    ms = iteration_ms.to(tokens.dtype)
    choice = (tokens.sum(0) / (ms * tokens.shape[0])).argmax().expand(tokens.shape[0])  # the best constant
    lam = choice_tokens_per_ms(tokens, ms, choice)
    while True:
        better = (tokens - lam * ms).argmax(1)
        ratio = choice_tokens_per_ms(tokens, ms, better)
        if ratio <= lam * (1 + 1e-12):
            return choice
        choice, lam = better, ratio
