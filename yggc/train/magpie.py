"""``yggc train prompts``: chat prompts the target writes itself (Magpie, Xu et al. 2024).

    yggc train prompts --target $(yggc pull smollm2) --count 20000

An instruct model given only its chat template's opening of a user turn (for SmolLM2
``<|im_start|>system ...<|im_end|>\\n<|im_start|>user\\n``) writes a plausible user request and
ends the turn. Sampling that at temperature 1 many times gives diverse everyday prompts (advice,
science, programming, writing) without a hub data set, in the distribution the model was tuned on.

Stages, each resumable (rerun the same command to continue):
  1. generate  OUT/magpie/shard-NNNNN.json: --batch sampled user turns each, shard s sampled with the
               seed (--seed, s), written atomically; a turn that does not end within --max-new tokens
               is kept as cut (and never selected). Throughput is printed per shard and in the summary.
  2. select    OUT/chat_prompts.json: the turns that end, are --min-chars..--max-chars long and read as
               English (select()), deduplicated by their normalised text; a prompt is held out iff
               sha256(normalised text) mod 20 == 0, so the split depends on the text alone and no
               training prompt can equal a held-out one.

`yggc train drafter|eagle3 --chat-prompts OUT/chat_prompts.json` mixes the training split with the
stdlib prompts; the held-out split is what the benchmark's general-chat set is drawn from.
"""
from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import YggcError
from ..runtime.chat import WHERE
from .loop import progress
from .options import PromptsOptions
from .presets import CACHE, checkpoint_folder, load_hf_model, require_transformers
from .shards import chat_tokenizer, stop_tokens

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

    from ..runtime.chat import ChatTemplate

HELDOUT_MODULUS = 20
SENTINEL = "\x00yggc user text\x00"
WORD = re.compile(r"[a-z']+")
# Frequent English function words: a prompt with none of them in its first 40 words is not English prose.
ENGLISH = frozenset("the a an to of and in is are for you i my me can how what why do does it this that with on "
                    "be your please help write explain".split())


@dataclass(frozen=True)
class MagpieSpec:
    """How the prompts are sampled and which are kept."""

    count: int          # turns to sample (rounded up to whole shards)
    batch: int = 64     # turns per shard
    max_new: int = 64   # tokens a turn may take; longer ones are cut
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    min_chars: int = 12
    max_chars: int = 600


# --------------------------------------------------------------------------- selection (pure)


def normalised(text: str) -> str:
    """Lower case, every run of non-alphanumerics one space: the key of deduplication and of the split."""
    return " ".join(re.findall(r"[0-9a-z]+", text.lower()))


def is_heldout(text: str) -> bool:
    """The held-out split: a pure function of the normalised text."""
    digest = hashlib.sha256(normalised(text).encode()).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_MODULUS == 0


def reads_as_english(text: str) -> bool:
    """Mostly ASCII letters, at least three words, and an English function word among the first 40."""
    letters = [c for c in text if c.isalpha()]
    if not letters or sum(c.isascii() for c in letters) < 0.97 * len(letters):
        return False
    words = WORD.findall(text.lower())
    return len(words) >= 3 and any(w in ENGLISH for w in words[:40])


def keep(text: str, spec: MagpieSpec) -> bool:
    """A finished turn worth answering: its length within bounds and English."""
    return spec.min_chars <= len(text) <= spec.max_chars and reads_as_english(text)


def select(turns: Iterable[str | None], spec: MagpieSpec) -> tuple[list[str], list[str], dict]:
    """(train, held-out, counts): the kept turns in order, first occurrence of each normalised text."""
    seen: set[str] = set()
    split: dict[bool, list[str]] = {False: [], True: []}
    counts = {"sampled": 0, "cut": 0, "filtered": 0, "duplicates": 0}
    for turn in turns:
        counts["sampled"] += 1
        if turn is None:
            counts["cut"] += 1
            continue
        text = turn.strip()
        if not keep(text, spec):
            counts["filtered"] += 1
            continue
        key = normalised(text)
        if key in seen:
            counts["duplicates"] += 1
            continue
        seen.add(key)
        split[is_heldout(text)].append(text)
    return split[False], split[True], {**counts, "train": len(split[False]), "heldout": len(split[True])}


# --------------------------------------------------------------------------- generation


def user_turn_prefix(chat: ChatTemplate) -> str:
    """The chat template's text before a user message's content (its system turn included)."""
    text = chat.render([{"role": "user", "content": SENTINEL}], add_generation_prompt=False)
    if SENTINEL not in text:
        raise YggcError("the target's chat template does not place the user's text verbatim; "
                        "Magpie prompts need a template that does")
    return text[:text.index(SENTINEL)]


def turn_text(tokens: list[int], eos: set[int], decode) -> tuple[str | None, int]:
    """(the user turn, or None when it never ended; its tokens including the end-of-turn one)."""
    for i, t in enumerate(tokens):
        if t in eos:
            return decode(tokens[:i]), i + 1
    return None, len(tokens)


def sample_shard(model: LlamaForCausalLM, prefix: list[int], spec: MagpieSpec, index: int, eos: set[int],
                 decode) -> tuple[list[str | None], int]:
    """Shard `index`: spec.batch sampled user turns, and the tokens they took."""
    import torch

    ids = torch.tensor([prefix] * spec.batch)  # [B, P]: every row the same prefix, no padding
    torch.manual_seed(spec.seed * 100003 + index)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=spec.max_new,
                             do_sample=True, temperature=spec.temperature, top_k=0, top_p=spec.top_p,
                             pad_token_id=min(eos), eos_token_id=sorted(eos))
    turns, tokens = [], 0
    for row in out[:, len(prefix):].tolist():
        text, n = turn_text(row, eos, decode)
        turns.append(text)
        tokens += n
    return turns, tokens


def shard_path(folder: Path, index: int) -> Path:
    return folder / f"shard-{index:05d}.json"


def write_shards(model: LlamaForCausalLM, target: Path, spec: MagpieSpec, folder: Path,
                 stop_after: int | None) -> dict:
    """Every missing shard of spec.count turns (at most `stop_after` in this run); the run's throughput."""
    tok, chat = chat_tokenizer(target)
    if chat is None:
        raise YggcError(f"{target} has no chat template ({WHERE}); Magpie prompts need one")
    prefix = tok.encode(user_turn_prefix(chat), add_special_tokens=False).ids
    eos = stop_tokens(model, tok, chat)
    decode = lambda ids: tok.decode(ids, skip_special_tokens=True)  # noqa: E731
    folder.mkdir(parents=True, exist_ok=True)
    n_shards = -(-spec.count // spec.batch)
    missing = [s for s in range(n_shards) if not shard_path(folder, s).is_file()]
    todo = missing[:stop_after]
    bar = progress("sample prompts", n_shards, n_shards - len(missing), unit="shard")
    t0, tokens = time.perf_counter(), 0
    for s in todo:
        turns, n = sample_shard(model, prefix, spec, s, eos, decode)
        tokens += n
        tmp = shard_path(folder, s).with_suffix(".tmp")
        tmp.write_text(json.dumps({"shard": s, "spec": asdict(spec), "turns": turns}))
        tmp.rename(shard_path(folder, s))
        bar.set_postfix_str(f"{tokens / (time.perf_counter() - t0):.0f} tok/s")
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - t0
    return {"shards_written": len(todo), "tokens": tokens, "seconds": round(seconds, 1),
            "tokens_per_s": round(tokens / seconds, 1) if todo else None}


def read_turns(folder: Path, n_shards: int) -> Iterator[str | None]:
    """The turns of shards 0..n_shards-1 that exist, in shard order."""
    for s in range(n_shards):
        if shard_path(folder, s).is_file():
            yield from json.loads(shard_path(folder, s).read_text())["turns"]


def run(options: PromptsOptions) -> dict:
    """Sample the missing shards, then write OUT/chat_prompts.json from every shard; returns the summary."""
    import torch

    require_transformers()
    target = checkpoint_folder(options.target, "--target")
    spec = MagpieSpec(count=options.count, batch=options.batch, max_new=options.max_new, top_p=options.top_p,
                      seed=options.seed)
    out = (options.out or CACHE / "magpie").expanduser().resolve()
    torch.set_num_threads(options.threads)
    folder = out / "magpie"
    check_same_spec(folder, spec)
    stats = write_shards(load_hf_model(target, options.dtype), target, spec, folder, options.stop_after)
    n_shards = -(-spec.count // spec.batch)
    train, heldout, counts = select(read_turns(folder, n_shards), spec)
    dest = out / "chat_prompts.json"
    tmp = dest.with_suffix(".tmp")
    tmp.write_text(json.dumps({"source": f"yggc train prompts (Magpie) from {target.name}", "spec": asdict(spec),
                               "counts": counts, "train": train, "heldout": heldout}, indent=1))
    tmp.rename(dest)
    return {"target": str(target), "prompts": str(dest), **counts, "generate": stats}


def check_same_spec(folder: Path, spec: MagpieSpec) -> None:
    """Shards of another batch, length or seed would mix two samplings: one clear line instead."""
    first = shard_path(folder, 0)
    if not first.is_file():
        return
    old = json.loads(first.read_text())["spec"]
    fixed = ("batch", "max_new", "temperature", "top_p", "seed")
    if any(old.get(k) != getattr(spec, k) for k in fixed):
        raise YggcError(f"{folder} holds prompts sampled with other settings "
                        f"({', '.join(f'{k}={old.get(k)}' for k in fixed)}); pass those or another --out")
