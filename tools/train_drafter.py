#!/usr/bin/env python3
"""Distil a small standalone drafter for a target LLM from text the target generates itself.

    python tools/train_drafter.py --target $(python tools/get_smollm2.py)     # preset smollm2

Stages, each resumable (rerun the same command to continue where it stopped):
  1. prompts   instructions made from stdlib docstrings and code (drafter_prompts.py); files
               held out by pair_data's split give the benchmark's chat prompts, never training data
  2. generate  the target answers --prompts training prompts (and --eval-prompts held-out ones)
               through its chat template; its top-k distribution at every answer token is kept
               (drafter_data.py, shards under OUT/data/)
  3. train     a Llama student (the preset's size, the target's tokenizer, tied embedding
               initialised from the target's, drafter_model.py) on soft cross-entropy against
               those top-k labels; AdamW, warmup + cosine; the batch of step s is a pure function
               of (seed, s), state in OUT/.state/drafter (safetensors + JSON)
  4. export    OUT/drafter, self-contained: bfloat16 safetensors and config, the target's tokenizer
               files, prompts.json (held-out chat prompts for `yggc bench --prompts-file`),
               calib.txt (training conversations for `yggc compile --calib`; they overstate
               acceptance, so the shipped SmolLM2 drafter's calib.txt is held-out conversations
               from tools/heldout_calib.py instead) and
               drafter_summary.json (held-out top-1/top-3 agreement with the target).

Why self-generated data: it is what the drafter must predict (EAGLE and Medusa train on it too).
Generation is the expensive part on a CPU, so the preset generates a modest set and spends the
rest on training passes, which need no teacher forward: the soft labels are stored. Measured for
the smollm2 preset on 2 AVX2 cores (AMD EPYC): generation 55-90 s per shard of 32 answers of up
to 128 tokens (16 shards, ~20 min), training ~1.7 s per step of 8 conversations (700 steps,
~20 min).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
from drafter_data import GenSpec, encode_prompts, read_samples, write_shards
from drafter_model import build_student, collate, distill_loss
from drafter_prompts import build_prompts
from pair_presets import ModelSize, TrainHParams, export_checkpoint, load_hf_model, n_params
from train_loop import distill_steps, make_optimizer

DEFAULT_OUT = Path("~/.cache/yggc/pairs")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")


@dataclass(frozen=True)
class DrafterPreset:
    name: str
    size: ModelSize
    gen: GenSpec
    n_prompts: int       # training prompts answered by the target
    n_eval_prompts: int  # held-out prompts answered for the agreement measurement
    train: TrainHParams
    steps: int
    hard_weight: float = 0.1
    n_calib: int = 48    # training conversations in calib.txt


PRESETS = {
    "smollm2": DrafterPreset(
        "smollm2", ModelSize(hidden=256, layers=3, heads=4, kv_heads=2, intermediate=768),
        GenSpec(batch=32, max_new=128, max_prompt=256, top_k=16, seed=0), n_prompts=512, n_eval_prompts=32,
        train=TrainHParams(batch_size=8, lr=2e-3, warmup_steps=30, minutes=20.0), steps=700),
    "tiny": DrafterPreset(
        "tiny", ModelSize(hidden=32, layers=1, heads=2, kv_heads=1, intermediate=64),
        GenSpec(batch=4, max_new=8, max_prompt=160, top_k=4, seed=0), n_prompts=8, n_eval_prompts=4,
        train=TrainHParams(batch_size=2, lr=3e-3, warmup_steps=2, minutes=1.0), steps=6, n_calib=4),
}


def batch_indices(n: int, seed: int, step: int, batch: int) -> list[int]:
    """Items of step `step`: consecutive slices of a fresh permutation of range(n) per epoch."""
    perms: dict[int, np.ndarray] = {}  # one permutation per epoch the step touches (at most two)
    out = []
    for k in range(step * batch, (step + 1) * batch):
        epoch, i = divmod(k, n)
        if epoch not in perms:
            perms[epoch] = np.random.default_rng([seed, epoch]).permutation(n)
        out.append(int(perms[epoch][i]))
    return out


def evaluate(model, samples, batch: int) -> dict:
    """Held-out agreement: how often the student's top-1 (top-3) holds the target's top-1."""
    import torch

    hits1 = hits3 = total = 0
    with torch.no_grad():
        for i in range(0, len(samples), batch):
            b = collate(samples[i:i + batch])
            hidden = model.model(input_ids=b.ids).last_hidden_state
            logits = model.lm_head(hidden[b.positions[:, 0], b.positions[:, 1]])
            top3 = logits.topk(3, -1).indices
            want = b.topk_ids[:, :1]
            hits1 += (top3[:, :1] == want).sum().item()
            hits3 += (top3 == want).any(-1).sum().item()
            total += len(want)
    return {"heldout_top1_agreement": hits1 / max(total, 1), "heldout_top3_agreement": hits3 / max(total, 1),
            "heldout_tokens": total}


def train(model, samples, preset: DrafterPreset, state_dir: Path, args) -> dict:
    """Train (or resume) to preset.steps; checkpoints every --ckpt-every steps."""
    def step(meta: dict):
        idx = batch_indices(len(samples), args.seed, meta["step"], preset.train.batch_size)
        loss, agree = distill_loss(model, collate([samples[i] for i in idx]), preset.hard_weight)
        a = agree.item()
        meta["agree_ema"] = a if meta["agree_ema"] is None else 0.98 * meta["agree_ema"] + 0.02 * a
        return loss, f"agree={meta['agree_ema']:.3f}"

    meta = {"step": 0, "size": asdict(preset.size), "seed": args.seed, "n_samples": len(samples), "agree_ema": None,
            "train_seconds": 0.0}
    return distill_steps("train_drafter", model, make_optimizer(model, preset.train), meta, preset.steps,
                         preset.train, state_dir, args, step)


def write_bench_files(out: Path, target: Path, heldout: list[str], train_dir: Path, n_calib: int) -> None:
    """prompts.json: held-out chat prompts; calib.txt: training conversations as the target formats them."""
    from tokenizers import Tokenizer

    from yggc.runtime.chat import load_chat_template

    chat = load_chat_template(target)
    render = (lambda t: chat.render([{"role": "user", "content": t}])) if chat else (lambda t: t)  # noqa: E731
    prompts = [{"text": render(t)} for t in heldout]
    (out / "prompts.json").write_text(json.dumps({"source": "tools/drafter_prompts.py held-out split",
                                                  "prompts": prompts}, indent=1))
    tok = Tokenizer.from_file(str(target / "tokenizer.json"))
    samples = read_samples(train_dir)[:n_calib]
    (out / "calib.txt").write_text("".join(tok.decode(s.ids, skip_special_tokens=False) + "\n" for s in samples))


def export(model, out: Path, target: Path, dtype: str) -> Path:
    dest = out / "drafter"
    export_checkpoint(model, target / "tokenizer.json", dest, dtype)
    for name in TOKENIZER_FILES[1:]:
        if (target / name).is_file():
            shutil.copyfile(target / name, dest / name)
    return dest


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", type=Path, required=True, help="the target's checkpoint folder (e.g. from get_smollm2.py)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="smollm2", help="student size and budgets (default smollm2)")
    ap.add_argument("--out", type=Path, help="output folder (default ~/.cache/yggc/pairs/<preset>)")
    ap.add_argument("--corpus-dir", type=Path, help="make prompts from *.py files here instead of the stdlib")
    ap.add_argument("--prompts", type=int, help="training prompts to answer (default: the preset's)")
    ap.add_argument("--steps", type=int, help="optimizer steps (default: the preset's)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads (default: all cores)")
    ap.add_argument("--seed", type=int, default=0, help="initialisation and batch-order seed (default 0)")
    ap.add_argument("--max-minutes", type=float, help="stop training after this long (rerun to resume)")
    ap.add_argument("--stop-after", type=int, help="stop training after N steps in this run (rerun to resume)")
    ap.add_argument("--ckpt-every", type=int, default=100, help="save training state every N steps (default 100)")
    ap.add_argument("--no-resume", action="store_true", help="start training over (generated data is kept)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="exported weights (default bfloat16)")
    return ap.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    preset = PRESETS[args.preset]
    preset = replace(preset, n_prompts=args.prompts or preset.n_prompts, steps=args.steps or preset.steps)
    out = (args.out or DEFAULT_OUT / preset.name).expanduser().resolve()
    target = args.target.expanduser().resolve()
    import torch
    from tokenizers import Tokenizer

    from yggc.runtime.chat import load_chat_template

    torch.set_num_threads(args.threads)
    t0 = time.time()
    teacher = load_hf_model(target, "float32")
    tok, chat = Tokenizer.from_file(str(target / "tokenizer.json")), load_chat_template(target)
    eos = {int(e) for e in np.atleast_1d(teacher.config.eos_token_id)}
    if chat and tok.token_to_id(chat.eos_token) is not None:
        eos.add(tok.token_to_id(chat.eos_token))
    train_texts, heldout_texts = build_prompts(False, args.corpus_dir), build_prompts(True, args.corpus_dir)
    train_ids = encode_prompts(tok, chat, train_texts, preset.gen.max_prompt)[:preset.n_prompts]
    eval_ids = encode_prompts(tok, chat, heldout_texts, preset.gen.max_prompt)[:preset.n_eval_prompts]
    write_shards(teacher, train_ids, preset.gen, out / "data" / "train", eos, "train")
    write_shards(teacher, eval_ids, preset.gen, out / "data" / "heldout", eos, "held-out")
    embedding = teacher.get_input_embeddings().weight.detach()
    target_cfg = json.loads((target / "config.json").read_text())
    del teacher
    samples = read_samples(out / "data" / "train")
    model = build_student(target_cfg, embedding, preset.size, args.seed)
    meta = train(model, samples, preset, out / ".state" / "drafter", args)
    model.eval()
    summary = {"preset": preset.name, "target": str(target), "params": n_params(model), "steps": meta["step"],
               "train_samples": len(samples), "train_answer_tokens": sum(len(s.ids) - s.answer_start for s in samples),
               "train_minutes": meta["train_seconds"] / 60, "wall_minutes": (time.time() - t0) / 60,
               **evaluate(model, read_samples(out / "data" / "heldout"), preset.train.batch_size)}
    if meta["step"] >= preset.steps:
        dest = export(model, out, target, args.dtype)
        write_bench_files(dest, target, heldout_texts, out / "data" / "train", preset.n_calib)
        summary["drafter"] = str(dest)
        (dest / "drafter_summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
