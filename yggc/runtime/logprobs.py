"""Log-probabilities of the emitted tokens, from the verifier's own logits in the call that chose each token.

The values are the verifier's raw distribution (log-softmax of its logits, before temperature, top-k, top-p
or min-p), as vLLM reports by default; a tree iteration scores every accepted token in the one verify call
that accepted it, so asking for them costs a log-softmax per emitted token and no model call.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...]  # the `top_n` most likely tokens and their log-probabilities, best first


def token_logprobs(logits: torch.Tensor, tokens: list[int], top_n: int, vocab: int) -> list[TokenLogprob]:
    """logits [R, >= vocab] of the rows that chose `tokens` [R] -> one TokenLogprob per token."""
    lp = torch.log_softmax(logits[: len(tokens), :vocab].float(), dim=-1)  # [R, vocab]
    chosen = lp.gather(1, torch.tensor(tokens, device=lp.device)[:, None])[:, 0].tolist()
    if top_n:
        top = lp.topk(top_n, dim=-1)
        tops = [tuple(zip(ids, vals)) for ids, vals in zip(top.indices.tolist(), top.values.tolist())]
    else:
        tops = [()] * len(tokens)
    return [TokenLogprob(t, v, tp) for t, v, tp in zip(tokens, chosen, tops)]
