"""Sampled Equal-Growth Tree growth for temperature > 0 (the draft side of recursive rejection sampling).

Greedy EGT offers each expanded node's top-k drafter tokens. A sampling rule that divides by the
drafter's probability (recursive rejection sampling, `verify_tree_rrs`) needs more: the children of
a node must be draws from the drafter's distribution q, taken one after another without replacement,
and whether a child exists must not depend on the token it turned out to be. So here:

- each expanded node u draws k tokens from q(.|u) without replacement, in draw order, at once with
  the exponential race (keys q / E with E ~ Exp(1), which rank as log q + Gumbel noise: the Gumbel-top-k
  trick; the order of the keys is the order of the draws);
- a candidate's value is cum(u) + log c_i, c_i the measured chance that a node's i-th draw is accepted
  once the node is (RANK_ACCEPTANCE, or a bundle's calibrated rates): Sequoia's positional model. It
  depends on the rank alone, never on the token drawn at rank i. The drafter's own probabilities are
  a poor price here: a draw from q is accepted with chance sum(min(p, q)) however flat q is (on the
  demo pair at T = 1 a first draw with q_(1) = 0.5 is accepted ~85% of the time), while a later draw
  is tested only after the earlier ones failed (9-12% for second draws of the SmolLM2 drafters,
  docs/benchmarks/sampling.md); priced at q, siblings crowd depth out of the pruned tree.
  Values fall with the rank, so the W
  best candidates anywhere (the EGT rule; a stable sort keeps ties in draw order) and top-V pruning
  keep, below every node, a prefix of its draws. What is dropped is decided by quantities the drawn
  token does not influence (other ranks, other subtrees, earlier draws), which keeps the rule exact.
- a rank beyond the support of q (top-k/top-p cut it, or the support is exhausted) gets a token of
  probability 0 and the floor value; the rule skips such children as if they were not there.

Shapes stay fixed (D*W*k pool slots, W new nodes per step), as in egt.py.
"""
from __future__ import annotations

import torch

from .egt import LOGP_FLOOR, EGTState, egt_grow, grow_from_root

# the chance that a node's i-th draw is accepted once the node is, i = 1, 2, ...: the SmolLM2 drafters at T = 0.7-1.0
# (docs/benchmarks/sampling.md: 0.32-0.50 / 0.09-0.12 / 0.05-0.06 / 0.03); ranks past the table take its last entry.
# None prices the i-th draw at the i-th largest drafter probability instead (the rule before these rates).
RANK_ACCEPTANCE = (0.45, 0.11, 0.055, 0.032)


def rank_prices(k: int, rates: tuple[float, ...] = RANK_ACCEPTANCE) -> torch.Tensor:
    """[k] the price of ranks 1..k: the table, its last entry repeated, never rising with the rank."""
    table = torch.tensor(rates[:k] + (rates[-1],) * max(0, k - len(rates)), dtype=torch.float64)
    return table.cummin(0).values


def race_keys(q: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """q [R, vocab] -> keys [R, vocab]; descending keys = draws without replacement from q, in order.

    The exponential race: with E_i ~ Exp(1) i.i.d., tokens in descending q_i / E_i arrive in the order of
    successive draws without replacement. log(q_i / E_i) = log q_i + Gumbel noise, so this is the Gumbel-top-k
    trick without two vocabulary-wide logs."""
    # E(1) = -log U: uniform draws and one log are much cheaper than torch's exponential_ over a vocabulary
    e = torch.rand(q.shape, dtype=torch.float32, device=q.device, generator=generator).log_().neg_()
    return q.float() / e


def drawn_children(state: EGTState, q: torch.Tensor, keys: torch.Tensor,
                   rates: tuple[float, ...] | None = RANK_ACCEPTANCE) -> tuple[torch.Tensor, torch.Tensor]:
    """q, keys [..., vocab] -> each row's k draws in draw order and their rank values (log of the rank's
    acceptance rate; rates=None: of the i-th largest probability), [..., k] each. A rank beyond q's support
    (probability 0) keeps the floor value."""
    drawn = keys.topk(state.k, dim=-1).indices
    top = q.topk(state.k, dim=-1).values.to(state.pool_logp.dtype)                             # [..., k]
    if rates is not None:
        top = torch.where(top > 0, rank_prices(state.k, rates).to(top.dtype), top)
    return top.log().clamp(min=LOGP_FLOOR), drawn


def sampled_egt_step(state: EGTState, q: torch.Tensor, keys: torch.Tensor,
                     rates: tuple[float, ...] | None = RANK_ACCEPTANCE) -> EGTState:
    """One draft step at T > 0: q [W, vocab] = drafter probabilities (temperature, top-k, top-p applied)
    for the frontier rows, keys [W, vocab] from `race_keys(q)`; returns the grown state."""
    rank_logp, drawn = drawn_children(state, q, keys, rates)                                  # [W, k]
    return egt_grow(state, state.cum_logp[state.newest].unsqueeze(1) + rank_logp, drawn, stable=True)


def sampled_egt_root_step(state: EGTState, q: torch.Tensor, keys: torch.Tensor,
                          rates: tuple[float, ...] | None = RANK_ACCEPTANCE) -> EGTState:
    """Step 1 at T > 0 from the root's q and keys [vocab]: the padding rows of a repeated root draw nothing,
    so only the root's row of race keys is drawn."""
    return grow_from_root(state, *drawn_children(state, q, keys, rates), stable=True)
