"""EAGLE-3 head folders in the public layout SGLang and vLLM load, and the check against a verifier.

A head folder holds `config.json` (Llama-style, `architectures: ["LlamaForCausalLMEagle3"]`,
`draft_vocab_size`, optionally `target_hidden_size` and `eagle_config.eagle_aux_hidden_state_layer_ids`)
and `model.safetensors` with `fc.weight`, `midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}`,
`midlayer.self_attn.{q,k,v,o}_proj`, `midlayer.mlp.{gate,up,down}_proj`, `norm.weight`, `lm_head.weight`
(draft vocabulary rows), `d2t` (draft id -> target id minus draft id) and `t2d` (bool over the target
vocabulary). yggc adds a `yggc` block to config.json: the feature layers and the verifier it was trained
for (sizes and a fingerprint of its token embedding), checked at load. The token embedding is read from
the verifier's checkpoint, so a head folder stays small.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from . import block_quant
from .checkpoint import _check_dir, _read_json, load_config, materialize, read_hf_tensors, weight_files, write_weights
from .config import CheckpointError, ModelConfig
from .eagle3 import Eagle3Config, Eagle3Graph, default_feature_layers
from .packed_table import PackedEmbedding

ARCHITECTURE = "LlamaForCausalLMEagle3"
LAYER = "midlayer."
RENAMES = {  # public name -> Eagle3Graph name (q|k|v and gate|up are fused separately)
    "fc.weight": "fc.weight", "norm.weight": "norm.weight", "lm_head.weight": "lm_head.weight",
    LAYER + "input_layernorm.weight": "input_norm.weight", LAYER + "hidden_norm.weight": "hidden_norm.weight",
    LAYER + "post_attention_layernorm.weight": "mlp_norm.weight", LAYER + "self_attn.o_proj.weight": "attn.wo.weight",
    LAYER + "mlp.down_proj.weight": "mlp.w2.weight",
}
QKV = [LAYER + f"self_attn.{n}_proj.weight" for n in "qkv"]
GATE_UP = [LAYER + "mlp.gate_proj.weight", LAYER + "mlp.up_proj.weight"]


def is_eagle3(model_dir: str | Path) -> bool:
    """Whether a drafter folder holds an EAGLE-3 head (its config.json names the architecture)."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return False
    return ARCHITECTURE in (_read_json(path).get("architectures") or [])


def load_eagle3_config(model_dir: str | Path) -> Eagle3Config:
    path = _check_dir(model_dir) / "config.json"
    raw = _read_json(path)
    layer = ModelConfig.from_hf(raw, where=str(path))
    ours = raw.get("yggc") or {}
    verifier = ours.get("verifier") or {}
    layers = (ours.get("feature_layers") or (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
              or default_feature_layers(int(verifier.get("num_hidden_layers", 0))))
    if "draft_vocab_size" not in raw or not layers or min(layers) < 0 or list(layers) != sorted(layers):
        raise CheckpointError(f"{path}: an EAGLE-3 config needs draft_vocab_size and its feature layers "
                              "(yggc.feature_layers or eagle_config.eagle_aux_hidden_state_layer_ids, ascending)")
    return Eagle3Config(layer, int(raw["draft_vocab_size"]), int(raw.get("target_hidden_size") or layer.hidden_size),
                        tuple(int(i) for i in layers), dict(verifier))


def embedding_fingerprint(embed: torch.Tensor) -> str:
    """A short hash of a token embedding [V, H] in bfloat16 (the same for a float32 or bfloat16 copy)."""
    return hashlib.sha256(embed.detach().to(torch.bfloat16).view(torch.int16).numpy().tobytes()).hexdigest()[:16]


def verifier_record(vcfg: ModelConfig, embed: torch.Tensor) -> dict:
    return {"hidden_size": vcfg.hidden_size, "num_hidden_layers": vcfg.n_layers, "vocab_size": vcfg.vocab_size,
            "embedding": embedding_fingerprint(embed)}


def check_eagle3_pair(cfg: Eagle3Config, vcfg: ModelConfig, fingerprint: str | None, where: str) -> None:
    """One clear line when the head was made for another verifier (sizes, layers, or embedding)."""
    fix = "use an EAGLE-3 head trained for this verifier (`yggc train eagle3 --target VERIFIER` makes one)"
    made_for = cfg.verifier
    for key, ours in (("hidden_size", vcfg.hidden_size), ("num_hidden_layers", vcfg.n_layers),
                      ("vocab_size", vcfg.vocab_size)):
        if key in made_for and int(made_for[key]) != ours:
            raise CheckpointError(f"{where} was made for a verifier with {key} {made_for[key]}, this one has {ours}; {fix}")
    if cfg.target_hidden_size != vcfg.hidden_size or cfg.layer.vocab_size != vcfg.vocab_size:
        raise CheckpointError(f"{where} reads hidden size {cfg.target_hidden_size} and vocabulary {cfg.layer.vocab_size}, "
                              f"the verifier has {vcfg.hidden_size} and {vcfg.vocab_size}; {fix}")
    if max(cfg.feature_layers) >= vcfg.n_layers:
        raise CheckpointError(f"{where} reads verifier layer {max(cfg.feature_layers)}, the verifier has "
                              f"{vcfg.n_layers} layers; {fix}")
    if fingerprint and made_for.get("embedding") and made_for["embedding"] != fingerprint:
        raise CheckpointError(f"{where} was trained for another verifier (token embedding {made_for['embedding']}, "
                              f"this verifier's is {fingerprint}); {fix}")


# where a folder that keeps only the verifier's token embedding has it (an O2 bundle's verifier/, whose weights
# are frozen into its package): a safetensors file under the folder, not among the checkpoint's own weight files
EMBEDDING_ONLY = "embedding/embed_tokens.safetensors"
EMBEDDING_KEYS = ("model.embed_tokens.weight", "embed_tokens.weight")


def read_embedding(verifier_dir: Path) -> torch.Tensor:
    """The verifier's token embedding [V, H], read alone from its safetensors (or from EMBEDDING_ONLY); stored as
    blocks (a GGUF's Q8_0 table), dequantized to float32."""
    alone = verifier_dir / EMBEDDING_ONLY
    for f in [alone] if alone.is_file() else weight_files(verifier_dir):
        try:
            with safe_open(str(f), framework="pt") as st:
                formats = block_quant.read_formats(st.metadata(), str(f))
                for key in EMBEDDING_KEYS:
                    if key in st.keys():
                        t = st.get_tensor(key)
                        return block_quant.dequantize(t, formats[key]) if key in formats else t
        except ValueError as e:  # an unknown block format: the message says it all
            raise CheckpointError(str(e)) from None
        except Exception as e:  # safetensors' own error types for truncated/corrupt files
            raise CheckpointError(f"{f} cannot be read as safetensors ({e})") from None
    raise CheckpointError(f"{verifier_dir}: the verifier's embed_tokens.weight is missing")


def save_embedding(embed: torch.Tensor, verifier_dir: Path) -> None:
    """Keep the verifier's token embedding [V, H] alone under verifier_dir (EMBEDDING_ONLY)."""
    out = verifier_dir / EMBEDDING_ONLY
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({EMBEDDING_KEYS[0]: embed.contiguous()}, str(out))


# the same table in packed_table's blocks, where the verifier's package takes it as an input instead of holding
# it (the head and the package then share one copy); its fingerprint is the row-major table's, kept beside it
PACKED_EMBEDDING, PACKED_KEY = "embedding/embed_packed.safetensors", "embed_packed"


def save_packed_embedding(packed: torch.Tensor, fingerprint: str, verifier_dir: Path) -> None:
    out = verifier_dir / PACKED_EMBEDDING
    out.parent.mkdir(parents=True, exist_ok=True)
    save_file({PACKED_KEY: packed.contiguous()}, str(out), metadata={"fingerprint": fingerprint})


def read_packed_embedding(verifier_dir: Path) -> tuple[torch.Tensor, str] | None:
    """(the packed table, the row-major table's fingerprint) if verifier_dir keeps PACKED_EMBEDDING, else None."""
    path = verifier_dir / PACKED_EMBEDDING
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as st:
            return st.get_tensor(PACKED_KEY), (st.metadata() or {})["fingerprint"]
    except Exception as e:  # safetensors' own error types for truncated/corrupt files; a missing key
        raise CheckpointError(f"{path} cannot be read as the verifier's packed embedding ({e})") from None


def to_eagle3_state(hf: dict[str, torch.Tensor], cfg: Eagle3Config, where: str) -> dict[str, torch.Tensor]:
    hf = {k.removeprefix("model."): v for k, v in hf.items()}

    def take(name: str) -> torch.Tensor:
        if name not in hf:
            raise CheckpointError(f"{where}: EAGLE-3 weight {name!r} is missing")
        return hf[name]

    state = {ours: take(public) for public, ours in RENAMES.items()}
    state["attn.wqkv.weight"] = torch.cat([take(n) for n in QKV])
    state["mlp.w13.weight"] = torch.cat([take(n) for n in GATE_UP])
    state["draft_ids"] = draft_ids_of(take("d2t"), cfg, where)
    return state


def draft_ids_of(d2t: torch.Tensor, cfg: Eagle3Config, where: str) -> torch.Tensor:
    """d2t [Vd] (draft id -> verifier id minus draft id) -> the verifier id of each draft id [Vd], checked."""
    if d2t.shape != (cfg.draft_vocab_size,):
        raise CheckpointError(f"{where}: d2t has shape {tuple(d2t.shape)}, draft_vocab_size is {cfg.draft_vocab_size}")
    ids = d2t.long() + torch.arange(cfg.draft_vocab_size)
    if ids.min() < 0 or ids.max() >= cfg.layer.vocab_size or torch.unique(ids).numel() != ids.numel():
        raise CheckpointError(f"{where}: d2t does not map the draft vocabulary onto distinct verifier tokens")
    return ids


# where an O2 bundle keeps a head whose package holds its layer, norm and LM head: the feature fusion the runtime
# runs eagerly (fc) and the draft vocabulary (d2t), under the public names, in a file beside config.json
FUSION_ONLY = "fusion/fc.safetensors"
FUSION_KEYS = ("fc.weight", "d2t")


def save_fusion(graph: Eagle3Graph, head_dir: Path) -> None:
    out = head_dir / FUSION_ONLY
    out.parent.mkdir(parents=True, exist_ok=True)
    state = public_state(graph)
    save_file({k: state[k] for k in FUSION_KEYS}, str(out))


def read_fusion(path: Path, cfg: Eagle3Config) -> dict[str, torch.Tensor]:
    """The state FUSION_ONLY holds: {"fc.weight", "draft_ids"}."""
    try:
        with safe_open(str(path), framework="pt") as st:
            fc, d2t = (st.get_tensor(k) for k in FUSION_KEYS)
    except Exception as e:  # safetensors' own error types for truncated/corrupt files; a missing key
        raise CheckpointError(f"{path} cannot be read as the head's feature fusion ({e})") from None
    return {"fc.weight": fc, "draft_ids": draft_ids_of(d2t, cfg, str(path))}


def load_eagle3(model_dir: str | Path, verifier_dir: str | Path, n_slots: int, dtype: torch.dtype = torch.float32,
                device: str | torch.device = "cpu", weights: bool = True) -> Eagle3Graph:
    """The head of `model_dir`, checked against and bound to the verifier of `verifier_dir`. weights=False where
    the folder keeps FUSION_ONLY (an O2 bundle's): only fc and the draft vocabulary are read, the weights the
    head's package holds stay on the meta device."""
    path, vpath = _check_dir(model_dir), _check_dir(verifier_dir)
    cfg = load_eagle3_config(path)
    packed = read_packed_embedding(vpath)
    if packed:
        embed, fingerprint = packed
    else:
        embed = read_embedding(vpath)
        fingerprint = embedding_fingerprint(embed)
    check_eagle3_pair(cfg, load_config(vpath), fingerprint, f"EAGLE-3 head {path}")
    fusion_only = not weights and (path / FUSION_ONLY).is_file()
    state = read_fusion(path / FUSION_ONLY, cfg) if fusion_only else to_eagle3_state(read_hf_tensors(path), cfg, str(path))
    with torch.device("meta"):
        graph = Eagle3Graph(cfg, n_slots, dtype)
    if packed:  # the rows are gathered from the table the verifier's package reads too: bound, not copied
        graph.embed = PackedEmbedding(embed.to(device))
    state["embed.packed" if packed else "embed.weight"] = embed
    materialize(graph, device, parameters=not fusion_only)
    graph.rope.fill()  # materialize left the RoPE tables empty
    graph.attn.cache.k.zero_(), graph.attn.cache.v.zero_()
    expected = {**{k: v.shape for k, v in graph.state_dict().items()}, "draft_ids": graph.draft_ids.shape}
    for name, shape in expected.items():
        if name in state and tuple(state[name].shape) != tuple(shape):
            raise CheckpointError(f"{path}: weight {name!r} has shape {tuple(state[name].shape)}, "
                                  f"config.json implies {tuple(shape)}")
    own = {k: v for k, v in state.items() if k != "draft_ids"}
    if fusion_only:  # fc and the embedding become the graph's; the rest stays on meta: the package holds it
        graph.load_state_dict({k: v.to(device, dtype) for k, v in own.items()}, strict=False, assign=True)
    else:
        graph.load_state_dict(own, strict=True)
    graph.draft_ids.copy_(state["draft_ids"])
    return graph.eval().requires_grad_(False)


def eagle3_config_json(cfg: Eagle3Config, base: dict) -> dict:
    """config.json of a head: `base` (the layer's Llama fields) plus the EAGLE-3 and yggc fields."""
    return {**base, "architectures": [ARCHITECTURE], "num_hidden_layers": 1, "tie_word_embeddings": False,
            "draft_vocab_size": cfg.draft_vocab_size, "target_hidden_size": cfg.target_hidden_size,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(cfg.feature_layers)},
            "yggc": {"feature_layers": list(cfg.feature_layers), "verifier": cfg.verifier}}


def public_state(graph: Eagle3Graph) -> dict[str, torch.Tensor]:
    """The head's weights under the public names (the embedding is left out: it is the verifier's)."""
    own = graph.state_dict()
    out = {public: own[ours].contiguous() for public, ours in RENAMES.items()}
    out.update(zip(QKV, (t.contiguous() for t in own["attn.wqkv.weight"].split(
        [graph.attn.n_heads * graph.attn.hd, graph.attn.n_kv * graph.attn.hd, graph.attn.n_kv * graph.attn.hd]))))
    out.update(zip(GATE_UP, (t.contiguous() for t in own["mlp.w13.weight"].split(graph.mlp.ffn))))
    ids = graph.draft_ids.cpu()
    out["d2t"] = ids - torch.arange(ids.numel())
    t2d = torch.zeros(graph.cfg.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    out["t2d"] = t2d
    return out


# a head's weight files stay under 16 MiB each, so a head can ship inside the package: at most 15 MiB of tensors
# per file (the rest is room for the file's header), shards above that
MAX_FILE_BYTES = 15 * 2**20


def save_eagle3(graph: Eagle3Graph, base_config: dict, out_dir: str | Path, extra_files: dict[str, str] | None = None) -> Path:
    """Write a head folder atomically (a temporary folder renamed into place); weights in files holding at most
    MAX_FILE_BYTES of tensors each."""
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        (tmp / "config.json").write_text(json.dumps(eagle3_config_json(graph.eagle, base_config), indent=1))
        write_weights(public_state(graph), tmp, MAX_FILE_BYTES, metadata={"format": "pt"})
        for name, text in (extra_files or {}).items():
            (tmp / name).write_text(text)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def head_base_config(verifier_dir: str | Path) -> dict:
    """A new head's Llama fields: the verifier's config.json (same sizes, RoPE and vocabulary), one layer."""
    raw = _read_json(_check_dir(verifier_dir) / "config.json")
    keep = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters", "max_position_embeddings", "vocab_size",
            "bos_token_id", "eos_token_id", "hidden_act")
    return {"model_type": "llama", **{k: raw[k] for k in keep if k in raw}}


def new_eagle3(verifier_dir: str | Path, draft_ids: torch.Tensor, n_slots: int,
               feature_layers: tuple[int, ...] | None = None, seed: int = 0, init_std: float = 0.02) -> Eagle3Graph:
    """A randomly initialised float32 head for the verifier of `verifier_dir` over the draft vocabulary
    `draft_ids` [Vd] (verifier token ids), bound to the verifier's embedding. -> graph; its config.json
    base is head_base_config(verifier_dir)."""
    vpath = _check_dir(verifier_dir)
    vcfg, embed = load_config(vpath), read_embedding(vpath)
    layers = tuple(feature_layers or default_feature_layers(vcfg.n_layers))
    layer = ModelConfig.from_hf({**head_base_config(vpath), "num_hidden_layers": 1}, where=str(vpath))
    cfg = Eagle3Config(layer, int(draft_ids.numel()), vcfg.hidden_size, layers, verifier_record(vcfg, embed))
    check_eagle3_pair(cfg, vcfg, None, "the new head")
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        graph = Eagle3Graph(cfg, n_slots)
    materialize(graph, "cpu")
    graph.rope.fill()
    graph.attn.cache.k.zero_(), graph.attn.cache.v.zero_()
    for name, p in graph.named_parameters():
        if name == "embed.weight":
            p.copy_(embed.float())
        elif name.endswith("norm.weight"):
            p.fill_(1.0)
        else:
            p.copy_(torch.randn(p.shape, generator=gen) * init_std)
    graph.draft_ids.copy_(draft_ids.long())
    return graph.requires_grad_(False)
