"""Next-token distributions: temperature, top-k, top-p, min-p; greedy is temperature 0.

The same filters shape the drafter's and the verifier's distributions, and the verifier's filtered
distribution is what sampling must reproduce."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import YggcError
from . import host


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    seed: int | None = None
    min_p: float = 0.0  # 0 = off; keep tokens with at least min_p x the likeliest token's probability

    def __post_init__(self):
        if self.temperature < 0:
            raise YggcError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise YggcError(f"top-k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise YggcError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise YggcError(f"min-p must be in [0, 1], got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def generator(self, device: torch.device | str = "cpu") -> torch.Generator:
        g = torch.Generator(device=device)
        g.manual_seed(self.seed if self.seed is not None else torch.seed())
        return g


NUCLEUS_FIRST_K = 64  # top-p sorts this many likeliest tokens first, 8x more while a row's nucleus is larger


def top_p_drop(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """probs [..., V] -> bool [..., V]: the tokens top-p drops, those whose strictly likelier tokens already hold
    top_p of the mass (the likeliest always stays; tokens tied with a kept one stay too, so the set depends on
    neither the sort's tie order nor the other rows). Sorts only the top k, growing k until each row's cut lies
    inside it: a full sort of a 49152-token vocabulary costs a sizeable share of a decoding step, and a nucleus is
    mostly tens of tokens (docs/benchmarks/sampling.md)."""
    vocab, k = probs.shape[-1], min(probs.shape[-1], NUCLEUS_FIRST_K)
    while True:
        top, order = torch.topk(probs, k, dim=-1)                           # [..., k] descending
        before = top.cumsum(-1) - top                                       # [..., k] mass of the tokens ahead
        pos = torch.arange(k, device=probs.device).expand_as(top)
        starts = torch.ones_like(top, dtype=torch.bool)
        starts[..., 1:] = top[..., 1:] != top[..., :-1]                     # first of each run of equal values
        first = torch.where(starts, pos, torch.zeros_like(pos)).cummax(-1).values
        drop_top = before.gather(-1, first) >= top_p                        # [..., k] mass strictly ahead
        if k == vocab or bool(drop_top[..., -1].all()):  # every token past the top k is dropped as well
            return torch.ones_like(probs, dtype=torch.bool).scatter(-1, order, drop_top)
        k = min(vocab, 8 * k)


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """logits [..., V] -> probabilities [..., V] after temperature, top-k, top-p and min-p (T > 0)."""
    logits = logits.float() if params.temperature == 1.0 else logits.float() / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if params.top_p < 1.0:
        probs = probs.masked_fill(top_p_drop(probs, params.top_p), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    if params.min_p > 0.0:
        probs = probs.masked_fill(probs < params.min_p * probs.amax(-1, keepdim=True), 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample_index(weights: torch.Tensor, generator: torch.Generator | None) -> int:
    """One draw from the unnormalised weights [V] by inverse CDF over a float64 running sum: exact like
    torch.multinomial, and an order of magnitude cheaper over a 49k vocabulary."""
    cdf = torch.cumsum(weights, 0, dtype=torch.float64)                                # [V]
    device = generator.device if generator is not None else cdf.device
    u = torch.rand((), generator=generator, dtype=torch.float64, device=device).to(cdf.device)
    # right=True never lands on a zero-weight token; the clamp only guards u * total rounding up to total
    return min(int(torch.searchsorted(cdf, u * cdf[-1], right=True)), weights.shape[0] - 1)


def row_argmax(logits: torch.Tensor) -> torch.Tensor:
    """logits [..., V] -> each row's first index of its maximum [...] (NaN counts as the maximum), as
    torch.argmax. Eager CPU tensors go through NumPy's vectorised argmax (bf16 and fp16 upcast first, exactly),
    where torch's CPU argmax is a scalar loop, many times slower over verify logits. Traced: torch.argmax."""
    if not host.eager_cpu(logits) or logits.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        return logits.argmax(-1)
    return torch.as_tensor(logits.detach().float().numpy().argmax(-1))


def next_token(logits: torch.Tensor, params: SamplingParams, gen: torch.Generator | None) -> int:
    """One token from logits [V]: argmax when greedy, else a draw from target_probs."""
    if params.greedy:
        return int(row_argmax(logits))
    return sample_index(target_probs(logits, params), gen)
