"""Training the draft-depth predictor, for pipeline.py's predictor pass: from the calibrate pass's recorded trees.

Candidate shapes share the width of the best static shape (every calibration tree of that width then
prices every candidate exactly, yggc/plan/calibration.py), one per depth, with the verify budget the
objective ranks first at that depth. Each tree's root features and the tokens each candidate would
have yielded on it are the training pairs; a held-out fifth checks that choosing per iteration beats
the best constant shape before the bundle uses the predictor.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from ..plan.bundle_plan import AdaptivePlan, HeldOutRates
from ..plan.calibration import TreeSample, accepted_by_budget, node_weights, truncate
from ..plan.depth_predictor import DepthPolicy, DepthPredictor, shape_per_depth
from ..plan.objective import choice_tokens_per_ms, oracle_choice
from ..plan.shape import TreeShape

HOLDOUT = 5  # every 5th tree is held out
# The held-out estimate prices tokens per verify and per iteration only: not the predictor's own forward,
# nor the iterations on shallower trees that a wrong choice costs in time: on SmolLM2 a predictor estimated level
# with the static shape decoded slower than it, so the predictor must win by a margin.
MIN_GAIN = 1.03


@dataclass(frozen=True)
class PredictorData:
    features: torch.Tensor  # [M, F] root features of each tree
    tokens: torch.Tensor    # [M, S] tokens the tree yields under each candidate shape (accepted + bonus)


def tokens_under(sample: TreeSample, shape: TreeShape) -> int:
    return accepted_by_budget(truncate(sample.tree, 1 + shape.depth * shape.width), node_weights(sample))[shape.verify] + 1


def predictor_data(samples: list[TreeSample], shapes: tuple[TreeShape, ...]) -> PredictorData:
    rows = [s for s in samples if s.width == shapes[0].width and s.features is not None]
    return PredictorData(torch.stack([s.features for s in rows]).float(),
                         torch.tensor([[tokens_under(s, shape) for shape in shapes] for s in rows], dtype=torch.float32))


def fit_predictor(data: PredictorData, steps: int = 300, seed: int = 0) -> DepthPredictor:
    """Full-batch Adam on the squared error of the predicted tokens (deterministic for a seed)."""
    torch.manual_seed(seed)
    model = DepthPredictor(data.tokens.shape[1], data.features.shape[1])
    model.mean.copy_(data.features.mean(0))
    model.std.copy_(data.features.std(0).clamp(min=1e-3) if data.features.shape[0] > 1 else torch.ones(1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(data.features) - data.tokens) ** 2).mean()
        loss.backward()
        opt.step()
    return model.eval()


def split(data: PredictorData, held_out: bool) -> PredictorData:
    keep = (torch.arange(data.features.shape[0]) % HOLDOUT == 0) == held_out
    return PredictorData(data.features[keep], data.tokens[keep])


def train_policy(samples: list[TreeSample], tokens_per_iter: dict[TreeShape, float], width: int,
                 iteration_ms: Callable[[TreeShape], float]) -> tuple[DepthPolicy | None, AdaptivePlan]:
    """-> the policy (None when it does not beat the best constant shape on held-out trees, or there is
    nothing to choose between) and plan.json's record explaining it (with the policy, where it is used)."""
    at_width = {s: t for s, t in tokens_per_iter.items() if s.width == width}
    shapes = tuple(shape_per_depth(at_width, iteration_ms).values())
    ms = tuple(iteration_ms(s) for s in shapes)
    data = predictor_data(samples, shapes)
    record = AdaptivePlan(False, width=width, shapes=shapes, n_trees=len(data.tokens))
    if len(shapes) < 2 or len(data.tokens) < 2 * HOLDOUT:
        return None, replace(record, reason="fewer than two depths or too few calibration trees")
    train, test = split(data, held_out=False), split(data, held_out=True)
    policy = DepthPolicy(fit_predictor(train), shapes, ms)
    constant = int(torch.argmax(train.tokens.sum(0) / torch.tensor(ms)))  # the best static shape on train
    ms_t = torch.tensor(ms)
    adaptive = choice_tokens_per_ms(test.tokens, ms_t, policy.choose_index(test.features))
    static = choice_tokens_per_ms(test.tokens, ms_t, torch.full((len(test.tokens),), constant))
    oracle = choice_tokens_per_ms(test.tokens, ms_t, oracle_choice(test.tokens, ms_t))  # knows each tree's yield
    record = replace(record, used=adaptive > static * MIN_GAIN,
                     held_out_tokens_per_ms=HeldOutRates(round(adaptive, 5), round(static, 5), round(oracle, 5)),
                     best_constant=shapes[constant])
    if not record.used:
        return None, replace(record, reason=f"choosing the depth per iteration did not beat the best constant shape "
                                            f"by {MIN_GAIN - 1:.0%} on held-out trees")
    return policy, policy.recorded_in(record)
