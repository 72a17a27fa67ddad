"""``yggc train eagle3``: an EAGLE-3 head (eagle3.txt) for a verifier, trained on the verifier's own answers.

    yggc train eagle3 --target $(yggc pull smollm2)        # preset smollm2

Stages, each resumable (rerun the same command to continue):
  1. data      the verifier's answers to chat prompts: the shards `yggc train drafter` writes
               (OUT/data/{train,heldout}, generated here when absent; shards.py), plus --reference
               training prompts with reference answers made from the stdlib (stdlib_prompts.build_pairs):
               generating answers is several times slower than a teacher-forced pass over them, so
               most of the features come from text the verifier reads rather than writes (as EAGLE's
               fixed-dataset training); the verifier's own answers count twice in the batches
  2. features  one teacher-forced verifier pass per conversation (yggc's own graph, in --dtype): the
               inputs of the three feature layers, the verifier's final hidden state (its logits over
               the draft vocabulary are recomputed per batch) and its argmax; kept in
               OUT/.state/features (features.py), so a resumed run reads them back
  3. vocab     the draft vocabulary: the --draft-vocab most frequent verifier tokens of the data
  4. train     the training-time test (ttt.py): --unroll steps, each step feeding the head's
               own output features, soft cross-entropy against the verifier, AdamW, warmup + cosine;
               the batch of step s is a pure function of (seed, s); state in OUT/.state/eagle3-<preset>
               (-<N>tok with --train-tokens N: the leading conversations holding ~N answer tokens, the
               points of a scaling curve; a state made from other data or settings is not resumed)
  5. export    OUT/eagle3-<preset>[-<N>tok]: the public head layout (graphs/eagle3_checkpoint.py) in bfloat16 and
               eagle3_summary.json with the held-out top-1 agreement per unroll position (the
               paper's acceptance-rate curve) and the chain acceptance length it implies
--score HEAD skips 3-5: it scores that head (e.g. the shipped one) on the folder's held-out splits.
"""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ..graphs.eagle3 import Eagle3Graph
from ..graphs.llama import LlamaGraph
from .features import ConversationFeatures, cached_extract, verifier_digest
from .loop import batch_indices, distill_steps, make_optimizer
from .presets import (
    CACHE,
    DRAFTER_PRESETS,
    EAGLE3_PRESETS,
    Eagle3Preset,
    checkpoint_folder,
    load_hf_model,
    preset_named,
    require_transformers,
)
from .shards import (
    Sample,
    answer_prompts,
    chat_tokenizer,
    check_data_source,
    data_folder_name,
    encode_prompts,
    read_samples,
)
from .stdlib_prompts import build_pairs, prompt_splits
from .ttt import ttt_logits, ttt_loss

Tables = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # draft ids [Vd], target -> draft id [V], lm_head rows [Vd, H]


def reference_samples(target: Path, data_preset: str, count: int, corpus: Path | None = None) -> list[Sample]:
    """The first `count` training prompts with their reference answers (from the stdlib, or the *.py files under
    `corpus`), as Samples without soft labels (stage 1)."""
    if count <= 0:
        return []
    gen = DRAFTER_PRESETS[data_preset].gen
    tok, chat = chat_tokenizer(target)
    out = []
    for question, answer in build_pairs(False, corpus)[:count]:
        reply = tok.encode(answer + (chat.eos_token if chat else "")).ids[:gen.max_new]
        out += [Sample(prompt + reply, len(prompt), None, None)
                for prompt in encode_prompts(tok, chat, [question], gen.max_prompt)]  # none if too long
    return out


def answer_length(sample: Sample) -> int:
    """Its answer tokens: the positions the head is trained on, each labelled by the verifier."""
    return len(sample.ids) - sample.answer_start


def label_tokens(samples: list[Sample]) -> int:
    return sum(map(answer_length, samples))


def budget_prefixes(parts: tuple[list[Sample], ...], budget: int | None) -> tuple[int, ...]:
    """How many leading conversations of each part to train on so that together they hold about `budget` label
    tokens, each part cut at the same fraction of its own tokens (the data's mix stays the same at every
    budget: the points of a scaling curve differ in size only); None: all of them."""
    totals = [label_tokens(p) for p in parts]
    if budget is None or budget >= sum(totals):
        return tuple(len(p) for p in parts)
    share, out = budget / sum(totals), []
    for part, total in zip(parts, totals):
        cum = np.cumsum([answer_length(s) for s in part])
        out.append(min(len(part), int(np.searchsorted(cum, share * total)) + 1) if total else 0)
    return tuple(out)


def training_sequences(verifier: LlamaGraph, generated: list[Sample], reference: list[Sample], verifier_id: str,
                       cache_dir: Path, keep: tuple[int, int]) -> list[ConversationFeatures]:
    """The features of both kinds of training conversation (read back where cached, all of them: every budget
    of a scaling curve shares one cache), cut to the `keep` leading ones of each; the verifier's own answers
    count twice."""
    seqs, ref = (cached_extract(verifier, part, verifier_id, cache_dir)[:n]
                 for part, n in zip((generated, reference), keep))
    return seqs * 2 + ref if ref else seqs


def saved_step(state_dir: Path, resume: bool) -> int:
    """The step a resumed run starts from: a run whose --steps it has reached only evaluates and exports, without
    reading the training features again (minutes of verifier passes)."""
    path = state_dir / "state.json"
    return 0 if not resume or not path.is_file() else int(json.loads(path.read_text())["step"])


def draft_vocabulary(samples: list[Sample], size: int, vocab: int) -> torch.Tensor:
    """The `size` most frequent token ids of the conversations (ties and unseen ids: lower id first)."""
    counts = torch.zeros(vocab, dtype=torch.long)
    for s in samples:
        counts += torch.bincount(torch.tensor(s.ids), minlength=vocab)
    order = torch.argsort(-counts * vocab + torch.arange(vocab))  # stable: by count, then id
    return order[:size].sort().values


def collate(seqs: list[ConversationFeatures], draft_ids: torch.Tensor, t2d: torch.Tensor,
            lm_rows: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Padded batch -> tokens [B, T], features [B, T, F], target log-probs [B, T, Vd], best draft id [B, T], mask."""
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


def evaluate(head: Eagle3Graph, seqs: list[ConversationFeatures], unroll: int, draft_ids: torch.Tensor,
             t2d: torch.Tensor, lm_rows: torch.Tensor, batch: int) -> list[float]:
    """Held-out top-1 agreement with the verifier per unroll position."""
    sums, n = np.zeros(unroll), 0
    with torch.no_grad():
        for i in range(0, len(seqs), batch):
            tokens, feats, target, best, mask = collate(seqs[i:i + batch], draft_ids, t2d, lm_rows)
            _, agree = ttt_loss(ttt_logits(head, tokens, feats, unroll), target, best, mask)
            sums += np.array(agree) * int(mask.sum())
            n += int(mask.sum())
    return list(sums / max(n, 1))


def train(head: Eagle3Graph, seqs: list[ConversationFeatures], preset: Eagle3Preset, tables: Tables,
          state_dir: Path, args: argparse.Namespace, recipe: dict) -> dict:
    """The training-time test over the feature sequences to preset.steps (resumable from a state of the same
    `recipe`); the verifier's embedding stays frozen."""
    def step(meta: dict):
        idx = batch_indices(len(seqs), args.seed, meta["step"], preset.train.batch_size)
        tokens, feats, target, best, mask = collate([seqs[i] for i in idx], *tables)
        loss, agree = ttt_loss(ttt_logits(head, tokens, feats, preset.unroll), target, best, mask)
        ema = meta["agree"]
        meta["agree"] = agree if ema is None else [0.95 * a + 0.05 * b for a, b in zip(ema, agree)]
        return loss, "agree=" + "/".join(f"{a:.2f}" for a in meta["agree"])

    for n, p in head.named_parameters():
        p.requires_grad_(n != "embed.weight")
    meta = {"step": 0, "recipe": recipe, "train_seconds": 0.0, "agree": None}
    meta = distill_steps("eagle3", head, make_optimizer(head, preset.train), meta, preset.steps,
                         preset.train, state_dir, args, step)
    head.requires_grad_(False)
    return meta


def ensure_data(target: Path, out: Path, data_preset: str, chat_prompts: Path | None,
                n_prompts: int | None, gen_batch: int | None = None, dtype: str = "float32") -> list[str]:
    """Stage 1: the verifier's answers (the drafter job's shards), the missing ones generated by the verifier in
    `dtype`; the data's splits."""
    splits = prompt_splits(None, chat_prompts)
    dp = DRAFTER_PRESETS[data_preset]
    gen = replace(dp.gen, batch=gen_batch or dp.gen.batch)
    check_data_source(out / "data", chat_prompts, gen.batch, dp.gen.batch, dtype)
    answer_prompts(load_hf_model(target, dtype), target, out / "data", (n_prompts or dp.n_prompts, dp.n_eval_prompts),
                   gen, splits)
    return list(splits)


def new_head(target: Path, verifier: LlamaGraph, samples: list[Sample], size: int,
             seed: int) -> tuple[Eagle3Graph, Tables]:
    """A fresh head over the `size` most frequent tokens of `samples`, the verifier's features bound to its
    feature layers, and the tables that map the verifier's vocabulary to the draft vocabulary (stage 3)."""
    from ..graphs.eagle3_checkpoint import new_eagle3

    vocab = verifier.cfg.vocab_size
    draft_ids = draft_vocabulary(samples, min(size, vocab), vocab)
    head = new_eagle3(target, draft_ids, n_slots=2, seed=seed)
    verifier.feature_layers = head.eagle.feature_layers
    return head, draft_tables(verifier, draft_ids)


def draft_tables(verifier: LlamaGraph, draft_ids: torch.Tensor) -> Tables:
    """The draft ids, the verifier -> draft id map (-1 outside the draft vocabulary) and the LM head's rows."""
    t2d = torch.full((verifier.cfg.vocab_size,), -1, dtype=torch.long)
    t2d[draft_ids] = torch.arange(len(draft_ids))
    return draft_ids, t2d, verifier.lm_head.weight[draft_ids].float()


def score_head(head_dir: Path, target: Path, verifier: LlamaGraph, heldout: dict[str, list[Sample]],
               cache_dir: Path, preset: Eagle3Preset, args: argparse.Namespace) -> dict:
    """`--score HEAD`: another head's held-out top-1 agreement per unroll position on this folder's held-out splits
    (read through the same feature cache), so heads trained on other data compare on the same tokens."""
    from ..errors import YggcError
    from ..graphs.eagle3 import default_feature_layers
    from ..graphs.eagle3_checkpoint import load_eagle3

    head, cached = load_eagle3(head_dir, target, 2), default_feature_layers(verifier.cfg.n_layers)
    if tuple(head.eagle.feature_layers) != cached:  # the cache's key does not name the layers: every head reads these
        raise YggcError(f"{head_dir} reads verifier layers {list(head.eagle.feature_layers)}, not the "
                        f"{list(cached)} this folder's features are cached for")
    verifier.feature_layers = head.eagle.feature_layers
    tables = draft_tables(verifier, head.draft_ids)
    verifier_id = verifier_digest(target, args.dtype)
    curves = {split: evaluate(head, cached_extract(verifier, samples, verifier_id, cache_dir), preset.unroll, *tables,
                              preset.train.batch_size) for split, samples in heldout.items()}
    return {"scored_head": str(head_dir), "target": str(target), "verifier_dtype": args.dtype, "unroll": preset.unroll,
            "draft_vocab": len(head.draft_ids), **{f"{split}_agreement_per_step": c for split, c in curves.items()},
            "command": args.invocation}


def run(args: argparse.Namespace) -> dict:
    """Data, features, draft vocabulary, training (or resuming) and, at the last step, OUT/eagle3-<preset>;
    returns the summary (also in that folder's eagle3_summary.json)."""
    from ..graphs import load_model
    from ..graphs.eagle3_checkpoint import head_base_config, save_eagle3

    require_transformers()
    preset = preset_named(args.preset, EAGLE3_PRESETS)
    preset = replace(preset, steps=args.steps or preset.steps, draft_vocab=args.draft_vocab or preset.draft_vocab,
                     unroll=args.unroll or preset.unroll,
                     reference=preset.reference if args.reference is None else args.reference)
    target = checkpoint_folder(args.target, "--target")
    out = (args.out or CACHE / data_folder_name(preset.data, args.chat_prompts)).expanduser().resolve()
    torch.set_num_threads(args.threads)
    t0 = time.time()
    splits = ensure_data(target, out, preset.data, args.chat_prompts, args.prompts, args.gen_batch, args.dtype)
    train_samples = read_samples(out / "data" / "train")
    heldout = {split: read_samples(out / "data" / split) for split in splits if split != "train"}
    heldout_samples = [s for samples in heldout.values() for s in samples]
    reference = reference_samples(target, preset.data, preset.reference)
    verifier = load_model(target, max(len(s.ids) for s in train_samples + heldout_samples + reference) + 1,
                          getattr(torch, args.dtype))
    if args.score:
        return score_head(args.score, target, verifier, heldout, out / ".state" / "features", preset, args)
    keep = budget_prefixes((train_samples, reference), args.train_tokens)
    head, tables = new_head(target, verifier, train_samples[:keep[0]], preset.draft_vocab, args.seed)
    name = f"eagle3-{preset.name}" + (f"-{args.train_tokens}tok" if args.train_tokens else "")
    state_dir = out / ".state" / name
    done = saved_step(state_dir, not args.no_resume) >= preset.steps
    features, verifier_id = out / ".state" / "features", verifier_digest(target, args.dtype)  # the cache, shared by every head
    seqs = [] if done else training_sequences(verifier, train_samples, reference, verifier_id, features, keep)
    held = {split: cached_extract(verifier, samples, verifier_id, features) for split, samples in heldout.items()}
    del verifier
    recipe = {"seed": args.seed, "train_conversations": keep[0], "reference_conversations": keep[1],
              "draft_vocab": len(tables[0]), "unroll": preset.unroll}
    recipe |= {} if args.dtype == "float32" else {"verifier_dtype": args.dtype}  # float32 states resume as before
    meta = train(head, seqs, preset, tables, state_dir, args, recipe)
    curves = {split: evaluate(head, seqs, preset.unroll, *tables, preset.train.batch_size)
              for split, seqs in held.items()}
    curve = curves["heldout"]
    summary = {"preset": preset.name, "target": str(target), "steps": meta["step"], "draft_vocab": len(tables[0]),
               "unroll": preset.unroll, "verifier_dtype": args.dtype, "feature_layers": list(head.eagle.feature_layers),
               "train_conversations": keep[0], "reference_conversations": keep[1],
               "train_rows": sum(len(s.ids) - 1 for s in train_samples[:keep[0]] + reference[:keep[1]]),
               "train_label_tokens": label_tokens(train_samples[:keep[0]] + reference[:keep[1]]),
               "train_minutes": meta["train_seconds"] / 60, "wall_minutes": (time.time() - t0) / 60,
               "heldout_agreement_per_step": curve, "heldout_chain_accepted_length": float(np.sum(np.cumprod(curve))),
               **{f"{split}_agreement_per_step": c for split, c in curves.items() if split != "heldout"},
               "command": args.invocation}
    if meta["step"] >= preset.steps:
        dest = save_eagle3(head.to(torch.bfloat16), head_base_config(target), out / name,
                           {"eagle3_summary.json": json.dumps(summary, indent=1)})
        summary["head"] = str(dest)
    return summary
