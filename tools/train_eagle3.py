#!/usr/bin/env python3
"""Train an EAGLE-3 head (eagle3.txt) for a verifier on the verifier's own answers.

    python tools/train_eagle3.py --target $(python tools/get_smollm2.py)        # preset smollm2

Stages, each resumable (rerun the same command to continue):
  1. data      the verifier's answers to chat prompts: the shards tools/train_drafter.py writes
               (OUT/data/{train,heldout}, generated here when absent; drafter_data.py), plus --reference
               training prompts with reference answers made from the stdlib (drafter_prompts.build_pairs):
               generating answers runs at ~80 tokens/s on 2 cores, a teacher-forced pass at ~350, so
               most of the features come from text the verifier reads rather than writes (as EAGLE's
               fixed-dataset training); the verifier's own answers count twice in the batches
  2. features  one teacher-forced verifier pass per conversation (yggc's own graph, float32): the
               inputs of the three feature layers, the verifier's final hidden state (its logits over
               the draft vocabulary are recomputed per batch) and its argmax
  3. vocab     the draft vocabulary: the --draft-vocab most frequent verifier tokens of the data
  4. train     the training-time test (eagle3_ttt.py): --unroll steps, each step feeding the head's
               own output features, soft cross-entropy against the verifier, AdamW, warmup + cosine;
               the batch of step s is a pure function of (seed, s); state in OUT/.state/eagle3
  5. export    OUT/eagle3: the public head layout (graphs/eagle3_checkpoint.py) in bfloat16 and
               eagle3_summary.json with the held-out top-1 agreement per unroll position (the
               paper's acceptance-rate curve) and the chain acceptance length it implies
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from drafter_data import encode_prompts, read_samples, write_shards  # noqa: E402
from eagle3_ttt import ttt_logits, ttt_loss  # noqa: E402
from pair_presets import TrainHParams, load_hf_model  # noqa: E402
from train_drafter import PRESETS as DRAFTER_PRESETS  # noqa: E402
from train_drafter import batch_indices  # noqa: E402
from train_loop import distill_steps, make_optimizer  # noqa: E402

DEFAULT_OUT = Path("~/.cache/yggc/pairs")


@dataclass(frozen=True)
class Eagle3Preset:
    name: str
    data: str  # the train_drafter preset whose prompts and generation settings make the data
    draft_vocab: int
    unroll: int
    train: TrainHParams
    steps: int
    reference: int = 0  # training prompts also read with their reference answers


PRESETS = {
    "smollm2": Eagle3Preset("smollm2", "smollm2", draft_vocab=8192, unroll=3,
                            train=TrainHParams(batch_size=8, lr=2e-3, warmup_steps=20, minutes=30.0,
                                               weight_decay=0.0), steps=300, reference=1536),
    "tiny": Eagle3Preset("tiny", "tiny", draft_vocab=64, unroll=3,
                         train=TrainHParams(batch_size=2, lr=3e-3, warmup_steps=2, minutes=1.0, weight_decay=0.0),
                         steps=6),
}


@dataclass
class Sequence:
    tokens: object    # [T] long: x_{p+1}
    features: object  # [T, F] float32: g_p
    final: object     # [T, H] float32: the verifier's final hidden state at p + 1
    best: object      # [T] long: the verifier's argmax at p + 1 (a verifier token id)
    loss_from: int    # rows p >= loss_from predict answer tokens


def reference_samples(target: Path, data_preset: str, count: int, corpus: Path | None = None) -> list:
    """The first `count` training prompts with their reference answers (from the stdlib, or the *.py files under
    `corpus`), as Samples without soft labels (stage 1)."""
    from drafter_data import Sample
    from drafter_prompts import build_pairs
    from tokenizers import Tokenizer

    from yggc.runtime.chat import load_chat_template

    if count <= 0:
        return []
    gen = DRAFTER_PRESETS[data_preset].gen
    tok, chat = Tokenizer.from_file(str(target / "tokenizer.json")), load_chat_template(target)
    out = []
    for question, answer in build_pairs(False, corpus)[:count]:
        reply = tok.encode(answer + (chat.eos_token if chat else "")).ids[:gen.max_new]
        out += [Sample(prompt + reply, len(prompt), None, None)
                for prompt in encode_prompts(tok, chat, [question], gen.max_prompt)]  # none if too long
    return out


def extract(verifier, samples) -> list:
    """Teacher-forced features of every conversation (stage 2)."""
    import torch
    from tqdm import tqdm

    out = []
    with torch.inference_mode():
        for s in tqdm(samples, desc="features", dynamic_ncols=True, mininterval=1.0 if sys.stderr.isatty() else 30.0):
            ids = torch.tensor(s.ids)
            pos = torch.arange(len(s.ids))
            logits, final, taps = verifier.run_layers(ids, pos, pos, pos[None, :] <= pos[:, None])
            feats = torch.cat(taps, -1).float()
            out.append(Sequence(ids[1:], feats[:-1], final[1:].float(), logits[1:].argmax(-1), max(0, s.answer_start - 2)))
    return out


def training_sequences(verifier, generated, reference) -> list:
    """The features of both kinds of training conversation; the verifier's own answers count twice."""
    seqs, ref = extract(verifier, generated), extract(verifier, reference)
    return seqs * 2 + ref if ref else seqs


def saved_step(state_dir: Path, args) -> int:
    """The step a resumed run starts from: a run whose --steps it has reached only evaluates and exports, without
    reading the training features again (minutes of verifier passes)."""
    path = state_dir / "state.json"
    return 0 if args.no_resume or not path.is_file() else int(json.loads(path.read_text())["step"])


def draft_vocabulary(samples, size: int, vocab: int):
    """The `size` most frequent token ids of the conversations (ties and unseen ids: lower id first)."""
    import torch

    counts = torch.zeros(vocab, dtype=torch.long)
    for s in samples:
        counts += torch.bincount(torch.tensor(s.ids), minlength=vocab)
    order = torch.argsort(-counts * vocab + torch.arange(vocab))  # stable: by count, then id
    return order[:size].sort().values


def collate(seqs: list, draft_ids, t2d, lm_rows):
    """Padded batch -> tokens [B, T], features [B, T, F], target log-probs [B, T, Vd], best draft id [B, T], mask."""
    import torch

    T = max(len(s.tokens) for s in seqs)
    B = len(seqs)
    tokens = torch.zeros(B, T, dtype=torch.long)
    feats = torch.zeros(B, T, seqs[0].features.shape[1])
    final = torch.zeros(B, T, seqs[0].final.shape[1])
    best = torch.full((B, T), -1, dtype=torch.long)
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, s in enumerate(seqs):
        n = len(s.tokens)
        tokens[b, :n], feats[b, :n], final[b, :n] = s.tokens, s.features, s.final
        best[b, :n] = t2d[s.best]  # -1 where the verifier's choice is outside the draft vocabulary
        mask[b, s.loss_from:n] = True
    with torch.no_grad():
        target = torch.log_softmax(final @ lm_rows.T, -1)  # [B, T, Vd]
    return tokens, feats, target, best, mask & (best >= 0)


def evaluate(head, seqs, unroll: int, draft_ids, t2d, lm_rows, batch: int) -> list[float]:
    """Held-out top-1 agreement with the verifier per unroll position."""
    import torch

    sums, n = np.zeros(unroll), 0
    with torch.no_grad():
        for i in range(0, len(seqs), batch):
            tokens, feats, target, best, mask = collate(seqs[i:i + batch], draft_ids, t2d, lm_rows)
            _, agree = ttt_loss(ttt_logits(head, tokens, feats, unroll), target, best, mask)
            sums += np.array(agree) * int(mask.sum())
            n += int(mask.sum())
    return list(sums / max(n, 1))


def train(head, seqs, preset: Eagle3Preset, tables, state_dir: Path, args) -> dict:
    """The training-time test over the feature sequences to preset.steps (resumable); the verifier's embedding
    stays frozen."""
    def step(meta: dict):
        idx = batch_indices(len(seqs), args.seed, meta["step"], preset.train.batch_size)
        tokens, feats, target, best, mask = collate([seqs[i] for i in idx], *tables)
        loss, agree = ttt_loss(ttt_logits(head, tokens, feats, preset.unroll), target, best, mask)
        ema = meta["agree"]
        meta["agree"] = agree if ema is None else [0.95 * a + 0.05 * b for a, b in zip(ema, agree)]
        return loss, "agree=" + "/".join(f"{a:.2f}" for a in meta["agree"])

    for n, p in head.named_parameters():
        p.requires_grad_(n != "embed.weight")
    meta = {"step": 0, "seed": args.seed, "n_seqs": len(seqs), "train_seconds": 0.0, "agree": None}
    meta = distill_steps("train_eagle3", head, make_optimizer(head, preset.train), meta, preset.steps,
                         preset.train, state_dir, args, step)
    head.requires_grad_(False)
    return meta


def ensure_data(target: Path, out: Path, data_preset: str, threads: int) -> None:
    """Stage 1: the verifier's answers (the train_drafter shards), generated when absent."""
    from drafter_prompts import build_prompts
    from tokenizers import Tokenizer

    from yggc.runtime.chat import load_chat_template

    if any((out / "data" / "train").glob("shard-*.safetensors")) and any((out / "data" / "heldout").glob("shard-*")):
        return
    dp = DRAFTER_PRESETS[data_preset]
    teacher = load_hf_model(target, "float32")
    tok, chat = Tokenizer.from_file(str(target / "tokenizer.json")), load_chat_template(target)
    eos = {int(e) for e in np.atleast_1d(teacher.config.eos_token_id)}
    if chat and tok.token_to_id(chat.eos_token) is not None:
        eos.add(tok.token_to_id(chat.eos_token))
    train_ids = encode_prompts(tok, chat, build_prompts(False, None), dp.gen.max_prompt)[:dp.n_prompts]
    eval_ids = encode_prompts(tok, chat, build_prompts(True, None), dp.gen.max_prompt)[:dp.n_eval_prompts]
    write_shards(teacher, train_ids, dp.gen, out / "data" / "train", eos, "train")
    write_shards(teacher, eval_ids, dp.gen, out / "data" / "heldout", eos, "held-out")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", type=Path, required=True, help="the verifier's Hugging Face folder")
    p.add_argument("--preset", choices=sorted(PRESETS), default="smollm2")
    p.add_argument("--out", type=Path, help="work folder (default ~/.cache/yggc/pairs/<data preset>); data is shared "
                   "with tools/train_drafter.py")
    p.add_argument("--steps", type=int, help="training steps (default: the preset's)")
    p.add_argument("--draft-vocab", type=int, help="draft vocabulary size (default: the preset's)")
    p.add_argument("--reference", type=int, help="training prompts also read with reference answers "
                   "(default: the preset's)")
    p.add_argument("--unroll", type=int, help="training-time-test steps (default: the preset's; >= 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ckpt-every", type=int, default=25)
    p.add_argument("--max-minutes", type=float, help="stop (resumably) after this many training minutes")
    p.add_argument("--stop-after", type=int, help="stop (resumably) after this many steps in this run")
    p.add_argument("--no-resume", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    preset = PRESETS[args.preset]
    preset = replace(preset, steps=args.steps or preset.steps, draft_vocab=args.draft_vocab or preset.draft_vocab,
                     unroll=args.unroll or preset.unroll,
                     reference=preset.reference if args.reference is None else args.reference)
    out = (args.out or DEFAULT_OUT / preset.data).expanduser().resolve()
    target = args.target.expanduser().resolve()
    import torch
    from yggc.graphs import load_model
    from yggc.graphs.eagle3_checkpoint import head_base_config, new_eagle3, save_eagle3

    torch.set_num_threads(args.threads)
    t0 = time.time()
    ensure_data(target, out, preset.data, args.threads)
    train_samples, heldout_samples = read_samples(out / "data" / "train"), read_samples(out / "data" / "heldout")
    reference_texts = reference_samples(target, preset.data, preset.reference)
    longest = max(len(s.ids) for s in train_samples + heldout_samples + reference_texts)
    verifier = load_model(target, longest + 1)
    draft_ids = draft_vocabulary(train_samples, min(preset.draft_vocab, verifier.cfg.vocab_size), verifier.cfg.vocab_size)
    head = new_eagle3(target, draft_ids, n_slots=2, seed=args.seed)
    verifier.feature_layers = head.eagle.feature_layers
    t2d = torch.full((verifier.cfg.vocab_size,), -1, dtype=torch.long)
    t2d[draft_ids] = torch.arange(len(draft_ids))
    tables = (draft_ids, t2d, verifier.lm_head.weight[draft_ids].float())
    state_dir = out / ".state" / f"eagle3-{preset.name}"
    seqs = training_sequences(verifier, train_samples, reference_texts) if saved_step(state_dir, args) < preset.steps else []
    held = extract(verifier, heldout_samples)
    del verifier
    meta = train(head, seqs, preset, tables, state_dir, args)
    curve = evaluate(head, held, preset.unroll, *tables, preset.train.batch_size)
    chain = float(np.sum(np.cumprod(curve)))
    summary = {"preset": preset.name, "target": str(target), "steps": meta["step"], "draft_vocab": len(draft_ids),
               "unroll": preset.unroll, "feature_layers": list(head.eagle.feature_layers),
               "train_conversations": len(train_samples), "reference_conversations": len(reference_texts),
               "train_rows": sum(len(s.ids) - 1 for s in train_samples + reference_texts),
               "train_minutes": meta["train_seconds"] / 60, "wall_minutes": (time.time() - t0) / 60,
               "heldout_agreement_per_step": curve, "heldout_chain_accepted_length": chain,
               "command": "python tools/train_eagle3.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    if meta["step"] >= preset.steps:
        dest = save_eagle3(head.to(torch.bfloat16), head_base_config(target), out / f"eagle3-{preset.name}",
                           {"eagle3_summary.json": json.dumps(summary, indent=1)})
        summary["head"] = str(dest)
    print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    main()
