"""Tiny random Hugging Face checkpoints written on the fly (transformers is the test oracle)."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

TEXT = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n",
    "import os\nprint(os.path.join('a', 'b'))  # ünïcode\n",
]

# name -> (transformers config kwargs); all tiny, several GQA ratios, tied/untied, odd vocab, biases, rope types
CONFIGS = {
    "llama_gqa": dict(model_type="llama", vocab_size=301, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    "llama_wide_vocab": dict(model_type="llama", vocab_size=8192, hidden_size=256, intermediate_size=256,
                             num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                             tie_word_embeddings=False),  # weights (fp32 18 MB) outweigh a package's code
    "llama_tied_llama3": dict(model_type="llama", vocab_size=320, hidden_size=64, intermediate_size=128,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                              tie_word_embeddings=True,
                              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "qwen2_bias": dict(model_type="qwen2", vocab_size=307, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True,
                       rope_scaling={"rope_type": "linear", "factor": 2.0}),
    "mistral_headdim": dict(model_type="mistral", vocab_size=300, hidden_size=48, intermediate_size=80,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            tie_word_embeddings=False, sliding_window=None),
    # sparse verifiers: odd expert counts, top-1 and top-2 routing, a shared expert beside a dense layer
    "mixtral_top2": dict(model_type="mixtral", vocab_size=300, hidden_size=64, intermediate_size=80,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, num_local_experts=3,
                         num_experts_per_tok=2, tie_word_embeddings=False, sliding_window=None),
    "mixtral_top1": dict(model_type="mixtral", vocab_size=290, hidden_size=48, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, num_local_experts=5,
                         num_experts_per_tok=1, tie_word_embeddings=True, sliding_window=None),
    "qwen2_moe_shared": dict(model_type="qwen2_moe", vocab_size=310, hidden_size=64, intermediate_size=96,
                             moe_intermediate_size=40, shared_expert_intermediate_size=56, num_experts=5,
                             num_experts_per_tok=2, norm_topk_prob=False, decoder_sparse_step=1,
                             mlp_only_layers=[1], num_hidden_layers=3, num_attention_heads=4,
                             num_key_value_heads=2, tie_word_embeddings=False),
}

# a vocabulary small enough that exact next-token distributions can be checked by counting
TINY_VOCAB = dict(model_type="llama", vocab_size=8, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
TINY_VOCAB_TIED = {**TINY_VOCAB, "tie_word_embeddings": True}
# deep enough for EasySpec's inner layer sets (layers 1-3 and 4, first and last excluded)
LLAMA_DEEP = dict(model_type="llama", vocab_size=300, hidden_size=48, intermediate_size=64, num_hidden_layers=6,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
# a tied bf16 table (8.4 MB) larger than a package's code, so the package's size shows how often it is stored
LLAMA_WIDE_TIED = dict(model_type="llama", vocab_size=16384, hidden_size=256, intermediate_size=256,
                       num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
# Qwen2-MoE's routed experts and gated shared expert in one layer, a dense layer after it: what a compiled package
# of the sparse graph needs, in two layers (an O2 package's compile grows with the expert branches)
QWEN2_MOE_TWO_LAYERS = {**CONFIGS["qwen2_moe_shared"], "num_hidden_layers": 2, "mlp_only_layers": [1]}
# tied, with a RoPE that GGUF files carry (a quantized GGUF's tied token_embd)
LLAMA_TIED = {**CONFIGS["llama_tied_llama3"], "rope_scaling": None}
CONFIGS_ALL = {**CONFIGS, "llama_tied": LLAMA_TIED, "tiny_vocab": TINY_VOCAB, "tiny_vocab_tied": TINY_VOCAB_TIED,
               "llama_deep": LLAMA_DEEP, "llama_wide_tied": LLAMA_WIDE_TIED, "qwen2_moe_two_layers": QWEN2_MOE_TWO_LAYERS}


def make_tokenizer(vocab_size: int = 300) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(TEXT * 4, trainer)
    return tok


def hf_config(name: str, max_pos: int = 512):
    from transformers import AutoConfig

    kw = dict(CONFIGS_ALL[name])
    model_type = kw.pop("model_type")
    rope = kw.pop("rope_scaling", None)
    cfg = AutoConfig.for_model(model_type, max_position_embeddings=max_pos, bos_token_id=0, eos_token_id=0,
                               initializer_range=0.15, **kw)
    if rope is not None:
        cfg.rope_parameters = {**rope, "rope_theta": 10000.0}
    return cfg


def write_checkpoint(path: Path, name: str, seed: int = 0, tokenizer: bool = True,
                     base: Path | None = None, noise: float = 0.0, max_pos: int = 512) -> Path:
    """Random checkpoint `name` at `path`; with `base`, copy its weights and add gaussian noise."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    if base is not None:
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(noise * torch.randn_like(p) * p.std().clamp_min(1e-3))
    else:
        model = AutoModelForCausalLM.from_config(hf_config(name, max_pos), dtype=torch.float32)
    model.save_pretrained(path, safe_serialization=True)
    if tokenizer:
        make_tokenizer().save(str(path / "tokenizer.json"))
    return path


def read_config(path: Path) -> dict:
    return json.loads((path / "config.json").read_text())
