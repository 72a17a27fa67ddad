"""Hugging Face checkpoint directories -> LlamaGraph weights, tokenizer, and the pair check.

A checkpoint directory holds `config.json`, `model.safetensors` (or shards listed in
`model.safetensors.index.json`) and optionally `tokenizer.json`. Only JSON and safetensors are
read: nothing is unpickled. `write_weights` writes either form.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from tokenizers import Tokenizer

from . import block_quant
from .config import CheckpointError, ModelConfig
from .llama import LlamaGraph

INDEX_FILE = "model.safetensors.index.json"
WEIGHTS_FILE = "model.safetensors"


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{path} is missing; a model directory needs config.json and *.safetensors") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is not valid JSON ({e})") from None


def _check_dir(model_dir: str | Path) -> Path:
    path = Path(model_dir)
    if not path.is_dir():
        raise CheckpointError(f"model directory {str(path)!r} does not exist (pass a Hugging Face checkpoint folder)")
    return path


def load_config(model_dir: str | Path) -> ModelConfig:
    path = _check_dir(model_dir) / "config.json"
    return ModelConfig.from_hf(_read_json(path), where=str(path))


def weight_files(model_dir: Path) -> list[Path]:
    if (model_dir / INDEX_FILE).exists():
        index = _read_json(model_dir / INDEX_FILE)
        names = sorted(set(index.get("weight_map", {}).values()))
        files = [model_dir / n for n in names]
    else:
        files = [model_dir / WEIGHTS_FILE]
    for f in files:
        if not f.exists():
            raise CheckpointError(f"{f} is missing; the checkpoint has no complete safetensors weights")
    return files


def read_hf_tensors(model_dir: Path, cut=None) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, block-quantized ones dequantized to float32 (graphs/block_quant.py); with
    `cut(name, shape) -> (dim, start, stop) | None`, only that range of each tensor (a tensor-parallel rank's slice),
    the whole tensor where it says None."""
    tensors, formats = read_stored_tensors(model_dir, cut)
    for name, fmt in formats.items():
        w = block_quant.dequantize(tensors[name], fmt)
        part = cut and cut(name, tuple(w.shape))
        tensors[name] = w if part is None else w.narrow(part[0], part[1], part[2] - part[1]).contiguous()
    return tensors


def read_stored_tensors(model_dir: Path, cut=None) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Every tensor as stored (`cut` as read_hf_tensors', never applied to block tensors, which come whole) ->
    (tensors, {name: block format} of the block-quantized ones)."""
    tensors, formats = {}, {}
    for f in weight_files(model_dir):
        try:
            with safe_open(str(f), framework="pt") as st:
                kept = block_quant.read_formats(st.metadata(), str(f))
                for name in st.keys():
                    part = cut and name not in kept and cut(name, st.get_slice(name).get_shape())
                    if not part:
                        tensors[name] = st.get_tensor(name)
                    else:
                        dim, start, stop = part
                        tensors[name] = st.get_slice(name)[(slice(None),) * dim + (slice(start, stop),)]
                formats.update(kept)
        except ValueError as e:  # an unknown block format: the message says it all
            raise CheckpointError(str(e)) from None
        except Exception as e:  # safetensors raises its own error types for truncated/corrupt files
            raise CheckpointError(f"{f} cannot be read as safetensors ({e})") from None
    return tensors, formats


def shard_groups(sizes: dict[str, int], max_bytes: int) -> list[list[str]]:
    """Tensor names (in the given order) -> consecutive groups of at most max_bytes each; a tensor larger than that
    is a group of its own."""
    groups: list[list[str]] = [[]]
    used = 0
    for name, size in sizes.items():
        if groups[-1] and used + size > max_bytes:
            groups.append([])
            used = 0
        groups[-1].append(name)
        used += size
    return groups


def write_weights(tensors: dict[str, torch.Tensor], out_dir: Path, max_bytes: int,
                  metadata: dict[str, str] | None = None) -> list[Path]:
    """`tensors` as model.safetensors, or where they hold more than max_bytes, as shards holding at most that many
    bytes of tensors (model-00001-of-0000N.safetensors, ...) listed in model.safetensors.index.json, as Hugging Face
    writes them. Returns the weight files written."""
    sizes = {name: t.numel() * t.element_size() for name, t in tensors.items()}
    groups = shard_groups(sizes, max_bytes)
    if len(groups) == 1:
        names = [WEIGHTS_FILE]
    else:
        names = [f"model-{i:05d}-of-{len(groups):05d}.safetensors" for i in range(1, len(groups) + 1)]
        index = {"metadata": {"total_size": sum(sizes.values())},
                 "weight_map": {t: name for name, group in zip(names, groups, strict=True) for t in group}}
        (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=1))
    for name, group in zip(names, groups, strict=True):
        save_file({t: tensors[t].contiguous() for t in group}, str(out_dir / name), metadata=metadata)
    return [out_dir / name for name in names]


def to_graph_state(hf: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename HF tensors to LlamaGraph's and fuse q|k|v and gate|up."""

    def take(name: str) -> torch.Tensor:
        for key in (name, "model." + name):
            if key in hf:
                return hf[key]
        raise CheckpointError(f"weight {name!r} is missing from the checkpoint")

    out = {"embed.weight": take("embed_tokens.weight"), "norm.weight": take("norm.weight")}
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = take("lm_head.weight")
    for i in range(cfg.n_layers):
        p, q = f"layers.{i}.", f"layers.{i}."
        out[q + "attn_norm.weight"] = take(p + "input_layernorm.weight")
        out[q + "mlp_norm.weight"] = take(p + "post_attention_layernorm.weight")
        qkv = [p + f"self_attn.{n}_proj" for n in "qkv"]
        out[q + "attn.wqkv.weight"] = torch.cat([take(n + ".weight") for n in qkv])
        if cfg.qkv_bias:
            out[q + "attn.wqkv.bias"] = torch.cat([take(n + ".bias") for n in qkv])
        out[q + "attn.wo.weight"] = take(p + "self_attn.o_proj.weight")
        if cfg.o_bias:
            out[q + "attn.wo.bias"] = take(p + "self_attn.o_proj.bias")
        out.update(_feed_forward_state(take, cfg, i))
    return out


def _gated_mlp_state(take, src: tuple[str, str, str], dst: str, bias: bool = False) -> dict[str, torch.Tensor]:
    """HF (gate, up, down) projection names -> a GatedMLP's fused w13 (gate | up) and w2 at `dst`."""
    gate, up, down = src
    out = {dst + "w13.weight": torch.cat([take(gate + ".weight"), take(up + ".weight")]),
           dst + "w2.weight": take(down + ".weight")}
    if bias:
        out[dst + "w13.bias"] = torch.cat([take(gate + ".bias"), take(up + ".bias")])
        out[dst + "w2.bias"] = take(down + ".bias")
    return out


def _feed_forward_state(take, cfg: ModelConfig, i: int) -> dict[str, torch.Tensor]:
    """Layer i's feed-forward: a dense MLP, or a router + experts (+ Qwen2-MoE's gated shared expert)."""
    p, q = f"layers.{i}.", f"layers.{i}.mlp."
    proj = ("gate_proj", "up_proj", "down_proj")
    if cfg.moe is None or i not in cfg.moe.sparse_layers:
        return _gated_mlp_state(take, tuple(p + "mlp." + n for n in proj), q, cfg.mlp_bias)
    if cfg.model_type == "mixtral":
        src, proj = p + "block_sparse_moe.", ("w1", "w3", "w2")
    else:
        src = p + "mlp."
    out = {q + "router.weight": take(src + "gate.weight")}
    for j in range(cfg.moe.n_experts):
        out.update(_gated_mlp_state(take, tuple(f"{src}experts.{j}.{n}" for n in proj), f"{q}experts.{j}."))
    if cfg.moe.shared_expert_size:
        out.update(_gated_mlp_state(take, tuple(src + "shared_expert." + n for n in proj), q + "shared."))
        out[q + "shared_gate.weight"] = take(src + "shared_expert_gate.weight")
    return out


def empty_graph(cfg: ModelConfig, n_slots: int, dtype: torch.dtype, device: str | torch.device = "cpu",
                parameters: bool = True) -> LlamaGraph:
    """A LlamaGraph of `cfg` with uninitialised parameters (meta ones if not `parameters`), zeroed KV caches and
    filled RoPE tables, built on the meta device first (random init of the weights would cost seconds)."""
    with torch.device("meta"):
        model = LlamaGraph(cfg, n_slots, dtype)
    materialize(model, device, parameters)
    model.rope.fill()  # materialize left the RoPE tables uninitialised
    for cache in model.caches():  # masked slots must hold zeros (0 x NaN would leak into every row)
        cache.k.zero_(), cache.v.zero_()
    model.pool_caches()
    return model


def load_model(model_dir: str | Path, n_slots: int, dtype: torch.dtype = torch.float32,
               device: str | torch.device = "cpu", weights: bool = True) -> LlamaGraph:
    """Build a LlamaGraph with a cache of `n_slots` slots and load the checkpoint's weights. weights=False
    builds the cache and RoPE buffers only and leaves the parameters on the meta device: for compiled
    packages that carry their own frozen weights, so the weights are not read or held twice."""
    path = _check_dir(model_dir)
    cfg = load_config(path)
    model = empty_graph(cfg, n_slots, dtype, device, weights)
    if not weights:
        return model.eval().requires_grad_(False)
    state = to_graph_state(read_hf_tensors(path), cfg)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    for name, shape in expected.items():
        if name not in state and not (cfg.tie_word_embeddings and name == "lm_head.weight"):
            raise CheckpointError(f"{path}: weight {name!r} is missing")
        if name in state and tuple(state[name].shape) != tuple(shape):
            raise CheckpointError(
                f"{path}: weight {name!r} has shape {tuple(state[name].shape)}, config.json implies {tuple(shape)}"
            )
    model.load_state_dict(state, strict=False, assign=False)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.embed.weight
    return model.eval().requires_grad_(False)


def materialize(model: torch.nn.Module, device: str | torch.device, parameters: bool = True) -> None:
    """Give meta buffers (and parameters) uninitialised storage on `device` (Module.to_empty pulls in sympy,
    a slow import on the way to the first token)."""
    for mod in model.modules():
        for name, p in mod._parameters.items():
            if parameters and p is not None and p.is_meta:
                mod._parameters[name] = torch.nn.Parameter(torch.empty(p.shape, dtype=p.dtype, device=device),
                                                           requires_grad=False)
        for name, b in mod._buffers.items():
            if b is not None and b.is_meta:
                mod._buffers[name] = torch.empty(b.shape, dtype=b.dtype, device=device)


def load_tokenizer(model_dir: str | Path) -> Tokenizer | None:
    path = _check_dir(model_dir) / "tokenizer.json"
    if not path.exists():
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises a bare Exception on malformed files
        raise CheckpointError(f"{path} cannot be read as a tokenizers file ({e})") from None


def check_pair(verifier_dir: str | Path, drafter_dir: str | Path) -> None:
    """Drafter and verifier must map every real token id to the same token string."""
    vcfg, dcfg = load_config(verifier_dir), load_config(drafter_dir)
    vtok, dtok = load_tokenizer(verifier_dir), load_tokenizer(drafter_dir)
    if vtok is None or dtok is None:
        if vcfg.vocab_size != dcfg.vocab_size:
            raise CheckpointError(
                f"vocab sizes differ (verifier {vcfg.vocab_size}, drafter {dcfg.vocab_size}) and a tokenizer.json "
                "is missing to prove the pair shares its tokens; use a drafter trained with the verifier's tokenizer"
            )
        return
    vvocab = {i: t for t, i in vtok.get_vocab(with_added_tokens=True).items()}
    dvocab = {i: t for t, i in dtok.get_vocab(with_added_tokens=True).items()}
    for i in range(max(len(vvocab), len(dvocab))):
        if vvocab.get(i) != dvocab.get(i):
            raise CheckpointError(
                f"drafter and verifier tokenizers differ at token id {i}: verifier {vvocab.get(i)!r}, "
                f"drafter {dvocab.get(i)!r}; use a drafter trained with the verifier's tokenizer"
            )
    for cfg, name in ((vcfg, "verifier"), (dcfg, "drafter")):
        if cfg.vocab_size < len(vvocab):
            raise CheckpointError(f"{name} vocab_size {cfg.vocab_size} is smaller than its tokenizer ({len(vvocab)})")
