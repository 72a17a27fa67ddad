"""The options of each `yggc train` job: frozen dataclasses the CLI builds once from the flags (yggc/cli/train.py).

A field is named after its flag (--chat-prompts -> chat_prompts); None means "the preset's" (or the flag's stated
default) where the flag has no default of its own. The jobs read these and never an argparse namespace.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunSettings:
    """How one run of a training job goes: threads and seed, when it stops (rerun to resume) and saves."""
    threads: int
    seed: int
    max_minutes: float | None  # stop training after this many minutes of training (None: no limit)
    stop_after: int | None  # stop after this many steps in this run (None: no limit)
    ckpt_every: int  # save the training state every N steps (and when the run stops)
    resume: bool  # continue from the saved state (False: --no-resume, start over)


@dataclass(frozen=True)
class DrafterOptions:
    """`yggc train drafter`: distil a standalone drafter from a target's own answers."""
    target: Path
    preset: str
    out: Path | None
    corpus_dir: Path | None
    chat_prompts: Path | None
    prompts: int | None  # training prompts the target answers
    gen_batch: int | None  # prompts answered at once, one shard each
    steps: int | None
    dtype: str  # the exported drafter's weights
    run: RunSettings


@dataclass(frozen=True)
class Eagle3Options:
    """`yggc train eagle3`: train (or with `score`, only score) an EAGLE-3 head for a verifier."""
    target: Path
    preset: str
    out: Path | None
    steps: int | None
    chat_prompts: Path | None
    prompts: int | None  # training prompts the verifier answers
    eval_prompts: int | None  # prompts of each held-out split the verifier answers
    sampled_answers: bool  # also answer each training prompt sampled at T = 1 (split train-t1) and train on it
    gen_batch: int | None
    train_tokens: int | None  # train on the leading conversations holding about this many answer tokens
    draft_vocab: int | None
    reference: int | None  # training prompts also read with reference answers
    unroll: int | None  # training-time-test steps
    score: Path | None  # a head folder to score instead of training
    dtype: str  # the verifier's weights while it answers and is read for features
    init: Path | None  # the head to start from (a campaign's head where none is named)
    campaign: Path | None
    lr: float | None
    schedule: str  # cosine | wsd
    decay: int | None  # with schedule wsd: steps of decay after `steps`
    autocast: str  # auto | on | off
    run: RunSettings
    command: str  # the command line, recorded in the head's summary


@dataclass(frozen=True)
class PromptsOptions:
    """`yggc train prompts`: sample chat prompts the target writes itself (Magpie)."""
    target: Path
    out: Path | None
    count: int
    batch: int
    max_new: int
    top_p: float
    dtype: str
    threads: int
    seed: int
    stop_after: int | None  # stop after this many shards in this run


@dataclass(frozen=True)
class PairOptions:
    """`yggc train pair`: a verifier + drafter pair trained on the Python stdlib."""
    preset: str
    out: Path | None
    corpus_dir: Path | None
    only: str  # both | verifier | drafter
    verifier_minutes: float | None
    drafter_minutes: float | None
    steps: int | None  # optimizer steps per model (None: fitted to the time budget)
    batch_size: int | None
    lr: float | None
    seq_len: int | None
    vocab_size: int | None
    tokenizer: Path | None
    distill_alpha: float | None
    no_distill: bool
    compile: bool | None
    autocast: bool
    run: RunSettings

    def minutes_for(self, role: str) -> float | None:
        """The time budget of the pair's `role` model: its own flag, else --max-minutes (None: the preset's)."""
        own = self.verifier_minutes if role == "verifier" else self.drafter_minutes
        return own or self.run.max_minutes


@dataclass(frozen=True)
class EvaluateOptions:
    """`yggc train evaluate`: held-out metrics of a pair."""
    pair: Path
    corpus_dir: Path | None
    threads: int | None  # None: torch's
    ctx: int
    max_eval_tokens: int
    prompts: int
    prompt_chars: int
    new_tokens: int
    show_samples: int


TrainOptions = DrafterOptions | Eagle3Options | PromptsOptions | PairOptions | EvaluateOptions
