"""Write a random-weight Llama checkpoint (HF format) of about N parameters, for latency tests.

    python tools/random_checkpoint.py --params 5e6 --out /tmp/rand5m

Random weights say nothing about acceptance rates; use tools/train_pair.py for a real pair.
Needs transformers (pip install -e '.[dev]').
"""
from __future__ import annotations

import argparse
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


def write(out: Path, params: float, seed: int = 0) -> Path:
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(config_for(params))
    model.save_pretrained(out, safe_serialization=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=float, default=5e6, help="approximate parameter count")
    ap.add_argument("--out", type=Path, required=True, help="output checkpoint folder")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    write(args.out, args.params, args.seed)
    n = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(args.out).parameters())
    print(f"wrote {args.out} ({n / 1e6:.2f}M parameters)")


if __name__ == "__main__":
    main()
