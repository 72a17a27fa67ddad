"""Lossless verification of a single draft chain (W = 1) at temperature > 0.

Inputs everywhere: drafts [D] long, SAMPLED from the drafter; draft_probs [D, vocab] = q_1..q_D, the
drafter distributions they were sampled from; target_probs [D+1, vocab] = p_1..p_{D+1}, the verifier's
distributions on the same prefixes (row D gives the bonus token). Both rules return how many drafts
are accepted (tau) and the next token.

Token verification (Leviathan et al.): accept x_i with prob min(1, p_i(x_i)/q_i(x_i)), stop at the first
rejection and sample from norm(max(p_i - q_i, 0)); all accepted -> bonus from p_{D+1}.

Block verification (block-verification.txt, Algorithm 2), derived here because the paper's appendix code
stops one position short (it never offers the full block + bonus):
  pi_0 = 1,  pi_i = min(1, pi_{i-1} * p_i(x_i) / q_i(x_i))            prob. that prefix x^i survives
  r_i(x) = max(pi_i * p_{i+1}(x) - q_{i+1}(x), 0),  R_i = sum_x r_i(x)  for i < D
  h_i = R_i / (R_i + 1 - pi_i) for i < D,  h_D = pi_D                     (h_i = 1 when 0/0)
  draw eta_0..eta_D ~ U(0,1); tau = max{i : eta_i < h_i} (h_0 = 1, so tau exists);
  next token ~ r_tau / R_tau if tau < D, else ~ p_{D+1}.
Why h_i (paper Lemma 3): tau >= i iff eta_i < h_i or tau >= i+1, so by backward induction
P(tau >= i | x^i) = h_i + (1 - h_i) sum_y q_{i+1}(y) pi_{i+1}(x^i y) = h_i + (1 - h_i)(pi_i - R_i), using
sum_y min(pi_i p(y), q(y)) = pi_i - R_i; asking for pi_i gives h_i above, and P(tau = i | x^i) = R_i.
Why lossless: given the drafted prefix x^i, the token emitted right after it with tau >= i is y either
as an accepted draft, q(y) pi_{i+1} = min(pi_i p(y), q(y)), or as the residual, R_i * r_i(y) / R_i =
max(pi_i p(y) - q(y), 0); the sum is pi_i * p_{i+1}(y): once x^i survives, the next token is exactly
the target's. The rest (Lemma 2 / Thm 1: prefixes reached via tau < i, then continued by the target)
is checked by exact enumeration in tests/tree/test_block_verification.py, as is the toy example (11/9 vs 10/9).
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .sampling import sample_index


class ChainAccept(NamedTuple):
    n_accepted: int  # drafts accepted (tau), 0..D
    token: int       # next token: residual sample, or bonus from p_{D+1} when tau == D


def _ratio(drafts: torch.Tensor, q: torch.Tensor, p: torch.Tensor) -> list[float]:
    """p_i(x_i) / q_i(x_i) for i < D; a draft with q = 0 (never sampled) counts as 1 if p > 0 else 0."""
    idx = drafts.long().unsqueeze(1)                              # [D, 1]
    px = p[: idx.shape[0]].gather(1, idx).flatten().tolist()
    qx = q.gather(1, idx).flatten().tolist()
    return [a / b if b > 0 else float(a > 0) for a, b in zip(px, qx, strict=True)]


def _normalise_rows(r: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """Rows of r [D, V] divided by their sums; all-zero rows (probability-0 branches) take `fallback`."""
    s = r.sum(-1, keepdim=True)
    return torch.where(s > 0, r / s.clamp_min(1e-300), fallback)


def tokenwise_outcome(drafts: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact law of token verification given the drafts: P(tau = i) [D+1] and next-token law [D+1, V]."""
    q, p = draft_probs.to(torch.float64), target_probs.to(torch.float64)
    a = torch.tensor(_ratio(drafts, q, p), dtype=p.dtype).clamp(max=1.0)  # [D] per-token acceptance
    alive = torch.cat([a.new_ones(1), torch.cumprod(a, 0)])               # [D+1] P(tau >= i)
    tau = alive * torch.cat([1.0 - a, a.new_ones(1)])                     # [D+1]
    res = _normalise_rows((p[:-1] - q).clamp(min=0.0), p[:-1])            # [D, V]
    return tau.to(p.device), torch.cat([res, p[-1:]])


def _block_terms(drafts: torch.Tensor, q: torch.Tensor, p: torch.Tensor
                 ) -> tuple[list[float], list[float], torch.Tensor]:
    """pi_0..pi_D, h_0..h_{D-1} and the unnormalised residual weights r [D, V] (module doc)."""
    pi = [1.0]
    for ratio in _ratio(drafts, q, p):  # D is small; pi_i is a clipped running product
        pi.append(min(1.0, pi[-1] * ratio))
    pi_col = torch.tensor(pi[:-1], dtype=p.dtype, device=p.device).unsqueeze(1)   # [D, 1]
    r = (pi_col * p[:-1] - q).clamp(min=0.0)                                      # [D, V]
    R = r.sum(-1).tolist()                                                        # D floats
    h = [R[i] / (R[i] + 1.0 - pi[i]) if R[i] + 1.0 - pi[i] > 0 else 1.0 for i in range(len(R))]  # 0/0 -> 1
    return pi, h, r


def _block_h(drafts: torch.Tensor, q: torch.Tensor, p: torch.Tensor) -> tuple[list[float], torch.Tensor]:
    """h_0..h_D (h_D = pi_D) and the unnormalised residual weights r [D, V] (module doc)."""
    pi, h, r = _block_terms(drafts, q, p)
    return h + [pi[-1]], r


def _tau_law(h: torch.Tensor) -> torch.Tensor:
    """h [D+1] -> P(tau = i) [D+1] = h_i * prod_{j > i} (1 - h_j): the longest accepted sub-block wins."""
    later_miss = torch.flip(torch.cumprod(torch.flip(1.0 - h, [0]), 0), [0])  # [D+1] prod_{j >= i} (1 - h_j)
    return h * torch.cat([later_miss[1:], h.new_ones(1)])                      # prod_{j > i}


def block_accept_probs(drafts: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Block verification's h [D+1] (accept sub-block i iff eta_i < h_i) and next-token law per tau [D+1, V]."""
    p = target_probs.to(torch.float64)
    h, r = _block_h(drafts, draft_probs.to(torch.float64), p)
    return torch.tensor(h, dtype=p.dtype, device=p.device), torch.cat([_normalise_rows(r, p[:-1]), p[-1:]])


def block_outcome(drafts: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact law of block verification given the drafts: P(tau = i) [D+1] and next-token law [D+1, V]."""
    h, nxt = block_accept_probs(drafts, draft_probs, target_probs)
    return _tau_law(h), nxt


def block_prefix_expected_accepted(drafts: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor
                                   ) -> torch.Tensor:
    """[D + 1]: the drafts block verification is expected to accept when only the first v drafts are verified,
    v = 0..D (target_probs row v is then the bonus row). h_i for i < v does not depend on v and h_v = pi_v, so one
    pass over the vocabulary serves every prefix."""
    pi, h, _ = _block_terms(drafts, draft_probs.to(torch.float64), target_probs.to(torch.float64))
    laws = (_tau_law(torch.tensor(h[:v] + [pi[v]], dtype=torch.float64)) for v in range(len(pi)))  # [v + 1] each
    return torch.tensor([float((law * torch.arange(len(law))).sum()) for law in laws], dtype=torch.float64)


def verify_chain_tokenwise(drafts: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                           generator: torch.Generator) -> ChainAccept:
    """Standard speculative sampling over a chain -> (accepted drafts, next token)."""
    D = drafts.shape[0]
    a = _ratio(drafts, draft_probs, target_probs)                                     # [D]
    eta = torch.rand(D, generator=generator, dtype=torch.float64, device=generator.device).tolist()
    tau = next((i for i in range(D) if eta[i] >= a[i]), D)  # first rejection, or D
    p = target_probs[tau].to(torch.float64)
    if tau == D:
        return ChainAccept(D, sample_index(p, generator))
    w = (p - draft_probs[tau].to(torch.float64)).clamp(min=0.0)
    return ChainAccept(tau, sample_index(w if bool(w.sum() > 0) else p, generator))  # w == 0 only if p == q


def verify_chain_block(drafts: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                       generator: torch.Generator) -> ChainAccept:
    """Block verification (Algorithm 2) over a chain -> (accepted drafts, next token)."""
    D = drafts.shape[0]
    p = target_probs.to(torch.float64)
    h, r = _block_h(drafts, draft_probs.to(torch.float64), p)                         # D+1 floats, [D, V]
    eta = torch.rand(D + 1, generator=generator, dtype=torch.float64, device=generator.device).tolist()
    tau = max(i for i in range(D + 1) if eta[i] < h[i])  # the longest accepted sub-block wins; h_0 = 1
    if tau == D:
        return ChainAccept(D, sample_index(p[D], generator))
    w = r[tau]
    return ChainAccept(tau, sample_index(w if bool(w.sum() > 0) else p[tau], generator))  # w == 0: prob-0 branch
