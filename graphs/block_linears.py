"""Which of a Llama graph's linear layers stream block-quantized weights, read from its checkpoint folder.

A LlamaGraph's linear layers fuse the checkpoint's matrices (attn.wqkv = q | k | v, mlp.w13 = gate | up, then
attn.wo, mlp.w2 and the lm_head: its own matrix, or the tied embedding table). With `weights` a block format (graphs/block_quant.py), every one of them is
stored in it: matrices the folder holds in that format keep their blocks as they are (a GGUF's bytes), others are
quantized from their float values by the `gguf` package (ggml's own rounding; a block matrix of another format is
dequantized first). With `weights` FILE, a layer keeps the blocks its matrices are stored in when they share one
format, and stays float otherwise (a GGUF's tied token_embd keeps its blocks, Q8_0 in SmolLM2's Q4_1 file: the LM head
streams them, and the embedding gathers its rows from them). The graph keeps its float weights for eager use; passes/quant_linear.py swaps the
layers for the kernel op when a package is lowered.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import torch

from . import block_quant
from .checkpoint import read_stored_tensors
from .config import CheckpointError, ModelConfig

FILE = "file"  # each layer as its matrices are stored


@dataclass(frozen=True)
class BlockLinear:
    fmt: str               # "q8_0", "q4_0", "q4_1"
    blocks: torch.Tensor   # [out, in / 32 * bytes] uint8, the fused matrices' rows in the graph's order


def linear_sources(cfg: ModelConfig) -> dict[str, tuple[str, ...]]:
    """graph linear layer -> the Hugging Face matrices it fuses, in row order (dense Llama-family layers); a tied
    lm_head is the embedding table."""
    out = {"lm_head": ("model.embed_tokens.weight" if cfg.tie_word_embeddings else "lm_head.weight",)}
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}."
        out[f"layers.{i}.attn.wqkv"] = tuple(p + f"self_attn.{n}_proj.weight" for n in "qkv")
        out[f"layers.{i}.attn.wo"] = (p + "self_attn.o_proj.weight",)
        out[f"layers.{i}.mlp.w13"] = (p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight")
        out[f"layers.{i}.mlp.w2"] = (p + "mlp.down_proj.weight",)
    return out


def _stored(tensors: dict, name: str) -> torch.Tensor:
    for key in (name, name.removeprefix("model.")):
        if key in tensors:
            return tensors[key]
    raise CheckpointError(f"weight {name!r} is missing from the checkpoint")


def _as_format(t: torch.Tensor, stored: str | None, fmt: str) -> torch.Tensor:
    """One matrix (float, or blocks of format `stored`) -> its blocks in `fmt`."""
    if stored == fmt:
        return t
    w = block_quant.dequantize(t, stored) if stored else t.float()
    ggml = gguf.GGMLQuantizationType[block_quant.FORMATS[fmt].ggml_type]
    return torch.from_numpy(gguf.quants.quantize(w.numpy(), ggml).copy())


def block_linears(model_dir: str | Path, cfg: ModelConfig, weights: str) -> dict[str, BlockLinear]:
    """The graph's linear layers that stream blocks for `weights` (a block format or FILE) -> {layer: BlockLinear}."""
    if cfg.moe is not None:
        raise CheckpointError(f"{model_dir}: sparse (MoE) verifiers keep float weights; drop --weights {weights}")
    if weights != FILE and weights not in block_quant.FORMATS:
        raise CheckpointError(f"unknown weight format {weights!r}; use {', '.join(block_quant.FORMATS)} or {FILE}")
    tensors, formats = read_stored_tensors(Path(model_dir))
    out = {}
    for layer, sources in linear_sources(cfg).items():
        stored = [next((formats[k] for k in (s, s.removeprefix("model.")) if k in formats), None) for s in sources]
        fmt = weights if weights != FILE else (stored[0] if len(set(stored)) == 1 else None)
        if fmt is None:
            continue
        if _stored(tensors, sources[0]).shape[-1] % block_quant.BLOCK and stored[0] is None:
            raise CheckpointError(f"{model_dir}: {layer}'s inputs are not a multiple of {block_quant.BLOCK}, which "
                                  f"{fmt} blocks need; use --weights bfloat16")
        blocks = torch.cat([_as_format(_stored(tensors, s), st, fmt) for s, st in zip(sources, stored, strict=True)])
        out[layer] = BlockLinear(fmt, blocks.contiguous())
    return out


def weights_label(linears: dict[str, BlockLinear], cfg: ModelConfig, dtype: str) -> str:
    """What the graph's linear layers stream, for the manifest: "q4_1", or "q4_1 + bfloat16 (3 layers)" where some
    stay float."""
    formats = sorted({b.fmt for b in linears.values()})
    rest = len(linear_sources(cfg)) - len(linears)
    if not formats:
        return dtype
    return " + ".join(formats) + (f" + {dtype} ({rest} layer{'s' * (rest > 1)})" if rest else "")
