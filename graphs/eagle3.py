"""The EAGLE-3 draft head (eagle3.txt) as a static-shape graph with its own one-layer KV cache.

It drafts from the verifier's own hidden states. The three feature layers' inputs, concatenated
([W, 3 * verifier hidden]), are fused by `fc` into one feature [W, hidden]; a deeper draft step
instead feeds the head's own output feature of the parent node, as in training. One forward:

    (input_ids [W], feature [W, hidden], position_ids [W], cache_slots [W], attn_mask [W, S])
        -> (logits [W, verifier vocab] float32, output feature [W, hidden])

Row i pairs the feature of position p with the token at p + 1 and predicts the token at p + 2; its
K/V sit at the slot given, at RoPE position p. The single decoder layer attends over
[norm(embedding); norm(feature)] (2 * hidden wide) and adds to the feature's residual stream; its
LM head covers a draft vocabulary (`draft_ids` maps each draft id to its verifier token id), and the
logits of verifier tokens outside it are -inf. The token embedding is the verifier's, bound at load.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .config import ModelConfig
from .llama import Attention, CacheOwner, RMSNorm, RopeTable
from .mlp import GatedMLP


@dataclass(frozen=True)
class Eagle3Config:
    layer: ModelConfig  # the decoder layer's sizes; vocab_size = the verifier's vocabulary
    draft_vocab_size: int
    target_hidden_size: int  # the verifier's hidden size: fc reads 3 of these
    feature_layers: tuple[int, ...]  # verifier layers whose inputs are the features (low, mid, high)
    verifier: dict  # what it was trained for: {"hidden_size", "num_hidden_layers", "vocab_size", "embedding"}


def default_feature_layers(n_layers: int) -> tuple[int, int, int]:
    """The low/mid/high layers EAGLE-3 heads read when their config does not say (SGLang's and vLLM's choice)."""
    return (2, n_layers // 2, n_layers - 3) if n_layers > 5 else (0, n_layers // 2, n_layers - 1)


class Eagle3Graph(CacheOwner):
    def __init__(self, cfg: Eagle3Config, n_slots: int, dtype: torch.dtype = torch.float32):
        super().__init__()
        lc = cfg.layer
        self.eagle, self.cfg, self.n_slots = cfg, lc, n_slots
        H = lc.hidden_size
        self.embed = nn.Embedding(lc.vocab_size, H, _weight=torch.empty(lc.vocab_size, H))  # the verifier's
        self.fc = nn.Linear(len(cfg.feature_layers) * cfg.target_hidden_size, H, bias=False)
        self.input_norm = RMSNorm(H, lc.rms_norm_eps)
        self.hidden_norm = RMSNorm(H, lc.rms_norm_eps)
        self.attn = Attention(lc, n_slots, dtype)
        self.attn.wqkv = nn.Linear(2 * H, self.attn.wqkv.out_features, bias=lc.qkv_bias)  # reads [emb; feature]
        self.mlp_norm = RMSNorm(H, lc.rms_norm_eps)
        self.mlp = GatedMLP(lc.hidden_size, lc.intermediate_size, lc.mlp_bias)
        self.norm = RMSNorm(H, lc.rms_norm_eps)
        self.lm_head = nn.Linear(H, cfg.draft_vocab_size, bias=False)
        # draft id -> verifier id, set by the loader (an arange on the meta device would import sympy, slowing the load)
        self.register_buffer("draft_ids", torch.empty(cfg.draft_vocab_size, dtype=torch.long), persistent=False)
        self.rope = RopeTable(lc.rope, n_slots, lc.head_dim, dtype)
        self.to(dtype)

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """Verifier features [W, 3 * verifier hidden] -> the head's input feature [W, hidden]."""
        return self.fc(features.to(self.fc.weight.dtype))

    def forward(self, input_ids, feature, position_ids, cache_slots, attn_mask, *caches):
        return self.forward_embedded(self.embed(input_ids), feature, position_ids, cache_slots, attn_mask, *caches)

    def forward_embedded(self, e, feature, position_ids, cache_slots, attn_mask, *caches):
        """forward() from the tokens' embeddings e [W, H] (an O2 package of the head is lowered from this: the
        embedding table is the verifier's, so it stays out of the package and the runtime gathers the rows)
        -> (logits [W, vocab], -inf outside the draft vocabulary; output feature [W, H])."""
        draft_logits, h = self.draft_forward_embedded(e, feature, position_ids, cache_slots, attn_mask, *caches)
        logits = draft_logits.new_full((h.shape[0], self.cfg.vocab_size), float("-inf"))
        return logits.index_copy(1, self.draft_ids, draft_logits), h

    def draft_forward(self, input_ids, feature, position_ids, cache_slots, attn_mask, *caches):
        """forward() with the logits over the draft vocabulary alone: [W, draft vocab] (column j is token
        draft_ids[j]), and the output feature [W, H]."""
        return self.draft_forward_embedded(self.embed(input_ids), feature, position_ids, cache_slots, attn_mask,
                                           *caches)

    def draft_forward_embedded(self, e, feature, position_ids, cache_slots, attn_mask, *caches):
        cos, sin = self.rope(position_ids)
        x = torch.cat([self.input_norm(e), self.hidden_norm(feature)], dim=-1)  # [W, 2H]
        h = feature + self.attn(x, cos, sin, cache_slots, attn_mask, caches[:2] if caches else None)
        h = h + self.mlp(self.mlp_norm(h))  # [W, H]: the output feature (pre-norm)
        return self.lm_head(self.norm(h)).float(), h  # [W, draft vocab]

    @property
    def has_weights(self) -> bool:
        """Whether the forward can run eagerly (an O2 bundle's head keeps fc alone: its package holds the rest)."""
        return not self.lm_head.weight.is_meta
