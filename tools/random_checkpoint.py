"""Write a random-weight checkpoint (HF format) for latency tests: dense Llama, Mixtral or Qwen2-MoE.

    python tools/random_checkpoint.py --params 5e6 --out /tmp/rand5m
    python tools/random_checkpoint.py --kind mixtral --hidden 768 --layers 6 --experts 16 --top-k 2 \\
        --out /tmp/moe                       # ~190M parameters, 2 of 16 experts per token
    python tools/random_checkpoint.py --kind llama --hidden 768 --layers 6 --intermediate 1536 --out /tmp/dense
    python tools/random_checkpoint.py --drafter-of /tmp/moe --out /tmp/moe_drafter

--residual-scale 0.02 (with the default init) keeps the token embedding dominant, so the cut-down drafter
agrees with its target on about half the tokens; --tokenizer lets `yggc compile --calib` read text.

--drafter-of writes a one-layer dense drafter sharing the target's embedding, final norm and LM head (and its
first layer's attention, with expert 0 as its MLP): in a random network the token embedding dominates the
residual stream, so it agrees with the target often enough to exercise trees. Random weights say nothing
about real acceptance; `yggc train pair` trains a real pair. Needs transformers (pip install -e '.[dev]').
"""
from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import torch


def config_for(params: float, vocab: int = 4096):
    from transformers import LlamaConfig

    # Pick the width whose 8-layer model (plus untied embeddings) lands closest to `params`.
    best = None
    for hidden in range(64, 2049, 32):
        n = 2 * vocab * hidden + 8 * (4 * hidden * hidden + 3 * hidden * (hidden * 8 // 3))
        if best is None or abs(n - params) < abs(best[1] - params):
            best = (hidden, n)
    hidden = best[0]
    heads = max(1, hidden // 64)
    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 8 // 3,
                       num_hidden_layers=8, num_attention_heads=heads, num_key_value_heads=heads,
                       max_position_embeddings=2048, bos_token_id=0, eos_token_id=0)


def sized_config(kind: str, hidden: int, layers: int, intermediate: int, experts: int, top_k: int,
                 vocab: int = 4096):
    """A config of the given sizes; for the MoE kinds `intermediate` is each expert's size."""
    from transformers import AutoConfig

    common = dict(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=hidden // 64,
                  num_key_value_heads=max(1, hidden // 256), max_position_embeddings=2048, bos_token_id=0,
                  eos_token_id=0, tie_word_embeddings=False)
    if kind == "mixtral":
        return AutoConfig.for_model("mixtral", intermediate_size=intermediate, num_local_experts=experts,
                                    num_experts_per_tok=top_k, sliding_window=None, **common)
    if kind == "qwen2_moe":
        return AutoConfig.for_model("qwen2_moe", intermediate_size=intermediate, moe_intermediate_size=intermediate,
                                    shared_expert_intermediate_size=intermediate, num_experts=experts,
                                    num_experts_per_tok=top_k, norm_topk_prob=True, decoder_sparse_step=1, **common)
    return AutoConfig.for_model("llama", intermediate_size=intermediate, **common)


OUTPUT_PROJECTIONS = ("o_proj", "down_proj", ".w2")  # what each layer adds to the residual stream


def write(out: Path, params: float, seed: int = 0, config=None, residual_scale: float = 1.0) -> Path:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config or config_for(params), dtype=torch.float32)
    with torch.no_grad():  # < 1: the layers nudge the token embedding instead of drowning it
        for name, p in model.named_parameters():
            if any(k in name for k in OUTPUT_PROJECTIONS):
                p.mul_(residual_scale)
    model.save_pretrained(out, safe_serialization=True)
    return out


def first_layer_mlp(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The target's layer-0 feed-forward as a dense MLP's tensors (expert 0 of an MoE layer)."""
    renames = {"mlp.gate_proj": ("mlp.gate_proj", "block_sparse_moe.experts.0.w1", "mlp.experts.0.gate_proj"),
               "mlp.up_proj": ("mlp.up_proj", "block_sparse_moe.experts.0.w3", "mlp.experts.0.up_proj"),
               "mlp.down_proj": ("mlp.down_proj", "block_sparse_moe.experts.0.w2", "mlp.experts.0.down_proj")}
    out = {}
    for dst, sources in renames.items():
        src = next(s for s in sources if f"model.layers.0.{s}.weight" in state)
        out[f"model.layers.0.{dst}.weight"] = state[f"model.layers.0.{src}.weight"]
    return out


def write_drafter(target: Path, out: Path) -> Path:
    """A one-layer dense Llama drafter cut from `target` (see the module docstring)."""
    from safetensors.torch import load_file, save_file

    cfg = json.loads((target / "config.json").read_text())
    state = load_file(str(target / "model.safetensors"))
    keep = ("model.embed_tokens.", "model.norm.", "lm_head.", "model.layers.0.self_attn.",
            "model.layers.0.input_layernorm.", "model.layers.0.post_attention_layernorm.")
    tensors = {k: v.contiguous() for k, v in state.items() if k.startswith(keep)} | first_layer_mlp(state)
    ffn = tensors["model.layers.0.mlp.gate_proj.weight"].shape[0]
    fields = ("vocab_size", "hidden_size", "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
              "rms_norm_eps", "bos_token_id", "eos_token_id", "tie_word_embeddings", "rope_parameters", "rope_theta")
    drafter = {k: cfg[k] for k in fields if k in cfg} | {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                        "num_hidden_layers": 1, "intermediate_size": ffn}
    if cfg["model_type"] == "qwen2_moe":  # keep the attention biases the target carries
        drafter["attention_bias"] = True
        tensors["model.layers.0.self_attn.o_proj.bias"] = torch.zeros(cfg["hidden_size"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(drafter, indent=1))
    save_file(tensors, str(out / "model.safetensors"))
    if (target / "tokenizer.json").exists():
        shutil.copyfile(target / "tokenizer.json", out / "tokenizer.json")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="output checkpoint folder")
    ap.add_argument("--params", type=float, default=5e6, help="approximate parameter count (dense, no sizes given)")
    ap.add_argument("--kind", choices=("llama", "mixtral", "qwen2_moe"), help="model type, with the sizes below")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--intermediate", type=int, default=768, help="MLP size (each expert's, for MoE kinds)")
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--residual-scale", type=float, default=1.0,
                    help="scale each layer's output projections (< 1: a cut-down drafter agrees more often)")
    ap.add_argument("--tokenizer", type=Path, help="a tokenizer.json to copy in (its vocabulary must fit --vocab; "
                    "e.g. yggc/demo_pair/verifier/tokenizer.json for the default 4096), so calibration can read text")
    ap.add_argument("--drafter-of", type=Path, metavar="TARGET", help="write a one-layer drafter cut from TARGET")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.drafter_of:
        write_drafter(args.drafter_of, args.out)
    else:
        config = args.kind and sized_config(args.kind, args.hidden, args.layers, args.intermediate, args.experts,
                                            args.top_k, args.vocab)
        write(args.out, args.params, args.seed, config, args.residual_scale)
        if args.tokenizer:
            shutil.copyfile(args.tokenizer, args.out / "tokenizer.json")
    n = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(args.out).parameters())
    print(f"wrote {args.out} ({n / 1e6:.2f}M parameters)")


if __name__ == "__main__":
    main()
