"""``yggc train drafter``: distil a small standalone drafter for a target LLM from text the target
generates itself.

    yggc train drafter --target $(yggc pull smollm2)     # preset smollm2

Stages, each resumable (rerun the same command to continue where it stopped):
  1. prompts   instructions made from stdlib docstrings and code (stdlib_prompts.py); files
               held out by corpus.py's split give the benchmark's chat prompts, never training data
  2. generate  the target answers --prompts training prompts (and the preset's held-out ones)
               through its chat template; its top-k distribution at every answer token is kept
               (shards.py, under OUT/data/)
  3. train     a Llama student (the preset's size, the target's tokenizer, tied embedding
               initialised from the target's, student.py) on soft cross-entropy against
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

import json
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import YggcError
from .batches import batch_indices
from .loop import distill_steps, make_optimizer
from .options import DrafterOptions, RunSettings
from .presets import (
    CACHE,
    DRAFTER_PRESETS,
    DrafterPreset,
    checkpoint_folder,
    export_checkpoint,
    load_hf_model,
    n_params,
    preset_named,
    require_transformers,
)
from .shards import (
    Sample,
    answer_prompts,
    chat_tokenizer,
    check_data_source,
    data_folder_name,
    read_samples,
)
from .stdlib_prompts import prompt_splits
from .student import build_student, collate, distill_loss

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def evaluate(model: LlamaForCausalLM, samples: list[Sample], batch: int) -> dict:
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


def train(model: LlamaForCausalLM, samples: list[Sample], preset: DrafterPreset, state_dir: Path,
          settings: RunSettings) -> dict:
    """Train (or resume) to preset.steps; checkpoints every --ckpt-every steps."""
    def step(meta: dict):
        idx = batch_indices(len(samples), settings.seed, meta["step"], preset.train.batch_size)
        loss, agree = distill_loss(model, collate([samples[i] for i in idx]), preset.hard_weight)
        a = agree.item()
        meta["agree_ema"] = a if meta["agree_ema"] is None else 0.98 * meta["agree_ema"] + 0.02 * a
        return loss, f"agree={meta['agree_ema']:.3f}"

    recipe = {"size": asdict(preset.size), "seed": settings.seed, "n_samples": len(samples)}
    meta = {"step": 0, "recipe": recipe, "agree_ema": None, "train_seconds": 0.0}
    return distill_steps("drafter", model, make_optimizer(model, preset.train), meta, preset.steps,
                         preset.train, state_dir, settings, step)


def write_bench_files(out: Path, target: Path, heldout: list[str], train_dir: Path, n_calib: int) -> None:
    """prompts.json: held-out chat prompts; calib.txt: training conversations as the target formats them."""
    tok, chat = chat_tokenizer(target)
    render = (lambda t: chat.render([{"role": "user", "content": t}])) if chat else (lambda t: t)  # noqa: E731
    prompts = [{"text": render(t)} for t in heldout]
    (out / "prompts.json").write_text(json.dumps({"source": "yggc/train/stdlib_prompts.py held-out split",
                                                  "prompts": prompts}, indent=1))
    samples = read_samples(train_dir)[:n_calib]
    (out / "calib.txt").write_text("".join(tok.decode(s.ids, skip_special_tokens=False) + "\n" for s in samples))


def export(model: LlamaForCausalLM, out: Path, target: Path, dtype: str) -> Path:
    """OUT/drafter: the student in `dtype` with the target's tokenizer files."""
    dest = out / "drafter"
    export_checkpoint(model, target / "tokenizer.json", dest, dtype)
    for name in TOKENIZER_FILES[1:]:
        if (target / name).is_file():
            shutil.copyfile(target / name, dest / name)
    return dest


def run(options: DrafterOptions) -> dict:
    """Generate the data (missing shards), train (or resume) and, at the last step, export OUT/drafter; returns
    the summary (also OUT/drafter/drafter_summary.json)."""
    require_transformers()
    named = preset_named(options.preset, DRAFTER_PRESETS)
    preset = replace(named, n_prompts=options.prompts or named.n_prompts, steps=options.steps or named.steps,
                     gen=replace(named.gen, batch=options.gen_batch or named.gen.batch))
    target = checkpoint_folder(options.target, "--target")
    if options.corpus_dir is not None and not options.corpus_dir.is_dir():
        raise YggcError(f"--corpus-dir {options.corpus_dir} is not a folder")
    out = (options.out or CACHE / data_folder_name(preset.name, options.chat_prompts)).expanduser().resolve()
    import torch

    torch.set_num_threads(options.run.threads)
    t0 = time.time()
    splits = prompt_splits(options.corpus_dir, options.chat_prompts)
    check_data_source(out / "data", options.chat_prompts, preset.gen.batch, named.gen.batch)
    teacher = load_hf_model(target, "float32")
    answer_prompts(teacher, target, out / "data", (preset.n_prompts, preset.n_eval_prompts), preset.gen, splits)
    embedding = teacher.get_input_embeddings().weight.detach()
    target_cfg = json.loads((target / "config.json").read_text())
    del teacher
    samples = read_samples(out / "data" / "train")
    if any(s.topk_ids.shape[1] == 0 for s in samples):
        raise YggcError(f"{out / 'data'} holds answers imported from an EAGLE-3 campaign, without the soft labels "
                        "the drafter learns from; pass another --out")
    model = build_student(target_cfg, embedding, preset.size, options.run.seed)
    meta = train(model, samples, preset, out / ".state" / "drafter", options.run)
    model.eval()
    summary = {"preset": preset.name, "target": str(target), "params": n_params(model), "steps": meta["step"],
               "train_samples": len(samples), "train_answer_tokens": sum(len(s.ids) - s.answer_start for s in samples),
               "train_minutes": meta["train_seconds"] / 60, "wall_minutes": (time.time() - t0) / 60,
               **evaluate(model, read_samples(out / "data" / "heldout"), preset.train.batch_size)}
    if "heldout-chat" in splits:
        chat = evaluate(model, read_samples(out / "data" / "heldout-chat"), preset.train.batch_size)
        summary.update({f"{k}_chat": v for k, v in chat.items()})
    if meta["step"] >= preset.steps:
        dest = export(model, out, target, options.dtype)
        write_bench_files(dest, target, splits["heldout"], out / "data" / "train", preset.n_calib)
        summary["drafter"] = str(dest)
        (dest / "drafter_summary.json").write_text(json.dumps(summary, indent=1))
    return summary
