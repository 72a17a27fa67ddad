"""Checkpoint folders -> llama GGUF files, laid out the way llama.cpp's converter writes them.

The inverse of gguf_import: GGUF tensor names, Q/K rows permuted for llama.cpp's RoPE, the byte-level
BPE tokenizer as GGUF lists, 2-D weights stored as one GGML type (F32, F16, BF16 or a block
quantization the `gguf` package can quantize; norms stay F32, as the converter keeps them). Written
with the `gguf` package's own writer into a temporary file that is renamed into place when complete.
`yggc bench`'s llama.cpp rows decode such a file; import_gguf of an F32 export returns the folder's
weights exactly.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from .checkpoint import read_hf_tensors
from .config import CheckpointError, ModelConfig
from .gguf_import import GLOBAL_NAMES, LAYER_NAMES

# the converter's general.file_type for files whose 2-D weights are all of one type
FILE_TYPES = {Q.F32: gguf.LlamaFileType.ALL_F32, Q.F16: gguf.LlamaFileType.MOSTLY_F16,
              Q.BF16: gguf.LlamaFileType.MOSTLY_BF16, Q.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
              Q.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0, Q.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1}
HF_GLOBALS = {hf: name for name, hf in GLOBAL_NAMES.items()}
HF_LAYER_LEAVES = {hf: name for name, hf in LAYER_NAMES.items()}


def gguf_name(hf: str) -> str:
    """model.layers.N.<leaf> -> blk.N.<gguf leaf>; the embedding, final norm and LM head by name."""
    if hf in HF_GLOBALS:
        return HF_GLOBALS[hf]
    parts = hf.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in HF_LAYER_LEAVES:
        return f"blk.{parts[2]}.{HF_LAYER_LEAVES[parts[3]]}"
    raise CheckpointError(f"tensor {hf!r} has no llama GGUF counterpart; only plain Llama checkpoints export")


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's Q/K row permutation, per head: [first halves; second halves] -> [pairs interleaved]."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tokenizer_lists(tokenizer_json: Path, vocab_size: int) -> tuple[list[str], list[str], list[int], str]:
    """(tokens padded to vocab_size with UNUSED entries, merges "a b", token types, llama.cpp pre-tokenizer)."""
    tok = json.loads(tokenizer_json.read_text())
    if tok["model"].get("type") != "BPE":
        raise CheckpointError(f"{tokenizer_json}: only byte-level BPE tokenizers export to GGUF")
    vocab = dict(tok["model"]["vocab"])
    for added in tok.get("added_tokens", []):
        vocab[added["content"]] = added["id"]
    special = {a["content"] for a in tok.get("added_tokens", []) if a.get("special")}
    tokens: list[str | None] = [None] * max(vocab_size, len(vocab))
    for t, i in vocab.items():
        tokens[i] = t
    types = [int(gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL) for t in tokens]
    for i, t in enumerate(tokens):
        if t is None:
            tokens[i], types[i] = f"<unused{i}>", int(gguf.TokenType.UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    pre = json.dumps(tok.get("pre_tokenizer"))
    return tokens, merges, types, "smollm" if '"individual_digits": true' in pre else "gpt-2"


def add_metadata(w: gguf.GGUFWriter, model_dir: Path, cfg: ModelConfig, qtype: Q) -> None:
    w.add_file_type(FILE_TYPES.get(qtype, gguf.LlamaFileType.GUESSED))
    w.add_block_count(cfg.n_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.n_heads)
    w.add_head_count_kv(cfg.n_kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope.theta)
    if cfg.rope.rope_type == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(cfg.rope.factor)
    elif cfg.rope.rope_type != "default":
        raise CheckpointError(f"{model_dir}: rope type {cfg.rope.rope_type!r} does not export to GGUF")
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    tokens, merges, types, pre = tokenizer_lists(model_dir / "tokenizer.json", cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_merges(merges)
    w.add_token_types(types)
    if cfg.bos_token_id is not None:
        w.add_bos_token_id(int(cfg.bos_token_id))
    if cfg.eos_token_ids:
        w.add_eos_token_id(cfg.eos_token_ids[0])
    tok_cfg, jinja = model_dir / "tokenizer_config.json", model_dir / "chat_template.jinja"  # transformers 5: the latter
    template = json.loads(tok_cfg.read_text()).get("chat_template") if tok_cfg.is_file() else None
    if not isinstance(template, str) and jinja.is_file():
        template = jinja.read_text(encoding="utf-8")
    if isinstance(template, str):
        w.add_chat_template(template)


def add_tensors(w: gguf.GGUFWriter, model_dir: Path, cfg: ModelConfig, qtype: Q) -> None:
    for name, t in read_hf_tensors(model_dir).items():  # block-quantized ones dequantized
        if cfg.tie_word_embeddings and name == "lm_head.weight":
            continue
        a = t.float().numpy()
        if name.endswith(("q_proj.weight", "q_proj.bias")):
            a = permute_rope_rows(a, cfg.n_heads)
        elif name.endswith(("k_proj.weight", "k_proj.bias")):
            a = permute_rope_rows(a, cfg.n_kv_heads)
        if a.ndim == 2 and qtype != Q.F32:
            w.add_tensor(gguf_name(name), gguf.quants.quantize(a, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(name), np.ascontiguousarray(a))


def export_gguf(model_dir: str | Path, out: str | Path, qtype: Q = Q.F32) -> Path:
    """model_dir (config.json, model.safetensors, tokenizer.json) -> a llama GGUF at out, 2-D weights as qtype."""
    model_dir, out = Path(model_dir), Path(out)
    cfg = ModelConfig.from_hf(json.loads((model_dir / "config.json").read_text()), str(model_dir / "config.json"))
    if cfg.model_type != "llama":
        raise CheckpointError(f"{model_dir}: model type {cfg.model_type!r} does not export to GGUF; "
                              "only llama checkpoints do")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.writing-{os.getpid()}")
    try:
        w = gguf.GGUFWriter(str(tmp), "llama")
        add_metadata(w, model_dir, cfg, qtype)
        add_tensors(w, model_dir, cfg, qtype)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        tmp.rename(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
