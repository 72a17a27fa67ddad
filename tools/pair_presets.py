"""Model sizes, training budgets and presets of the stdlib pair (tools/train_pair.py), and the
transformers Llama models they build, load and export (safetensors + tokenizer.json).
"""
from __future__ import annotations

import copy
import inspect
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSize:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True)
class TrainHParams:
    batch_size: int
    lr: float
    warmup_steps: int
    minutes: float
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0


@dataclass(frozen=True)
class Preset:
    name: str
    vocab_size: int
    max_positions: int
    seq_len: int
    verifier: ModelSize
    drafter: ModelSize
    verifier_train: TrainHParams
    drafter_train: TrainHParams
    distill_alpha: float | None  # CE weight of the drafter loss; None = plain CE
    compile: bool
    final_dtype: str = "bfloat16"


PRESETS = {
    "tiny": Preset(
        "tiny",
        vocab_size=320,
        max_positions=128,
        seq_len=32,
        verifier=ModelSize(32, 2, 2, 2, 64),
        drafter=ModelSize(16, 1, 1, 1, 32),
        verifier_train=TrainHParams(batch_size=2, lr=3e-3, warmup_steps=2, minutes=1.0),
        drafter_train=TrainHParams(batch_size=2, lr=3e-3, warmup_steps=2, minutes=1.0),
        distill_alpha=0.3,
        compile=False,
    ),
    "demo": Preset(
        "demo",
        vocab_size=4096,
        max_positions=1024,
        seq_len=512,
        verifier=ModelSize(256, 4, 4, 4, 512),
        drafter=ModelSize(128, 2, 2, 2, 384),
        verifier_train=TrainHParams(batch_size=2, lr=1.5e-3, warmup_steps=50, minutes=9.0),
        drafter_train=TrainHParams(batch_size=2, lr=2e-3, warmup_steps=50, minutes=5.0),
        distill_alpha=0.3,
        compile=True,
    ),
    "bench": Preset(
        "bench",
        vocab_size=4096,
        max_positions=2048,
        seq_len=512,
        verifier=ModelSize(512, 8, 8, 8, 1408),
        drafter=ModelSize(256, 3, 4, 4, 512),
        verifier_train=TrainHParams(batch_size=2, lr=1e-3, warmup_steps=50, minutes=60.0),
        drafter_train=TrainHParams(batch_size=2, lr=1.5e-3, warmup_steps=50, minutes=27.0),
        distill_alpha=0.3,
        compile=True,
    ),
}


def quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def llama_config(size: ModelSize, preset: Preset, eot: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=preset.vocab_size,
        hidden_size=size.hidden,
        intermediate_size=size.intermediate,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.kv_heads,
        max_position_embeddings=preset.max_positions,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=True,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=eot,
    )


def build_model(size: ModelSize, preset: Preset, eot: int, seed: int):
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(llama_config(size, preset, eot), attn_implementation="sdpa")
    return model.float().train()


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def load_hf_model(path: str | Path, dtype: str = "float32"):
    import torch
    from transformers import LlamaForCausalLM

    quiet_transformers()
    model = LlamaForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype), attn_implementation="sdpa")
    return model.eval()


def export_checkpoint(model, tokenizer_path: Path, out_dir: Path, dtype: str) -> None:
    """``save_pretrained`` (safetensors) in ``dtype`` plus a copy of ``tokenizer.json``."""
    import torch

    quiet_transformers()
    out_dir.mkdir(parents=True, exist_ok=True)
    clone = copy.deepcopy(model).to(getattr(torch, dtype)).eval()
    kwargs = {}
    if "safe_serialization" in inspect.signature(clone.save_pretrained).parameters:
        kwargs["safe_serialization"] = True  # transformers < 5; v5 always writes safetensors
    clone.save_pretrained(str(out_dir), **kwargs)
    shutil.copyfile(tokenizer_path, out_dir / "tokenizer.json")
