#!/usr/bin/env python3
"""Train a matched verifier/drafter pair (Llama architecture) on the Python stdlib.

The pair shares one byte-level BPE tokenizer and is meant as a small but *real*
workload for yggc's speculative decoding: the drafter predicts the verifier's
greedy tokens often enough that tree/chain drafts get accepted.

Corpus, held-out split, held-out prompts and tokenizer live in ``pair_data.py``
(re-exported here).  The tokenizer is a byte-level BPE of ``--vocab-size``
tokens (4096 for demo/bench) trained on the training split.

Models
    ``transformers.LlamaForCausalLM`` with tied input/output embeddings, saved
    with ``save_pretrained`` (safetensors) plus ``tokenizer.json`` in each of
    ``OUT/verifier`` and ``OUT/drafter``.  Final weights are bfloat16 for every
    preset: it halves the weight traffic of memory-bound decoding and the
    models were trained in float32 so the rounding costs ~nothing.

Training
    AdamW, linear warmup then cosine decay to 10%, gradient clipping, random
    windows of ``seq_len + 1`` tokens from the concatenated training stream;
    the batch of step ``s`` is a pure function of ``(seed, role, s)``, so runs
    are deterministic and resume exactly.  Training state (float32 weights,
    AdamW moments, step) lives in ``OUT/.state/<role>/`` as safetensors + JSON
    (no pickle) and is resumed automatically (``--no-resume`` starts over).
    With ``--max-minutes`` and no ``--steps`` the total number of steps is
    estimated from the measured speed (after a few steps, refined at 10% and 50%
    of the budget) and stored in the state; pass ``--steps`` to reproduce a run
    bit-exactly.  Training stops hard at 1.25x the budget (then rerun to resume).

Decisions (measured on a 2-core Cascade Lake Xeon, AVX-512, no AVX512-BF16)
    * bfloat16 autocast: *off*.  Without native bf16 it was 2.5x slower than
      float32 (demo verifier: 1.7k vs 4.5k tokens/s).  ``--autocast`` exists.
    * ``torch.compile``: on for demo/bench (1.36x faster after a ~40 s
      compile), off for tiny.
    * Threads: use ``--threads 1`` on a shared machine.  With the other core
      busy, 2 OpenMP threads ran at 1.1k tokens/s against 2.5k for 1 thread.
    * Batch: 2 x 512 tokens.  On these budgets every model is step/token
      starved (the demo verifier sees ~1.6M tokens, < 1 epoch); at equal wall
      time batch 2 beat batch 8 (held-out ppl 185 vs 376 after 2.5 min).
    * Distillation: *on*.  The drafter is trained on ``0.3 * CE + 0.7 *
      KL(verifier || drafter)`` (``--distill-alpha``, ``--no-distill``).
      Demo pair, same verifier, ~equal wall time (5.3 vs 6.2 min): top-1
      agreement on held-out text 70.8% vs 49.5%, chain mean accepted length
      k=4 3.87 vs 2.60, k=8 5.50 vs 2.99 -- although the plain-CE drafter
      (2.3x more steps: no teacher forward) has the better held-out
      perplexity (53 vs 78; the verifier's is 87).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import inspect
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

try:  # works both as tools/train_pair.py (script) and as tools.train_pair (namespace package)
    import pair_data
except ImportError:  # pragma: no cover
    from tools import pair_data

# the data side, re-exported: eval_pair.py, yggc/benchmark.py and the tests import these from train_pair
EOT = pair_data.EOT
EXCLUDED_DIRS = pair_data.EXCLUDED_DIRS
HELDOUT_MODULUS = pair_data.HELDOUT_MODULUS
MAX_FILE_BYTES = pair_data.MAX_FILE_BYTES
Prompt = pair_data.Prompt
add_bos_post_processor = pair_data.add_bos_post_processor
corpus_files = pair_data.corpus_files
encode_documents = pair_data.encode_documents
eot_id = pair_data.eot_id
heldout_files = pair_data.heldout_files
heldout_prompt_records = pair_data.heldout_prompt_records
heldout_prompts = pair_data.heldout_prompts
is_heldout = pair_data.is_heldout
load_tokenizer = pair_data.load_tokenizer
read_text = pair_data.read_text
rel_posix = pair_data.rel_posix
split_files = pair_data.split_files
stdlib_root = pair_data.stdlib_root
train_tokenizer = pair_data.train_tokenizer

ROLES = ("verifier", "drafter")
DEFAULT_ROOT = Path("~/.cache/yggc/pairs").expanduser()


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --------------------------------------------------------------------------- presets


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


# --------------------------------------------------------------------------- models


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


# --------------------------------------------------------------------------- training state


def save_state(state_dir: Path, model, opt, meta: dict) -> None:
    """float32 weights + AdamW moments as safetensors, counters as JSON; JSON written last."""
    import torch
    from safetensors.torch import save_file, save_model

    state_dir.mkdir(parents=True, exist_ok=True)
    names = {id(p): n for n, p in model.named_parameters()}
    opt_tensors = {}
    for group in opt.param_groups:
        for p in group["params"]:
            for key, val in opt.state.get(p, {}).items():
                val = val if torch.is_tensor(val) else torch.tensor(val)
                opt_tensors[f"{names[id(p)]}::{key}"] = val.detach().contiguous()
    save_model(model, str(state_dir / "model.tmp.safetensors"))
    save_file(opt_tensors, str(state_dir / "optimizer.tmp.safetensors"))
    os.replace(state_dir / "model.tmp.safetensors", state_dir / "model.safetensors")
    os.replace(state_dir / "optimizer.tmp.safetensors", state_dir / "optimizer.safetensors")
    (state_dir / "state.tmp.json").write_text(json.dumps(meta, indent=1))
    os.replace(state_dir / "state.tmp.json", state_dir / "state.json")


def load_state(state_dir: Path, model, opt) -> dict:
    from safetensors.torch import load_file, load_model

    load_model(model, str(state_dir / "model.safetensors"))
    params = dict(model.named_parameters())
    for key, val in load_file(str(state_dir / "optimizer.safetensors")).items():
        name, field = key.split("::")
        opt.state[params[name]][field] = val
    return json.loads((state_dir / "state.json").read_text())


def make_optimizer(model, hp: TrainHParams):
    import torch

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": hp.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hp.lr, betas=(0.9, 0.95), eps=1e-8)


def lr_at(step: int, total: int | None, hp: TrainHParams) -> float:
    if step < hp.warmup_steps:
        return hp.lr * (step + 1) / hp.warmup_steps
    if not total:
        return hp.lr
    frac = min(1.0, (step - hp.warmup_steps) / max(1, total - hp.warmup_steps))
    return hp.lr * (hp.min_lr_ratio + (1 - hp.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def sample_batch(tokens: np.ndarray, seed: int, role: str, step: int, batch: int, seq_len: int):
    """Random windows of ``seq_len + 1`` tokens; a pure function of (seed, role, step)."""
    import torch

    rng = np.random.default_rng([seed, ROLES.index(role), step])
    starts = rng.integers(0, len(tokens) - seq_len - 1, size=batch)
    windows = np.stack([tokens[s : s + seq_len + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(windows)


# --------------------------------------------------------------------------- training loop


@dataclass
class Job:
    role: str
    preset: Preset
    size: ModelSize
    hp: TrainHParams
    tokens: np.ndarray
    tokenizer_path: Path
    out_dir: Path
    seed: int = 0
    steps: int | None = None
    resume: bool = True
    compile: bool = False
    autocast: bool = False
    teacher_dir: Path | None = None
    distill_alpha: float | None = None
    ckpt_every: int = 200
    stop_after: int | None = None
    calib_steps: int = 5

    @property
    def state_dir(self) -> Path:
        return self.out_dir / ".state" / self.role


def make_loss_fn(model, teacher, alpha: float | None, autocast: bool):
    """``x -> (loss, ce)``; with a teacher: ``alpha * CE + (1 - alpha) * KL(teacher || model)``."""
    import torch
    import torch.nn.functional as F

    def loss_fn(x):
        inp, tgt = x[:, :-1], x[:, 1:].reshape(-1)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=inp).logits
        logits = logits.float().flatten(0, 1)
        ce = F.cross_entropy(logits, tgt)
        if teacher is None:
            return ce, ce
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            t_logits = teacher(input_ids=inp).logits
        t_logp = F.log_softmax(t_logits.float().flatten(0, 1), dim=-1)
        kl = F.kl_div(F.log_softmax(logits, dim=-1), t_logp, log_target=True, reduction="batchmean")
        return alpha * ce + (1 - alpha) * kl, ce

    return loss_fn


def init_job(job: Job, eot: int):
    """Model, optimizer, metadata (resumed from ``job.state_dir`` when possible), teacher."""
    model = build_model(job.size, job.preset, eot, job.seed + ROLES.index(job.role))
    opt = make_optimizer(model, job.hp)
    meta = {
        "role": job.role,
        "preset": job.preset.name,
        "step": 0,
        "total_steps": job.steps,
        "tokens_seen": 0,
        "train_seconds": 0.0,
        "seed": job.seed,
        "size": asdict(job.size),
        "hparams": asdict(job.hp),
        "seq_len": job.preset.seq_len,
        "distill_alpha": job.distill_alpha,
        "tokenizer_sha256": file_sha256(job.tokenizer_path),
        "params": n_params(model),
        "loss_ema": None,
    }
    if job.resume and (job.state_dir / "state.json").exists():
        old = load_state(job.state_dir, model, opt)
        for key in ("size", "seq_len", "seed", "tokenizer_sha256"):
            if old[key] != meta[key]:
                sys.exit(f"{job.state_dir}: saved {key} {old[key]!r} != {meta[key]!r}; use --no-resume")
        meta = old
        if job.steps is not None:
            meta["total_steps"] = job.steps
        print(f"[{job.role}] resumed at step {meta['step']} from {job.state_dir}", file=sys.stderr)
    teacher = None
    if job.teacher_dir is not None:
        teacher = load_hf_model(job.teacher_dir, "float32")
        for p in teacher.parameters():
            p.requires_grad_(False)
    return model, opt, meta, teacher


REFINE_AT = (0.1, 0.5)  # fractions of the budget at which total_steps is re-estimated
GRACE = 1.25  # hard stop at GRACE * budget when the estimate was too optimistic


def update_total(meta: dict, job: Job, t_run0: float, t_calib: float, calib_step: int) -> None:
    """Fit ``total_steps`` to the time budget from the speed measured since ``calib_step``.

    First estimated after ``calib_steps`` steps, refined at each fraction in REFINE_AT of the
    budget, then frozen (stored in the state: a resumed run keeps it).  No-op with ``--steps``.
    """
    done, elapsed, budget = meta["step"] - calib_step, time.time() - t_run0, job.hp.minutes * 60
    stage = meta.get("estimate_stage", 0)
    if job.steps is not None or stage > len(REFINE_AT) or done < job.calib_steps:
        return
    if stage > 0 and elapsed < REFINE_AT[stage - 1] * budget:
        return
    sec_per_step = (time.time() - t_calib) / done
    meta["total_steps"] = meta["step"] + max(1, int(0.98 * (budget - elapsed) / sec_per_step))
    meta["estimate_stage"] = stage + 1


def train_step(model, opt, loss_fn, x, grad_clip: float) -> float:
    """One optimizer step; returns the batch cross-entropy."""
    import torch

    loss, ce = loss_fn(x)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return ce.detach().item()


def stop_reason(job: Job, meta: dict, start: int, elapsed: float) -> str | None:
    if job.stop_after is not None and meta["step"] - start >= job.stop_after:
        return f"--stop-after {job.stop_after}"
    if elapsed > GRACE * job.hp.minutes * 60 and meta["step"] < (meta["total_steps"] or 0):
        return f"time budget ({GRACE} x {job.hp.minutes} min)"
    return None


def progress_bar(job: Job, meta: dict):
    from tqdm import tqdm

    interval = 1.0 if sys.stderr.isatty() else 30.0  # keep nohup logs short
    return tqdm(
        total=meta["total_steps"], initial=meta["step"], desc=job.role, dynamic_ncols=True, mininterval=interval
    )


def finish(job: Job, model, opt, meta: dict, start: int, seconds: float) -> dict:
    """Final training state + exported checkpoint ``out_dir/<role>``."""
    meta.update(train_seconds=meta["train_seconds"] + seconds, start_step=start)
    meta["finished"] = meta["step"] >= (meta["total_steps"] or 0)
    save_state(job.state_dir, model, opt, meta)
    export_checkpoint(model, job.tokenizer_path, job.out_dir / job.role, job.preset.final_dtype)
    print(
        f"[{job.role}] {meta['params'] / 1e6:.2f}M params, step {meta['step']}/{meta['total_steps']}, "
        f"{meta['tokens_seen'] / 1e6:.2f}M tokens, train CE {meta['loss_ema']:.3f}, "
        f"{meta['train_seconds'] / 60:.1f} min -> {job.out_dir / job.role}",
        file=sys.stderr,
    )
    return meta


def train_model(job: Job) -> dict:
    """Train (or resume) one model, checkpoint it, export ``out_dir/<role>``; returns the metadata."""
    import torch

    model, opt, meta, teacher = init_job(job, eot_id(load_tokenizer(job.tokenizer_path)))
    loss_fn = make_loss_fn(model, teacher, job.distill_alpha, job.autocast)
    loss_fn = torch.compile(loss_fn) if job.compile else loss_fn
    start, t0, t_calib, bar = meta["step"], time.time(), None, progress_bar(job, meta)
    while meta["total_steps"] is None or meta["step"] < meta["total_steps"]:
        for group in opt.param_groups:
            group["lr"] = lr_at(meta["step"], meta["total_steps"], job.hp)
        x = sample_batch(job.tokens, job.seed, job.role, meta["step"], job.hp.batch_size, job.preset.seq_len)
        ce = train_step(model, opt, loss_fn, x, job.hp.grad_clip)
        meta["step"] += 1
        meta["tokens_seen"] += x[:, 1:].numel()
        meta["loss_ema"] = ce if meta["loss_ema"] is None else 0.95 * meta["loss_ema"] + 0.05 * ce
        t_calib = time.time() if meta["step"] == start + 1 else t_calib  # step 1 includes compilation
        update_total(meta, job, t0, t_calib, start + 1)
        elapsed, bar.total = time.time() - t0, meta["total_steps"]
        tok_s = (meta["step"] - start) * x[:, 1:].numel() / elapsed
        postfix = {"ce": f"{meta['loss_ema']:.3f}", "lr": f"{opt.param_groups[0]['lr']:.1e}", "tok_s": f"{tok_s:.0f}"}
        bar.set_postfix(postfix, refresh=False)
        bar.update(1)
        reason = stop_reason(job, meta, start, elapsed)
        if reason:
            print(f"\n[{job.role}] stopped by {reason} at step {meta['step']}/{meta['total_steps']}; rerun to resume")
            break
        if meta["step"] % job.ckpt_every == 0:
            save_state(job.state_dir, model, opt, {**meta, "train_seconds": meta["train_seconds"] + elapsed})
    bar.close()
    return finish(job, model, opt, meta, start, time.time() - t0)


# --------------------------------------------------------------------------- driver


def prepare_data(out_dir: Path, corpus_dir: Path | None, vocab_size: int, resume: bool, tokenizer: Path | None = None):
    """Train (or reuse, or copy from ``tokenizer``) ``out_dir/tokenizer.json``; encode the training stream."""
    t0 = time.time()
    train_files, held = split_files(corpus_dir)
    if not train_files:
        sys.exit(f"no training files under {corpus_dir or stdlib_root()}")
    texts = [read_text(p) for p in train_files]
    tok_path = out_dir / "tokenizer.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None and not (resume and tok_path.exists()):
        shutil.copyfile(tokenizer, tok_path)
    elif not (resume and tok_path.exists()):
        train_tokenizer(texts, vocab_size).save(str(tok_path))
    tok = load_tokenizer(tok_path)
    tokens = encode_documents(tok, texts)
    print(
        f"corpus: {len(train_files)} train / {len(held)} held-out files, {sum(map(len, texts)) / 1e6:.1f}M chars, "
        f"{len(tokens) / 1e6:.2f}M tokens (vocab {tok.get_vocab_size()}), {time.time() - t0:.0f}s",
        file=sys.stderr,
    )
    return tok_path, tokens


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: X)`` only for options whose default is not None."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and "default" not in text:
            text += " (default: %(default)s)"
        return text


EXAMPLES = """examples:
  python tools/train_pair.py --preset demo --threads 1          # ~15 min on one core
  python tools/train_pair.py --preset bench --threads 1 --tokenizer yggc/demo_pair/verifier/tokenizer.json
  python tools/eval_pair.py --pair ~/.cache/yggc/pairs/demo      # held-out metrics
"""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Train a verifier + drafter Llama pair (shared byte-level BPE tokenizer) on the "
        "Python stdlib sources. Writes OUT/verifier and OUT/drafter (config.json, model.safetensors, "
        "tokenizer.json); resumable training state in OUT/.state/.",
        formatter_class=HelpFormatter,
        epilog=EXAMPLES,
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="demo", help="model sizes and budgets")
    ap.add_argument("--out", type=Path, help="output dir (default: ~/.cache/yggc/pairs/<preset>)")
    ap.add_argument("--corpus-dir", type=Path, help="use *.py files under this dir instead of the stdlib")
    ap.add_argument(
        "--only",
        choices=("both",) + ROLES,
        default="both",
        help="train just one model (the drafter needs OUT/verifier when distilling)",
    )
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch intra-op threads")
    ap.add_argument("--max-minutes", type=float, help="time budget per model (overrides the preset)")
    ap.add_argument("--verifier-minutes", type=float, help="time budget of the verifier")
    ap.add_argument("--drafter-minutes", type=float, help="time budget of the drafter")
    ap.add_argument("--steps", type=int, help="total optimizer steps per model (default: fit the budget)")
    ap.add_argument("--batch-size", type=int, help="sequences per step (default: the preset's)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default: the preset's)")
    ap.add_argument("--seq-len", type=int, help="training sequence length (default: the preset's)")
    ap.add_argument("--vocab-size", type=int, help="BPE vocabulary size (default: the preset's)")
    ap.add_argument("--tokenizer", type=Path, help="reuse this tokenizer.json instead of training one")
    ap.add_argument("--seed", type=int, default=0, help="seed of the initialization and the batch order")
    ap.add_argument("--distill-alpha", type=float, help="drafter loss = a*CE + (1-a)*KL(verifier||drafter)")
    ap.add_argument("--no-distill", action="store_true", help="train the drafter on plain cross-entropy")
    ap.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the training step (default: the preset's)",
    )
    ap.add_argument("--autocast", action="store_true", help="bfloat16 autocast (slower without AVX512-BF16/AMX)")
    ap.add_argument("--no-resume", action="store_true", help="ignore existing tokenizer and training state")
    ap.add_argument("--ckpt-every", type=int, default=200, help="save training state every N steps")
    ap.add_argument("--stop-after", type=int, help="stop after N steps in this run (resume later)")
    return ap.parse_args(argv)


def make_jobs(args: argparse.Namespace, preset: Preset, out: Path, tok_path: Path, tokens: np.ndarray) -> list[Job]:
    alpha = (
        None if args.no_distill else (args.distill_alpha if args.distill_alpha is not None else preset.distill_alpha)
    )
    jobs = []
    for role in ROLES:
        if args.only not in ("both", role):
            continue
        hp = preset.verifier_train if role == "verifier" else preset.drafter_train
        minutes = getattr(args, f"{role}_minutes") or args.max_minutes
        hp = replace(hp, minutes=minutes) if minutes else hp
        hp = replace(hp, batch_size=args.batch_size or hp.batch_size, lr=args.lr or hp.lr)
        distill = role == "drafter" and alpha is not None
        jobs.append(
            Job(
                role=role,
                preset=preset,
                size=getattr(preset, role),
                hp=hp,
                tokens=tokens,
                tokenizer_path=tok_path,
                out_dir=out,
                seed=args.seed,
                steps=args.steps,
                resume=not args.no_resume,
                compile=preset.compile if args.compile is None else args.compile,
                autocast=args.autocast,
                teacher_dir=out / "verifier" if distill else None,
                distill_alpha=alpha if distill else None,
                ckpt_every=args.ckpt_every,
                stop_after=args.stop_after,
            )
        )
    return jobs


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    preset = PRESETS[args.preset]
    preset = replace(preset, vocab_size=args.vocab_size or preset.vocab_size, seq_len=args.seq_len or preset.seq_len)
    out = (args.out or DEFAULT_ROOT / preset.name).expanduser().resolve()
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    t0 = time.time()
    tok_path, tokens = prepare_data(out, args.corpus_dir, preset.vocab_size, not args.no_resume, args.tokenizer)
    preset = replace(preset, vocab_size=load_tokenizer(tok_path).get_vocab_size())
    results = {job.role: train_model(job) for job in make_jobs(args, preset, out, tok_path, tokens)}
    summary = {"preset": asdict(preset), "out": str(out), "wall_seconds": time.time() - t0, "models": results}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1))
    print(f"done in {summary['wall_seconds'] / 60:.1f} min -> {out}", file=sys.stderr)
    return summary


if __name__ == "__main__":
    main()
