"""Random Equal-Growth Trees for the tree and plan tests: seeded draft log-probs and the growth they drive."""
import itertools

import torch

from yggc.tree.egt import egt_frontier, egt_init, egt_step


def _logps(D: int, W: int, vocab: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.log_softmax(2.0 * torch.randn(W, vocab, generator=g, dtype=torch.float64), -1) for _ in range(D)]


def _grow(D, W, vocab, k, logps):
    state = egt_init(3, D, W, vocab, k=k, dtype=torch.float64)
    frontiers = []
    for logp in logps:
        fr = egt_frontier(state)
        frontiers.append(fr)
        state = egt_step(state, logp)
    return state, frontiers


class CyclingPolicy:
    """Stands in for a DepthPolicy: a different tree shape every iteration, whatever the root's features."""

    def __init__(self, shapes):
        self.shapes, self.seen, self.features = itertools.cycle(shapes), set(), []

    def choose(self, features):
        self.features.append(features)
        shape = next(self.shapes)
        self.seen.add(shape)
        return shape
