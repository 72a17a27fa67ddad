"""The training-time test (eagle3.txt) of an EAGLE-3 head (``yggc train eagle3``): k draft steps unrolled over
whole sequences.

Rows are indexed by position p. Step 0's row p is the real pair (verifier feature g_p, token x_{p+1}).
Step j's row p is the depth-j draft node whose last real pair is r = p - j: its token is x_{p+1}, its
input feature is step j-1's output at row p-1 (its parent), its RoPE position is p, and it attends to
the real pairs at positions <= r plus its ancestors, step j' at position r + j' (one diagonal per
earlier step) - exactly what the runtime's tree mask shows a draft node. Every row predicts x_{p+2},
so all steps share one target: the verifier's distribution at position p+1 over the draft vocabulary.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..graphs.config import rope_inv_freq
from ..graphs.eagle3 import Eagle3Graph
from ..graphs.llama import rope_cos_sin, rotate


def shift_right(x: torch.Tensor, by: int) -> torch.Tensor:
    """x [B, ..., T, d] -> row p holds x's row p - by (zeros before the start); the time axis is -2."""
    if by == 0:
        return x
    return torch.cat([torch.zeros_like(x[..., :by, :]), x[..., :-by, :]], dim=-2)


def unrolled_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor], j: int) -> torch.Tensor:
    """q [B, Hq, T, hd] of step j; keys/values[i] [B, KV, T, hd] of steps 0..j -> [B, Hq, T, hd]."""
    B, Hq, T, hd = q.shape
    group = Hq // keys[0].shape[1]
    k0, v0 = (t.repeat_interleave(group, dim=1) for t in (keys[0], values[0]))
    scores = [q @ k0.transpose(-1, -2)]  # [B, Hq, T, T]: the real pairs
    rows = torch.arange(T, device=q.device)
    visible = rows[None, :] <= rows[:, None] - j  # real pairs at positions <= p - j
    scores[0] = scores[0].masked_fill(~visible, float("-inf"))
    diag_v = []
    for i in range(1, j + 1):  # the ancestor of depth i sits at position p - (j - i)
        ki, vi = (shift_right(t.repeat_interleave(group, dim=1), j - i) for t in (keys[i], values[i]))
        scores.append((q * ki).sum(-1, keepdim=True))  # [B, Hq, T, 1]
        diag_v.append(vi)
    probs = torch.softmax(torch.cat(scores, -1) * hd ** -0.5, dim=-1)  # rows with nothing visible: see below
    probs = torch.nan_to_num(probs)
    out = probs[..., :T] @ v0
    for i, vi in enumerate(diag_v):
        out = out + probs[..., T + i:T + i + 1] * vi
    return out


def head_step(head: Eagle3Graph, emb_n: torch.Tensor, feature: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              keys: list[torch.Tensor], values: list[torch.Tensor], j: int) -> torch.Tensor:
    """One unrolled step: (normed embeddings [B, T, H], input feature [B, T, H]) -> output feature [B, T, H]."""
    attn = head.attn
    B, T, _ = feature.shape
    x = torch.cat([emb_n, head.hidden_norm(feature)], dim=-1)
    q, k, v = attn.wqkv(x).split([attn.n_heads * attn.hd, attn.n_kv * attn.hd, attn.n_kv * attn.hd], -1)
    q = rotate(q.view(B, T, attn.n_heads, attn.hd).transpose(1, 2), cos, sin)
    k = rotate(k.view(B, T, attn.n_kv, attn.hd).transpose(1, 2), cos, sin)
    keys.append(k)
    values.append(v.view(B, T, attn.n_kv, attn.hd).transpose(1, 2))
    out = unrolled_attention(q, keys, values, j)  # [B, Hq, T, hd]
    h = feature + attn.wo(out.transpose(1, 2).reshape(B, T, attn.n_heads * attn.hd))
    return h + head.mlp(head.mlp_norm(h))


def ttt_hidden(head: Eagle3Graph, tokens: torch.Tensor, features: torch.Tensor, k: int) -> list[torch.Tensor]:
    """tokens [B, T] (x_{p+1}), verifier features [B, T, F] (g_p) -> each step's output feature [B, T, H]."""
    T = tokens.shape[1]
    emb_n = head.input_norm(head.embed(tokens))
    cos, sin = rope_cos_sin(torch.arange(T), rope_inv_freq(head.cfg.rope, head.cfg.head_dim), emb_n.dtype)
    feature, keys, values, out = head.fuse(features), [], [], []
    for j in range(k):
        h = head_step(head, emb_n, feature, cos, sin, keys, values, j)
        out.append(h)
        feature = shift_right(h, 1)  # row p's parent is row p-1 of this step
    return out


def ttt_logits(head: Eagle3Graph, tokens: torch.Tensor, features: torch.Tensor, k: int) -> list[torch.Tensor]:
    """tokens [B, T], features [B, T, F] -> draft-vocab logits [B, T, Vd] per step, at every row."""
    return [head.lm_head(head.norm(h)) for h in ttt_hidden(head, tokens, features, k)]


@dataclass(frozen=True)
class TTTBatch:
    """A padded batch of conversations and the rows the loss and the agreement are taken on (the answer rows)."""

    tokens: torch.Tensor      # [B, T] long: x_{p+1} (zeros past a conversation's end)
    features: torch.Tensor    # [B, T, F]: g_p
    rows: torch.Tensor        # [N] long: flat index b * T + p of each answer row
    positions: torch.Tensor   # [N] long: p of each answer row (step j exists at p >= j)
    target_logp: torch.Tensor  # [N, Vd] float32: the verifier's log-probabilities over the draft vocabulary
    best: torch.Tensor        # [N] long: the draft id of the verifier's argmax, -1 outside the draft vocabulary


@dataclass(frozen=True)
class StepScores:
    """Per unroll step: rows where the head's top-1 is the verifier's, and answer rows that step has (a row whose
    verifier token is outside the draft vocabulary counts as a miss: the rate a decode sees)."""

    hits: tuple[int, ...]
    rows: tuple[int, ...]


def ttt_loss(head: Eagle3Graph, hidden: list[torch.Tensor], batch: TTTBatch,
             decay: float = 0.8) -> tuple[torch.Tensor, StepScores]:
    """Soft cross-entropy against the verifier's draft-vocab distribution, step j weighted decay**j, on the answer
    rows whose step-j node exists (p >= j) and whose verifier token is in the draft vocabulary. The LM head runs on
    those rows only (gathered before it), not on the padding and prompt rows of the batch."""
    total, hits, rows = 0.0, [], []
    in_vocab = batch.best >= 0
    p = batch.target_logp.exp()
    for j, h in enumerate(hidden):
        at = batch.positions >= j  # [N]
        logits = head.lm_head(head.norm(h.flatten(0, 1)[batch.rows[at]])).float()  # [n_j, Vd]
        counted = in_vocab[at]
        ce = -(p[at] * F.log_softmax(logits, -1)).sum(-1)  # [n_j]
        total = total + decay ** j * (ce * counted).sum() / counted.sum().clamp_min(1)
        hits.append(int((logits.argmax(-1) == batch.best[at]).sum()))
        rows.append(int(at.sum()))
    return total, StepScores(tuple(hits), tuple(rows))
