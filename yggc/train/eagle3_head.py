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

import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from ..graphs.eagle3 import Eagle3Graph
from ..graphs.llama import LlamaGraph
from .batches import length_bucketed_indices
from .campaign import close_campaign, open_campaign, score_of
from .features import Conversation, cached_extract, verifier_digest
from .loop import bf16_autocast_pays, distill_steps, lr_at, make_optimizer, wsd_lr_at
from .options import Eagle3Options
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
    is_training_split,
    read_samples,
    with_sampled_answers,
)
from .stdlib_prompts import build_pairs, prompt_splits
from .ttt import TTTBatch, ttt_hidden, ttt_loss

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
                       cache_dir: Path, keep: tuple[int, int]) -> list[Conversation]:
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


def collate(seqs: list[Conversation], draft_ids: torch.Tensor, t2d: torch.Tensor,
            lm_rows: torch.Tensor) -> TTTBatch:
    """Conversations padded to the longest -> a TTTBatch whose target log-probs are computed on the answer rows only."""
    T, B = max(map(len, seqs)), len(seqs)
    tokens = torch.zeros(B, T, dtype=torch.long)
    feats = torch.zeros(B, T, seqs[0].features.shape[1])
    finals, bests = [], []
    for b, s in enumerate(seqs):
        tokens[b, :len(s)], feats[b, :len(s)] = s.tokens, s.features
        finals.append(s.final[s.loss_from:])
        bests.append(s.best[s.loss_from:])
    positions = torch.cat([torch.arange(s.loss_from, len(s)) for s in seqs])  # [N]
    rows = torch.cat([b * T + torch.arange(s.loss_from, len(s)) for b, s in enumerate(seqs)])
    final = torch.cat(finals).float()  # [N, H]
    best = t2d[torch.cat(bests)]  # -1 where the verifier's choice is outside
    with torch.no_grad():
        target = torch.log_softmax(final @ lm_rows.T, -1)  # [N, Vd]
    return TTTBatch(tokens, feats, rows, positions, target, best)


def evaluate(head: Eagle3Graph, seqs: list[Conversation], unroll: int, draft_ids: torch.Tensor,
             t2d: torch.Tensor, lm_rows: torch.Tensor, batch: int) -> list[float]:
    """Held-out top-1 agreement with the verifier per unroll position, over every answer row (rows whose verifier
    token is outside the draft vocabulary count as misses)."""
    hits, rows = np.zeros(unroll), np.zeros(unroll)
    with torch.no_grad():
        for i in range(0, len(seqs), batch):
            b = collate(seqs[i:i + batch], draft_ids, t2d, lm_rows)
            _, scores = ttt_loss(head, ttt_hidden(head, b.tokens, b.features, unroll), b)
            hits += scores.hits
            rows += scores.rows
    return list(hits / np.maximum(rows, 1))


def schedule(preset: Eagle3Preset, options: Eagle3Options) -> tuple[int, Callable[[int], float]]:
    """The run's last step and its learning rate per step: warmup and cosine to preset.steps, or with --schedule wsd
    warmup, the peak rate to preset.steps (a later run may extend it) and --decay steps of decay after them."""
    if options.schedule == "cosine":
        return preset.steps, lambda s: lr_at(s, preset.steps, preset.train)
    decay_from = preset.steps if options.decay else None
    return preset.steps + (options.decay or 0), lambda s: wsd_lr_at(s, preset.train, decay_from, options.decay or 0)


def train(head: Eagle3Graph, seqs: list[Conversation], preset: Eagle3Preset, tables: Tables,
          state_dir: Path, options: Eagle3Options, recipe: dict, bf16: bool) -> dict:
    """The training-time test over the feature sequences, in batches of similar lengths, to the schedule's last step
    (resumable from a state of the same `recipe`), under bfloat16 autocast where `bf16` (float32 weights, moments
    and loss); the verifier's embedding stays frozen."""
    lengths = tuple(map(len, seqs))

    def step(meta: dict):
        idx = length_bucketed_indices(lengths, options.run.seed, meta["step"], preset.train.batch_size)
        batch = collate([seqs[i] for i in idx], *tables)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss, scores = ttt_loss(head, ttt_hidden(head, batch.tokens, batch.features, preset.unroll), batch)
        agree = [h / max(n, 1) for h, n in zip(scores.hits, scores.rows)]
        ema = meta["agree"]
        meta["agree"] = agree if ema is None else [0.95 * a + 0.05 * b for a, b in zip(ema, agree)]
        return loss, "agree=" + "/".join(f"{a:.2f}" for a in meta["agree"])

    for n, p in head.named_parameters():
        p.requires_grad_(n != "embed.weight")
    total, lr = schedule(preset, options)
    meta = {"step": 0, "recipe": recipe, "train_seconds": 0.0, "agree": None}
    meta = distill_steps("eagle3", head, make_optimizer(head, preset.train), meta, total,
                         preset.train, state_dir, options.run, step, lr)
    head.requires_grad_(False)
    return meta


def ensure_data(target: Path, out: Path, data_preset: str, options: Eagle3Options) -> list[str]:
    """Stage 1: the verifier's answers (the drafter job's shards) to --prompts training prompts and --eval-prompts of
    each held-out split (default: the data preset's counts), the missing ones generated by the verifier in --dtype;
    the data's splits."""
    splits = prompt_splits(None, options.chat_prompts)
    splits = with_sampled_answers(splits) if options.sampled_answers else splits
    dp = DRAFTER_PRESETS[data_preset]
    gen = replace(dp.gen, batch=options.gen_batch or dp.gen.batch)
    check_data_source(out / "data", options.chat_prompts, gen.batch, dp.gen.batch, options.dtype)
    counts = (options.prompts or dp.n_prompts, options.eval_prompts or dp.n_eval_prompts)
    answer_prompts(load_hf_model(target, options.dtype), target, out / "data", counts, gen, splits)
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


def saved_head(head_dir: Path, target: Path, verifier: LlamaGraph) -> tuple[Eagle3Graph, Tables]:
    """The head of `head_dir` in float32 (a bfloat16 head widens exactly), bound to the verifier's feature layers,
    and its draft tables. YggcError where it reads other layers than every head's cached features come from."""
    from ..errors import YggcError
    from ..graphs.eagle3 import default_feature_layers
    from ..graphs.eagle3_checkpoint import load_eagle3

    head, cached = load_eagle3(head_dir, target, 2), default_feature_layers(verifier.cfg.n_layers)
    if tuple(head.eagle.feature_layers) != cached:  # the cache's key does not name the layers: every head reads these
        raise YggcError(f"{head_dir} reads verifier layers {list(head.eagle.feature_layers)}, not the "
                        f"{list(cached)} this folder's features are cached for")
    verifier.feature_layers = head.eagle.feature_layers
    return head.float(), draft_tables(verifier, head.draft_ids)


def score_head(head_dir: Path, target: Path, verifier: LlamaGraph, heldout: dict[str, list[Sample]],
               cache_dir: Path, preset: Eagle3Preset, options: Eagle3Options) -> dict:
    """`--score HEAD`: another head's held-out top-1 agreement per unroll position on this folder's held-out splits
    (read through the same feature cache), so heads trained on other data compare on the same tokens."""
    head, tables = saved_head(head_dir, target, verifier)
    verifier_id = verifier_digest(target, options.dtype)
    curves = {split: evaluate(head, cached_extract(verifier, samples, verifier_id, cache_dir), preset.unroll, *tables,
                              preset.train.batch_size) for split, samples in heldout.items()}
    return {"scored_head": str(head_dir), "target": str(target), "verifier_dtype": options.dtype, "unroll": preset.unroll,
            "draft_vocab": len(head.draft_ids), **{f"{split}_agreement_per_step": c for split, c in curves.items()},
            "command": options.command}


def autocast_choice(flag: str) -> bool:
    """--autocast auto|on|off -> whether the head trains under bfloat16 autocast: auto where the CPU multiplies
    bfloat16 natively (loop.bf16_autocast_pays)."""
    return bf16_autocast_pays() if flag == "auto" else flag == "on"


def run_preset(options: Eagle3Options) -> Eagle3Preset:
    """The preset named by --preset with the run's overrides."""
    from ..errors import YggcError

    if options.decay and options.schedule != "wsd":
        raise YggcError("--decay goes with --schedule wsd (the cosine schedule decays to --steps by itself)")
    preset = preset_named(options.preset, EAGLE3_PRESETS)
    return replace(preset, steps=options.steps or preset.steps, draft_vocab=options.draft_vocab or preset.draft_vocab,
                   unroll=options.unroll or preset.unroll, train=replace(preset.train, lr=options.lr or preset.train.lr),
                   reference=preset.reference if options.reference is None else options.reference)


def run(options: Eagle3Options) -> dict:
    """Data, features, draft vocabulary (or the --init head's), training (or resuming) and, at the schedule's last
    step, OUT/eagle3-<preset>; returns the summary (also in that folder's eagle3_summary.json)."""
    from ..graphs import load_model

    require_transformers()
    preset = run_preset(options)
    target = checkpoint_folder(options.target, "--target")
    out = (options.out or CACHE / data_folder_name(preset.data, options.chat_prompts)).expanduser().resolve()
    torch.set_num_threads(options.run.threads)
    t0 = time.time()
    record = None
    if options.campaign:  # the start: --init, else the campaign's head where this machine has no saved state
        record, init = open_campaign(options, target, out, preset)
        options = replace(options, init=init)
    splits = ensure_data(target, out, preset.data, options)
    train_samples = [s for split in splits if is_training_split(split) for s in read_samples(out / "data" / split)]
    heldout = {split: read_samples(out / "data" / split) for split in splits if not is_training_split(split)}
    heldout_samples = [s for samples in heldout.values() for s in samples]
    reference = reference_samples(target, preset.data, preset.reference)
    verifier = load_model(target, max(len(s.ids) for s in train_samples + heldout_samples + reference) + 1,
                          getattr(torch, options.dtype))
    if options.score:
        return score_head(options.score, target, verifier, heldout, out / ".state" / "features", preset, options)
    keep = budget_prefixes((train_samples, reference), options.train_tokens)
    head, tables = (saved_head(options.init, target, verifier) if options.init else
                    new_head(target, verifier, train_samples[:keep[0]], preset.draft_vocab, options.run.seed))
    name = f"eagle3-{preset.name}" + (f"-{options.train_tokens}tok" if options.train_tokens else "")
    state_dir = out / ".state" / name
    done = saved_step(state_dir, options.run.resume) >= schedule(preset, options)[0]
    features, verifier_id = out / ".state" / "features", verifier_digest(target, options.dtype)  # the cache, shared by every head
    seqs = [] if done else training_sequences(verifier, train_samples, reference, verifier_id, features, keep)
    held = {split: cached_extract(verifier, samples, verifier_id, features) for split, samples in heldout.items()}
    del verifier
    if record is not None and record["best"] is None and options.init:  # the head to beat: the one the campaign starts from
        record["best"] = {"score": score_of(heldout_summary(head, held, preset, tables)), "steps": 0,
                          "head": str(options.init)}
    bf16 = autocast_choice(options.autocast)
    meta = train(head, seqs, preset, tables, state_dir, options, run_recipe(options, keep, tables, preset), bf16)
    rows = train_samples[:keep[0]] + reference[:keep[1]]
    summary = {"preset": preset.name, "target": str(target), "steps": meta["step"], "draft_vocab": len(tables[0]),
               "unroll": preset.unroll, "verifier_dtype": options.dtype, "feature_layers": list(head.eagle.feature_layers),
               "schedule": options.schedule, "decay_steps": options.decay or 0, "init": str(options.init) if options.init else None,
               "autocast": "bfloat16" if bf16 else "off",
               "train_conversations": keep[0], "reference_conversations": keep[1],
               "train_rows": sum(len(s.ids) - 1 for s in rows), "train_label_tokens": label_tokens(rows),
               "train_minutes": meta["train_seconds"] / 60, "wall_minutes": (time.time() - t0) / 60,
               **heldout_summary(head, held, preset, tables), "command": options.command}
    if meta["step"] >= schedule(preset, options)[0]:
        summary["head"] = str(export_head(head, target, out / name, summary))
    if options.campaign:
        close_campaign(options, target, out, preset, record, summary)
    return summary


def run_recipe(options: Eagle3Options, keep: tuple[int, int], tables: Tables, preset: Eagle3Preset) -> dict:
    """What a saved state must have been made from to be resumed: the data (not in a campaign), the seed, the sizes,
    the batch order,
    the schedule's kind, the warm start and the verifier's dtype (the last three only where not the default, so
    states saved before they existed resume as before)."""
    recipe = {"seed": options.run.seed, "draft_vocab": len(tables[0]), "unroll": preset.unroll, "batches": "by-length"}
    if not options.campaign:  # a campaign trains on more answers as they are generated
        recipe |= {"train_conversations": keep[0], "reference_conversations": keep[1]}
    recipe |= {} if options.dtype == "float32" else {"verifier_dtype": options.dtype}
    recipe |= {} if options.schedule == "cosine" else {"schedule": options.schedule}
    recipe |= {"init": str(Path(options.init).resolve())} if options.init else {}
    return recipe


def heldout_summary(head: Eagle3Graph, held: dict[str, list[Conversation]], preset: Eagle3Preset,
                    tables: Tables) -> dict:
    """Held-out agreement per unroll position for every held-out split (out-of-vocabulary rows count as misses),
    and the chain acceptance length the "heldout" split's curve implies."""
    curves = {split: evaluate(head, seqs, preset.unroll, *tables, preset.train.batch_size)
              for split, seqs in held.items()}
    return {**{f"{split}_agreement_per_step": c for split, c in curves.items()},
            "heldout_chain_accepted_length": float(np.sum(np.cumprod(curves["heldout"]))),
            "agreement_counts_out_of_vocabulary_as_misses": True}


def export_head(head: Eagle3Graph, target: Path, dest: Path, summary: dict) -> Path:
    """The head in the public EAGLE-3 layout, in bfloat16, with eagle3_summary.json."""
    from ..graphs.eagle3_checkpoint import head_base_config, save_eagle3

    return save_eagle3(head.to(torch.bfloat16), head_base_config(target), dest,
                       {"eagle3_summary.json": json.dumps(summary, indent=1)})
