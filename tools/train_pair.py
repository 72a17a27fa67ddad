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
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

try:  # works both as tools/train_pair.py (script) and as tools.train_pair (namespace package)
    import pair_data
except ImportError:  # pragma: no cover
    from tools import pair_data

# the data side, re-exported: eval_pair.py, yggc/bench/prompts.py and the tests import these from train_pair
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

from pair_presets import PRESETS, Preset, load_hf_model, n_params  # noqa: E402,F401 (n_params, load_hf_model: re-exported)
from train_loop import ROLES, Job, train_model  # noqa: E402

DEFAULT_ROOT = Path("~/.cache/yggc/pairs").expanduser()




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
