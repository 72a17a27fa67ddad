"""GGUF files (llama.cpp's model format) -> Hugging Face checkpoint folders that yggc loads.

Read with the `gguf` package, llama.cpp's own reader and dequantizer: nothing is parsed by hand and
nothing is unpickled. Llama-architecture files only. Weights are dequantized to float32 and stored as
`--dtype` (float32 keeps the dequantized values exactly); with keep_blocks (what -m MODEL.gguf imports), the
Q8_0, Q4_0 and Q4_1 matrices stay as their raw blocks instead (graphs/block_quant.py: uint8 tensors, the format
named in the file's metadata), and matrices of other quantized types are dequantized, with one warning line.
llama.cpp's converter permutes the rows of the Q and K projections for its RoPE layout; the import undoes that
(rows of blocks move as whole rows), so the folder equals what transformers' own GGUF loading builds.

Supported tensor types: SUPPORTED_TYPES (float and the common block quantizations); any other type
is one CheckpointError naming it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.torch import save_file

from . import block_quant
from .config import CheckpointError
from .gguf_tokenizer import field, gguf_tokenizer, gguf_tokenizer_config

SUPPORTED_TYPES = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1,
                   Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
LAYER_NAMES = {  # GGUF blk.N.<name> -> HF model.layers.N.<name>
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "attn_q.bias": "self_attn.q_proj.bias", "attn_k.bias": "self_attn.k_proj.bias",
    "attn_v.bias": "self_attn.v_proj.bias",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}


def open_gguf(path: str | Path) -> GGUFReader:
    """The file's reader; a missing or foreign file is one CheckpointError."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"GGUF file {str(p)!r} does not exist")
    try:
        return GGUFReader(p)
    except (ValueError, OSError) as e:
        raise CheckpointError(f"{p} is not a readable GGUF file ({e})") from None


def gguf_config(reader: GGUFReader, where: str) -> dict:
    """config.json (Hugging Face Llama fields) from the GGUF metadata."""
    arch = field(reader, "general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{where}: architecture {arch!r} is not supported; yggc imports llama GGUF files")
    heads, hidden = field(reader, "llama.attention.head_count"), field(reader, "llama.embedding_length")
    head_dim = field(reader, "llama.attention.key_length", hidden // heads)
    if field(reader, "llama.rope.dimension_count", head_dim) != head_dim:
        raise CheckpointError(f"{where}: partial rotary embeddings are not supported")
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise CheckpointError(f"{where}: per-frequency RoPE factors (llama3 rope) are not supported from GGUF")
    tokens = field(reader, "tokenizer.ggml.tokens") or []
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "vocab_size": field(reader, "llama.vocab_size", len(tokens)), "hidden_size": hidden,
        "intermediate_size": field(reader, "llama.feed_forward_length"),
        "num_hidden_layers": field(reader, "llama.block_count"), "num_attention_heads": heads,
        "num_key_value_heads": field(reader, "llama.attention.head_count_kv", heads), "head_dim": head_dim,
        "max_position_embeddings": field(reader, "llama.context_length"),
        "rms_norm_eps": field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": field(reader, "llama.rope.freq_base", 10000.0),
        "tie_word_embeddings": not any(t.name == "output.weight" for t in reader.tensors),
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(reader, "tokenizer.ggml.eos_token_id"),
    }
    if field(reader, "llama.rope.scaling.type", "none") == "linear":
        cfg["rope_scaling"] = {"rope_type": "linear", "factor": field(reader, "llama.rope.scaling.factor")}
    return cfg


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: per head, [pairs interleaved] -> [first halves; second halves]."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_name(name: str, where: str) -> str:
    if name in GLOBAL_NAMES:
        return GLOBAL_NAMES[name]
    prefix, _, rest = name.partition(".")
    layer, _, leaf = rest.partition(".")
    if prefix == "blk" and layer.isdigit() and leaf in LAYER_NAMES:
        return f"model.layers.{layer}.{LAYER_NAMES[leaf]}"
    raise CheckpointError(f"{where}: tensor {name!r} has no Llama counterpart; the file is not a plain llama model")


def kept_format(t, keep_blocks: bool) -> str | None:
    """The block format a tensor stays in (keep_blocks, a matrix of a type yggc's kernels read), else None."""
    spec = block_quant.BY_GGML_TYPE.get(t.tensor_type.name)
    return spec.name if keep_blocks and spec is not None and len(t.shape) == 2 else None


def gguf_tensors(reader: GGUFReader, cfg: dict, dtype: torch.dtype, where: str,
                 keep_blocks: bool = False) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor renamed to Hugging Face's names, Q/K rows in HF order: dequantized as `dtype`, or (keep_blocks)
    Q8_0/Q4_0/Q4_1 matrices as their raw blocks [N, K / 32 * bytes] uint8 -> (tensors, {name: block format})."""
    out, formats = {}, {}
    for t in reader.tensors:
        if t.tensor_type not in SUPPORTED_TYPES:
            raise CheckpointError(f"{where}: tensor {t.name} has type {t.tensor_type.name}, which yggc does not "
                                  f"import; supported: {', '.join(q.name for q in SUPPORTED_TYPES)}")
        fmt = kept_format(t, keep_blocks)
        if fmt is not None:
            w = np.array(t.data, dtype=np.uint8)  # [N, K / 32 * bytes], a writable copy
        else:
            w = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if t.name.endswith("attn_q.weight") or t.name.endswith("attn_q.bias"):
            w = unpermute_rope_rows(w, cfg["num_attention_heads"])
        elif t.name.endswith("attn_k.weight") or t.name.endswith("attn_k.bias"):
            w = unpermute_rope_rows(w, cfg["num_key_value_heads"])
        name = hf_name(t.name, where)
        w = torch.from_numpy(np.ascontiguousarray(w))
        out[name] = w if fmt is not None else w.to(dtype)
        if fmt is not None:
            formats[name] = fmt
    return out, formats


def dequantized_types(reader: GGUFReader, keep_blocks: bool) -> list[str]:
    """The quantized types of the file's matrices that an import keeping blocks dequantizes (no kernel reads them)."""
    floats = {Q.F32.name, Q.F16.name, Q.BF16.name}
    return sorted({t.tensor_type.name for t in reader.tensors
                   if keep_blocks and len(t.shape) == 2 and kept_format(t, True) is None
                   and t.tensor_type.name not in floats})


def import_gguf(path: str | Path, out_dir: str | Path, dtype: str = "float32", overwrite: bool = False,
                keep_blocks: bool = False, log=None) -> Path:
    """Write config.json, model.safetensors, tokenizer.json, tokenizer_config.json into out_dir, atomically.
    keep_blocks: Q8_0/Q4_0/Q4_1 matrices as their blocks (graphs/block_quant.py); `log` gets one warning line when
    the file holds matrices of other quantized types, which are dequantized to `dtype`."""
    if dtype not in DTYPES:
        raise CheckpointError(f"unknown dtype {dtype!r}; use float32 or bfloat16")
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise CheckpointError(f"{out} exists; pass --overwrite or another -o")
    where = str(path)
    reader = open_gguf(path)
    cfg = gguf_config(reader, where) | {"torch_dtype": dtype}
    tensors, formats = gguf_tensors(reader, cfg, DTYPES[dtype], where, keep_blocks)
    others = dequantized_types(reader, keep_blocks)
    if others and log is not None:
        log(f"warning: {Path(path).name} holds {', '.join(others)} matrices, which yggc's kernels do not read: they "
            f"are dequantized to {dtype} (it keeps Q8_0, Q4_0 and Q4_1 as stored)")
    tmp = out.parent / f".{out.name}.importing-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        save_file(tensors, str(tmp / "model.safetensors"),
                  metadata={"format": "pt", "source": Path(path).name} | block_quant.formats_metadata(formats))
        gguf_tokenizer(reader, where).save(str(tmp / "tokenizer.json"))
        (tmp / "tokenizer_config.json").write_text(json.dumps(gguf_tokenizer_config(reader), indent=2))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def cache_key(path: Path) -> str:
    """Identifies a file's contents without reading it (a 4 GB GGUF would cost seconds per start-up):
    its resolved path, size and modification time. A rewritten file gets a new key, so a new import."""
    st = path.stat()
    ident = f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def cached_import(path: str | Path, cache_root: str | Path, dtype: str = "float32", keep_blocks: bool = False,
                  log=None) -> Path:
    """The imported folder of a GGUF file, under cache_root/<stem>-<cache key>-<dtype>[-blocks]; imported on first
    use (import_gguf's keep_blocks and log)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"GGUF file {str(path)!r} does not exist")
    out = Path(cache_root).expanduser() / f"{path.stem}-{cache_key(path)}-{dtype}{'-blocks' * keep_blocks}"
    if not (out / "model.safetensors").is_file():
        import_gguf(path, out, dtype, overwrite=True, keep_blocks=keep_blocks, log=log)
    return out
