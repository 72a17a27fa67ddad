"""Model configuration for the Llama family, parsed from a Hugging Face `config.json`.

Covers Llama 1/2/3, Mistral, Qwen2/2.5 (qkv bias), SmolLM and TinyLlama: they share one graph and
differ only in the fields below. Mixtral and Qwen2-MoE are the same graph with a sparse feed-forward
(MoeConfig) in some or all layers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

DENSE_MODEL_TYPES = ("llama", "mistral", "qwen2")
MOE_MODEL_TYPES = ("mixtral", "qwen2_moe")
SUPPORTED_MODEL_TYPES = DENSE_MODEL_TYPES + MOE_MODEL_TYPES
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3")


class CheckpointError(ValueError):
    """A checkpoint the user handed in cannot be used; the message says why and what to do."""


@dataclass(frozen=True)
class RopeConfig:
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class MoeConfig:
    """A sparse feed-forward: each token runs the top_k of n_experts experts (gated MLPs of expert_size),
    mixed by the router's softmax probabilities (renormalised over the top k when norm_topk_prob), plus, for
    Qwen2-MoE, one always-on shared expert scaled by sigmoid(shared gate). Layers not in sparse_layers
    keep a dense MLP of ModelConfig.intermediate_size."""

    n_experts: int
    top_k: int
    expert_size: int
    norm_topk_prob: bool
    sparse_layers: tuple[int, ...]
    shared_expert_size: int = 0

    @classmethod
    def from_hf(cls, cfg: dict, n_layers: int) -> MoeConfig:
        if cfg["model_type"] == "mixtral":
            return cls(n_experts=int(cfg["num_local_experts"]), top_k=int(cfg["num_experts_per_tok"]),
                       expert_size=int(cfg["intermediate_size"]), norm_topk_prob=True,
                       sparse_layers=tuple(range(n_layers)))
        step, dense = int(cfg.get("decoder_sparse_step", 1)), set(cfg.get("mlp_only_layers") or ())
        n_experts = int(cfg["num_experts"])
        sparse = tuple(i for i in range(n_layers) if i not in dense and n_experts > 0 and (i + 1) % step == 0)
        return cls(n_experts=n_experts, top_k=int(cfg["num_experts_per_tok"]),
                   expert_size=int(cfg["moe_intermediate_size"]), norm_topk_prob=bool(cfg.get("norm_topk_prob")),
                   sparse_layers=sparse, shared_expert_size=int(cfg.get("shared_expert_intermediate_size") or 0))


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-6
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    tie_word_embeddings: bool = False
    rope: RopeConfig = field(default_factory=RopeConfig)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    moe: MoeConfig | None = None

    @classmethod
    def from_hf(cls, cfg: dict, where: str = "config.json") -> ModelConfig:
        model_type = cfg.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise CheckpointError(
                f"{where}: model_type {model_type!r} is not supported; yggc runs "
                f"{', '.join(SUPPORTED_MODEL_TYPES)} checkpoints"
            )
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise CheckpointError(f"{where}: hidden_act {act!r} is not supported (only 'silu')")
        try:
            n_heads = int(cfg["num_attention_heads"])
            hidden = int(cfg["hidden_size"])
            head_dim = cfg.get("head_dim") or hidden // n_heads
            attention_bias = bool(cfg.get("attention_bias", False))
            qwen = model_type in ("qwen2", "qwen2_moe")
            n_layers = int(cfg["num_hidden_layers"])
            return cls(
                model_type=model_type,
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(cfg["intermediate_size"]),
                n_layers=n_layers,
                n_heads=n_heads,
                n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
                head_dim=int(head_dim),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                # Qwen2 always carries q/k/v biases and no o bias; Llama's attention_bias covers all four.
                qkv_bias=bool(cfg.get("qkv_bias", qwen)) or attention_bias,
                o_bias=attention_bias and not qwen,
                mlp_bias=bool(cfg.get("mlp_bias", False)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                rope=_parse_rope(cfg, where),
                bos_token_id=cfg.get("bos_token_id"),
                eos_token_ids=_as_tuple(cfg.get("eos_token_id")),
                moe=MoeConfig.from_hf(cfg, n_layers) if model_type in MOE_MODEL_TYPES else None,
            )
        except KeyError as e:
            raise CheckpointError(f"{where}: required field {e.args[0]!r} is missing") from None


def _as_tuple(value) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, list) else (int(value),)


def _parse_rope(cfg: dict, where: str) -> RopeConfig:
    # transformers < 5 writes `rope_theta` + `rope_scaling`; >= 5 writes `rope_parameters`.
    params = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise CheckpointError(
            f"{where}: rope type {rope_type!r} is not supported (use one of {', '.join(SUPPORTED_ROPE_TYPES)})"
        )
    return RopeConfig(
        theta=theta,
        rope_type=rope_type,
        factor=float(params.get("factor", 1.0)),
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings", 8192)),
    )


def rope_inv_freq(rope: RopeConfig, head_dim: int) -> torch.Tensor:
    """Inverse rotary frequencies [head_dim // 2] (float32), with HF's scaling rules."""
    # explicit device: computed for real even under a meta-device context (meta kernels import sympy)
    inv_freq = 1.0 / (rope.theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device="cpu") / head_dim))
    if rope.rope_type == "linear":
        return inv_freq / rope.factor
    if rope.rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, rope)
    return inv_freq


def _llama3_inv_freq(inv_freq: torch.Tensor, rope: RopeConfig) -> torch.Tensor:
    # Llama 3.1: long wavelengths are divided by `factor`, short ones kept, the middle band blended.
    old_len = rope.original_max_position_embeddings
    low_freq_wavelen = old_len / rope.low_freq_factor
    high_freq_wavelen = old_len / rope.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rope.factor, inv_freq)
    smooth = (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor)
    blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)
