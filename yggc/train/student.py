"""The student of ``yggc train drafter``: a small Llama with the target's tokenizer, its tied embedding
initialised from the target's by projection onto the target embedding's top principal directions,
and the distillation loss on the target's top-k soft labels.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .presets import ModelSize

if TYPE_CHECKING:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from .shards import Sample

# the projected embedding's rows are long (the target's), so tied logits start huge (initial loss 29 for
# SmolLM2); a small final-norm gain starts the student near uniform (loss 10, ln V = 10.8)
FINAL_NORM_INIT = 0.1


@dataclass(frozen=True)
class DistillBatch:
    ids: object        # [B, L] int64, right-padded
    positions: object  # [N, 2] (row, position) whose next token has a soft label
    targets: object    # [N] int64: the token the target produced there
    topk_ids: object   # [N, K] int64
    topk_probs: object # [N, K] float32: the target's top-k probabilities, renormalised


def student_config(target_cfg: dict, size: ModelSize) -> LlamaConfig:
    """A LlamaConfig for the student: the target's vocabulary, special tokens and RoPE, the student's size."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=target_cfg["vocab_size"], hidden_size=size.hidden, intermediate_size=size.intermediate,
        num_hidden_layers=size.layers, num_attention_heads=size.heads, num_key_value_heads=size.kv_heads,
        head_dim=size.hidden // size.heads, max_position_embeddings=target_cfg.get("max_position_embeddings", 2048),
        rope_parameters={"rope_type": "default", "rope_theta": float(target_cfg.get("rope_theta", 10000.0))},
        rms_norm_eps=target_cfg.get("rms_norm_eps", 1e-5), tie_word_embeddings=True,
        bos_token_id=target_cfg.get("bos_token_id"), eos_token_id=target_cfg.get("eos_token_id"),
        pad_token_id=target_cfg.get("eos_token_id"),
    )


def projected_embedding(target_embedding: torch.Tensor, hidden: int) -> torch.Tensor:
    """[V, H_target] -> [V, hidden]: the target's embedding in its top-`hidden` principal directions,
    rescaled to the target's mean row norm (the student's RMSNorms see the same scale)."""
    import torch

    emb = target_embedding.float()
    _, _, v = torch.linalg.svd(emb - emb.mean(0), full_matrices=False)  # v: [H_target, H_target]
    small = emb @ v[:hidden].T
    return small * (emb.norm(dim=1).mean() / small.norm(dim=1).mean())


def build_student(target_cfg: dict, target_embedding: torch.Tensor, size: ModelSize, seed: int) -> LlamaForCausalLM:
    """The float32 student in training mode (seeded), its embedding projected from the target's."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(student_config(target_cfg, size), attn_implementation="sdpa").float()
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(projected_embedding(target_embedding, size.hidden))
        model.model.norm.weight.fill_(FINAL_NORM_INIT)
    return model.train()


def distill_loss(model: LlamaForCausalLM, batch: DistillBatch,
                 hard_weight: float) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (loss, agreement): soft cross-entropy against the target's top-k plus `hard_weight` x CE on the
    produced token; agreement = the fraction of positions where the student's argmax is the target's."""
    hidden = model.model(input_ids=batch.ids).last_hidden_state          # [B, L, H]
    picked = hidden[batch.positions[:, 0], batch.positions[:, 1]]         # [N, H]
    logp = model.lm_head(picked).float().log_softmax(-1)                  # [N, V]
    soft = -(batch.topk_probs * logp.gather(1, batch.topk_ids)).sum(1).mean()
    hard = -logp.gather(1, batch.targets[:, None]).mean()
    agree = (logp.argmax(-1) == batch.topk_ids[:, 0]).float().mean()
    return (1 - hard_weight) * soft + hard_weight * hard, agree


def collate(samples: Sequence[Sample]) -> DistillBatch:
    """Right-padded ids and the (row, position) of every answer token's predecessor."""
    import torch

    width = max(len(s.ids) for s in samples) - 1
    ids = torch.zeros((len(samples), width), dtype=torch.long)
    positions, targets, topk_ids, topk_lp = [], [], [], []
    for row, s in enumerate(samples):
        seq = torch.tensor(s.ids[:-1])
        ids[row, :len(seq)] = seq
        n = len(s.ids) - s.answer_start
        pos = torch.arange(s.answer_start - 1, s.answer_start - 1 + n)
        positions.append(torch.stack([torch.full_like(pos, row), pos], 1))
        targets.append(torch.tensor(s.ids[s.answer_start:]))
        topk_ids.append(s.topk_ids)
        topk_lp.append(s.topk_logprobs)
    return DistillBatch(ids, torch.cat(positions), torch.cat(targets), torch.cat(topk_ids),
                        torch.cat(topk_lp).softmax(-1))
