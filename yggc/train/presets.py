"""The presets of the three training jobs (model sizes, data and training budgets), looked up by name, and
the transformers Llama models they build, load and export (safetensors + tokenizer.json).

PAIR_PRESETS: ``yggc train pair``; DRAFTER_PRESETS: ``yggc train drafter``; EAGLE3_PRESETS:
``yggc train eagle3`` (whose data is a drafter preset's).
"""
from __future__ import annotations

import copy
import inspect
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ..errors import YggcError

if TYPE_CHECKING:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

MISSING_EXTRA = "yggc train needs the train extra: pip install 'yggc[train]'"
CACHE = Path("~/.cache/yggc/pairs")  # every job's default output: CACHE/<preset>
P = TypeVar("P")


@dataclass(frozen=True)
class ModelSize:
    """A Llama's size."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int


@dataclass(frozen=True)
class TrainHParams:
    """AdamW with warmup and cosine decay, and the time budget (minutes) of one model."""

    batch_size: int
    lr: float
    warmup_steps: int
    minutes: float
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1
    grad_clip: float = 1.0


@dataclass(frozen=True)
class PairPreset:
    """`yggc train pair --preset NAME`: the corpus tokenizer, both models and their budgets."""

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


PAIR_PRESETS = {
    "tiny": PairPreset(
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
    "demo": PairPreset(
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
    "bench": PairPreset(
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


@dataclass(frozen=True)
class GenSpec:
    """How the target answers the prompts of the drafter data (shards.py)."""

    batch: int        # prompts per shard
    max_new: int      # answer tokens at most
    max_prompt: int   # longer prompts are skipped
    top_k: int        # soft-label width
    seed: int


@dataclass(frozen=True)
class DrafterPreset:
    """`yggc train drafter --preset NAME`: the data, the student and its budget."""

    name: str
    size: ModelSize
    gen: GenSpec
    n_prompts: int       # training prompts answered by the target
    n_eval_prompts: int  # held-out prompts answered for the agreement measurement
    train: TrainHParams
    steps: int
    hard_weight: float = 0.1
    n_calib: int = 48    # training conversations in calib.txt


DRAFTER_PRESETS = {
    "smollm2": DrafterPreset(
        "smollm2", ModelSize(hidden=256, layers=3, heads=4, kv_heads=2, intermediate=768),
        GenSpec(batch=32, max_new=128, max_prompt=256, top_k=16, seed=0), n_prompts=512, n_eval_prompts=32,
        train=TrainHParams(batch_size=8, lr=2e-3, warmup_steps=30, minutes=20.0), steps=700),
    "tiny": DrafterPreset(
        "tiny", ModelSize(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64),
        GenSpec(batch=4, max_new=8, max_prompt=160, top_k=4, seed=0), n_prompts=8, n_eval_prompts=4,
        train=TrainHParams(batch_size=2, lr=3e-3, warmup_steps=2, minutes=1.0), steps=6, n_calib=4),
}


@dataclass(frozen=True)
class Eagle3Preset:
    """`yggc train eagle3 --preset NAME`: the data, the head and its budget."""

    name: str
    data: str  # the DRAFTER_PRESETS entry whose prompts and generation settings make the data
    draft_vocab: int
    unroll: int
    train: TrainHParams
    steps: int
    reference: int = 0  # training prompts also read with their reference answers


EAGLE3_PRESETS = {
    "smollm2": Eagle3Preset("smollm2", "smollm2", draft_vocab=8192, unroll=3,
                            train=TrainHParams(batch_size=8, lr=2e-3, warmup_steps=20, minutes=30.0,
                                               weight_decay=0.0), steps=300, reference=1536),
    "tiny": Eagle3Preset("tiny", "tiny", draft_vocab=64, unroll=3,
                         train=TrainHParams(batch_size=2, lr=3e-3, warmup_steps=2, minutes=1.0, weight_decay=0.0),
                         steps=6),
}


def preset_named(name: str, presets: dict[str, P]) -> P:
    """The preset called `name`; YggcError naming the known ones otherwise."""
    if name not in presets:
        raise YggcError(f"unknown --preset {name!r}; known presets: {', '.join(sorted(presets))}")
    return presets[name]


def require_transformers() -> None:
    """YggcError (one line, the install command) where transformers, which builds the models, is missing."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise YggcError(MISSING_EXTRA) from None


def quiet_transformers() -> None:
    """No progress bars and only errors from transformers: yggc prints its own lines."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def llama_config(size: ModelSize, preset: PairPreset, eot: int) -> LlamaConfig:
    """The pair model's LlamaConfig: tied embeddings, `eot` as bos, eos and pad."""
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


def build_model(size: ModelSize, preset: PairPreset, eot: int, seed: int) -> LlamaForCausalLM:
    """A freshly initialised float32 Llama of `size` (seeded), in training mode."""
    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM._from_config(llama_config(size, preset, eot), attn_implementation="sdpa")
    return model.float().train()


def n_params(model: torch.nn.Module) -> int:
    """The number of parameters of `model` (tied ones once)."""
    return sum(p.numel() for p in model.parameters())


def checkpoint_folder(path: Path, flag: str) -> Path:
    """`path` resolved, or YggcError where it is not a checkpoint folder (config.json and tokenizer.json)."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise YggcError(f"{flag} {path} is not a folder; pass a checkpoint folder, e.g. $(yggc pull smollm2)")
    for name in ("config.json", "tokenizer.json"):
        if not (path / name).is_file():
            raise YggcError(f"{flag} {path} has no {name}; pass a checkpoint folder, e.g. $(yggc pull smollm2)")
    return path


def load_hf_model(path: str | Path, dtype: str = "float32") -> LlamaForCausalLM:
    """A saved Llama checkpoint in eval mode (sdpa attention)."""
    import torch
    from transformers import LlamaForCausalLM

    quiet_transformers()
    model = LlamaForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype), attn_implementation="sdpa")
    return model.eval()


def export_checkpoint(model: torch.nn.Module, tokenizer_path: Path, out_dir: Path, dtype: str) -> None:
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
