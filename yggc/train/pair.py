"""``yggc train pair``: a matched verifier/drafter pair (Llama architecture) trained on the Python stdlib.

The pair shares one byte-level BPE tokenizer and is meant as a small but *real*
workload for yggc's speculative decoding: the drafter predicts the verifier's
greedy tokens often enough that tree/chain drafts get accepted.

Corpus, held-out split, held-out prompts and tokenizer live in ``corpus.py``,
the training loop in ``loop.py``.  The tokenizer is a byte-level BPE of
``--vocab-size`` tokens (4096 for demo/bench) trained on the training split.

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
    * bfloat16 autocast: *off*.  Without native bf16 it was much slower than
      float32.  ``--autocast`` exists.
    * ``torch.compile``: on for demo/bench (faster once its compile is paid),
      off for tiny, whose runs are too short for that.
    * Threads: use ``--threads 1`` on a shared machine.  With the other core
      busy, 2 OpenMP threads waited on each other and ran slower than 1.
    * Batch: 2 x 512 tokens.  On these budgets every model is step/token
      starved (the demo verifier sees less than an epoch); at equal wall
      time batch 2 reached a much lower held-out perplexity than batch 8.
    * Distillation: *on*.  The drafter is trained on ``0.3 * CE + 0.7 *
      KL(verifier || drafter)`` (``--distill-alpha``, ``--no-distill``).
      On the demo pair at about equal wall time it agrees with the verifier
      far more often held out, and accepts longer chains, than a plain-CE
      drafter, although that one (more steps: no teacher forward) has the
      better held-out perplexity.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from ..errors import YggcError
from .batches import ROLES
from .corpus import encode_documents, load_tokenizer, read_text, split_files, stdlib_root, train_tokenizer
from .loop import Job, log, train_model
from .options import PairOptions
from .presets import CACHE, PAIR_PRESETS, PairPreset, preset_named, require_transformers


def prepare_data(out_dir: Path, corpus_dir: Path | None, vocab_size: int, resume: bool,
                 tokenizer: Path | None = None) -> tuple[Path, np.ndarray]:
    """Train (or reuse, or copy from ``tokenizer``) ``out_dir/tokenizer.json``; encode the training stream."""
    t0 = time.time()
    train_files, held = split_files(corpus_dir)
    if not train_files:
        raise YggcError(f"no training files (*.py) under {corpus_dir or stdlib_root()}")
    texts = [read_text(p) for p in train_files]
    tok_path = out_dir / "tokenizer.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer is not None and not (resume and tok_path.exists()):
        shutil.copyfile(tokenizer, tok_path)
    elif not (resume and tok_path.exists()):
        train_tokenizer(texts, vocab_size).save(str(tok_path))
    tok = load_tokenizer(tok_path)
    tokens = encode_documents(tok, texts)
    log("pair", f"corpus: {len(train_files)} train / {len(held)} held-out files, "
        f"{sum(map(len, texts)) / 1e6:.1f}M chars, {len(tokens) / 1e6:.2f}M tokens "
        f"(vocab {tok.get_vocab_size()}), {time.time() - t0:.0f}s")
    return tok_path, tokens


def make_jobs(options: PairOptions, preset: PairPreset, out: Path, tok_path: Path, tokens: np.ndarray) -> list[Job]:
    """The models --only asks for, verifier first, with the flags' budgets over the preset's."""
    alpha = (None if options.no_distill else
             options.distill_alpha if options.distill_alpha is not None else preset.distill_alpha)
    jobs = []
    for role in ROLES:
        if options.only not in ("both", role):
            continue
        hp = preset.verifier_train if role == "verifier" else preset.drafter_train
        minutes = options.minutes_for(role)
        hp = replace(hp, minutes=minutes) if minutes else hp
        hp = replace(hp, batch_size=options.batch_size or hp.batch_size, lr=options.lr or hp.lr)
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
                seed=options.run.seed,
                steps=options.steps,
                resume=options.run.resume,
                compile=preset.compile if options.compile is None else options.compile,
                autocast=options.autocast,
                teacher_dir=out / "verifier" if distill else None,
                distill_alpha=alpha if distill else None,
                ckpt_every=options.run.ckpt_every,
                stop_after=options.run.stop_after,
            )
        )
    return jobs


def run(options: PairOptions) -> dict:
    """Train (or resume) the pair the flags describe into --out; returns the summary (also OUT/train_summary.json)."""
    require_transformers()
    preset = preset_named(options.preset, PAIR_PRESETS)
    preset = replace(preset, vocab_size=options.vocab_size or preset.vocab_size,
                     seq_len=options.seq_len or preset.seq_len)
    if options.tokenizer is not None and not options.tokenizer.is_file():
        raise YggcError(f"--tokenizer {options.tokenizer} is not a file; pass a tokenizer.json")
    out = (options.out or CACHE / preset.name).expanduser().resolve()
    os.environ.setdefault("RAYON_NUM_THREADS", str(options.run.threads))
    import torch

    torch.set_num_threads(options.run.threads)
    t0 = time.time()
    tok_path, tokens = prepare_data(out, options.corpus_dir, preset.vocab_size, options.run.resume,
                                    options.tokenizer)
    preset = replace(preset, vocab_size=load_tokenizer(tok_path).get_vocab_size())
    results = {job.role: train_model(job) for job in make_jobs(options, preset, out, tok_path, tokens)}
    summary = {"preset": asdict(preset), "out": str(out), "wall_seconds": time.time() - t0, "models": results}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=1))
    log("pair", f"done in {summary['wall_seconds'] / 60:.1f} min -> {out}")
    return summary
