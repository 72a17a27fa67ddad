"""Tiny GGUF files written with the `gguf` package's own writer, the way llama.cpp's converter lays a
Hugging Face Llama checkpoint out (Q/K rows permuted for its RoPE, GGUF tensor names)."""
from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
from safetensors.torch import load_file

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    _, _, layer, leaf = hf.split(".", 3)
    return f"blk.{layer}.{LAYER_NAMES[leaf]}"


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of Q/K rows."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer_lists(tokenizer_json: Path, vocab_size: int) -> tuple[list[str], list[str], list[int]]:
    """tokens (padded to vocab_size with unused entries), merges "a b", token types."""
    tok = json.loads(tokenizer_json.read_text())
    vocab = {t: i for t, i in tok["model"]["vocab"].items()}
    for added in tok.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    special = {a["content"] for a in tok.get("added_tokens", []) if a.get("special")}
    tokens = [None] * max(vocab_size, len(vocab))
    for t, i in vocab.items():
        tokens[i] = t
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"<unused{i}>", gguf.TokenType.UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    return tokens, merges, [int(t) for t in types]


def write_gguf(hf_dir: Path, out: Path, quant: gguf.GGMLQuantizationType | None = None,
               chat_template: str | None = None, eos_id: int = 0) -> Path:
    """hf_dir (config.json, model.safetensors, tokenizer.json) -> a llama GGUF at out; 2-D weights as
    `quant` when given, else F32."""
    cfg = json.loads((hf_dir / "config.json").read_text())
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_freq_base(float(cfg.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg["rms_norm_eps"]))
    w.add_vocab_size(cfg["vocab_size"])
    w.add_rope_dimension_count(cfg["hidden_size"] // heads)
    tokens, merges, types = tokenizer_lists(hf_dir / "tokenizer.json", cfg["vocab_size"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    w.add_eos_token_id(eos_id)
    if chat_template:
        w.add_chat_template(chat_template)
    for name, t in load_file(str(hf_dir / "model.safetensors")).items():
        a = t.float().numpy()
        if name.endswith("q_proj.weight"):
            a = permute_rope_rows(a, heads)
        elif name.endswith("k_proj.weight"):
            a = permute_rope_rows(a, kv)
        if quant is not None and a.ndim == 2:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(a, quant), raw_dtype=quant)
        else:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
