"""Self-generated distillation data, resumable shards: the target answers chat prompts, and its top-k
next-token distribution at every answer token is kept as the drafter's soft label (``yggc train drafter``;
``yggc train eagle3`` reads the same answers).

Shards
    ``DATA/shard-NNNNN.safetensors``, one generation batch each, written atomically, so an
    interrupted run resumes at the first missing shard. A shard holds, for its prompts in order:
    ``prompt_ids``/``prompt_offsets`` (the chat-formatted prompt), ``response_ids``/
    ``response_offsets`` (the target's answer, up to and including its end-of-turn token) and,
    one row per answer token, ``topk_ids`` [T, K] (int32) and ``topk_logprobs`` [T, K] (float16):
    the target's log-probabilities given everything before that token.
    Shard s decodes greedily unless s % SAMPLED_EVERY == SAMPLED_EVERY - 1; then it samples at
    temperature 1 with seed (seed, s), so the drafter also sees the contexts --temp 1 produces.
    The split SAMPLED_SPLIT (``yggc train eagle3 --sampled-answers``) answers the training prompts once more,
    every shard sampled at temperature 1 with its own seeds: a sampled answer beside each greedy one.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .loop import progress, wait_while_paused
from .presets import GenSpec

if TYPE_CHECKING:
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    from ..runtime.chat import ChatTemplate

SAMPLED_EVERY = 3
SAMPLED_SPLIT = "train-t1"  # every training prompt answered once more, sampled at T = 1
SAMPLED_SEED_OFFSET = 50021  # its shards' seeds differ from the training split's sampled shards'
KEYS = ("prompt_ids", "prompt_offsets", "response_ids", "response_offsets", "topk_ids", "topk_logprobs")


def encode_prompts(tokenizer: Tokenizer, chat: ChatTemplate | None, texts: list[str],
                   max_prompt: int) -> list[list[int]]:
    """Chat-formatted token ids (plain text when the target has no chat template); long ones dropped."""
    ids = [tokenizer.encode(chat.render([{"role": "user", "content": t}]) if chat else t).ids for t in texts]
    return [p for p in ids if len(p) <= max_prompt]


def left_pad(prompts: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    width = max(map(len, prompts))
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask  # [B, P] each


def answer_length(tokens: Sequence[int], eos: set[int]) -> int:
    """Tokens up to and including the first end-of-turn token."""
    for i, t in enumerate(tokens):
        if t in eos:
            return i + 1
    return len(tokens)


def shard_sampling(split: str, index: int, seed: int) -> tuple[bool, int]:
    """Whether shard `index` of `split` samples at T = 1 (else it decodes greedily), and its torch seed."""
    if split == SAMPLED_SPLIT:
        return True, seed * 100003 + index + SAMPLED_SEED_OFFSET
    return index % SAMPLED_EVERY == SAMPLED_EVERY - 1, seed * 100003 + index


def generate_shard(model: LlamaForCausalLM, prompts: list[list[int]], spec: GenSpec, sampled: bool,
                   seed: int, eos: set[int]) -> dict:
    """One batch of answers (sampled at T = 1 with `seed`, else greedy) and their top-k soft labels, as the shard's
    tensors."""
    import torch

    pad = min(eos)
    ids, mask = left_pad(prompts, pad)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=spec.max_new, do_sample=sampled,
                             temperature=1.0, top_k=0, top_p=1.0, pad_token_id=pad, eos_token_id=sorted(eos),
                             output_logits=True, return_dict_in_generate=True)
    answers = out.sequences[:, ids.shape[1]:]                                  # [B, T]
    logprobs = torch.stack(out.logits, dim=1).float().log_softmax(-1)          # [B, T, V]
    top = logprobs.topk(spec.top_k, dim=-1)
    rows = {k: [] for k in KEYS}
    for b, prompt in enumerate(prompts):
        n = answer_length(answers[b].tolist(), eos)
        rows["prompt_ids"].append(torch.tensor(prompt, dtype=torch.int32))
        rows["response_ids"].append(answers[b, :n].to(torch.int32))
        rows["topk_ids"].append(top.indices[b, :n].to(torch.int32))
        rows["topk_logprobs"].append(top.values[b, :n].to(torch.float16))
    lengths = lambda key: torch.tensor([0] + [len(x) for x in rows[key]]).cumsum(0)  # noqa: E731
    return {"prompt_ids": torch.cat(rows["prompt_ids"]), "prompt_offsets": lengths("prompt_ids"),
            "response_ids": torch.cat(rows["response_ids"]), "response_offsets": lengths("response_ids"),
            "topk_ids": torch.cat(rows["topk_ids"]), "topk_logprobs": torch.cat(rows["topk_logprobs"])}


def is_training_split(split: str) -> bool:
    """Whether a data split is trained on (the greedy answers and the sampled ones) rather than held out."""
    return split in ("train", SAMPLED_SPLIT)


def with_sampled_answers(splits: dict[str, list[str]]) -> dict[str, list[str]]:
    """`splits` and SAMPLED_SPLIT: the training prompts once more, to be answered sampled at T = 1."""
    return {**splits, SAMPLED_SPLIT: splits["train"]}


def shard_path(data_dir: Path, index: int) -> Path:
    """The file of shard `index`."""
    return data_dir / f"shard-{index:05d}.safetensors"


def write_shards(model: LlamaForCausalLM, prompts: list[list[int]], spec: GenSpec, data_dir: Path, eos: set[int],
                 split: str) -> None:
    """Generate every missing shard of `prompts` (spec.batch per shard) into data_dir."""
    from safetensors.torch import save_file

    data_dir.mkdir(parents=True, exist_ok=True)
    n_shards = -(-len(prompts) // spec.batch)
    todo = [s for s in range(n_shards) if not shard_path(data_dir, s).is_file()]
    if not todo:
        return
    bar = progress(f"generate {split}", n_shards, n_shards - len(todo), unit="shard")
    t0, tokens = time.perf_counter(), 0
    for s in todo:
        wait_while_paused(f"generate {split}", lambda: None)  # finished shards are on disk already
        batch = prompts[s * spec.batch:(s + 1) * spec.batch]
        sampled, seed = shard_sampling(split, s, spec.seed)
        tensors = generate_shard(model, batch, spec, sampled, seed, eos)
        tokens += len(tensors["response_ids"])
        bar.set_postfix_str(f"{tokens / (time.perf_counter() - t0):.0f} answer tok/s")
        tmp = shard_path(data_dir, s).with_suffix(".tmp")
        save_file(tensors, str(tmp), metadata={"sampled": str(sampled)})
        tmp.rename(shard_path(data_dir, s))
        bar.update(1)
    bar.close()


@dataclass(frozen=True)
class Sample:
    ids: list[int]       # prompt + answer
    answer_start: int    # index of the first answer token in ids
    topk_ids: object     # [T, K] int64 tensor: soft-label support for answer token t
    topk_logprobs: object  # [T, K] float32 tensor


def read_samples(data_dir: Path) -> list[Sample]:
    """Every (prompt, answer, soft labels) of the shards in data_dir, in shard order."""
    from safetensors.torch import load_file

    samples = []
    for path in sorted(data_dir.glob("shard-*.safetensors")):
        t = load_file(str(path))
        po, ro = t["prompt_offsets"].tolist(), t["response_offsets"].tolist()
        for i in range(len(po) - 1):
            prompt = t["prompt_ids"][po[i]:po[i + 1]].tolist()
            answer = t["response_ids"][ro[i]:ro[i + 1]].tolist()
            if answer:
                samples.append(Sample(prompt + answer, len(prompt), t["topk_ids"][ro[i]:ro[i + 1]].long(),
                                      t["topk_logprobs"][ro[i]:ro[i + 1]].float()))
    return samples


def chat_tokenizer(folder: Path) -> tuple[Tokenizer, ChatTemplate | None]:
    """The checkpoint folder's tokenizer.json and chat template (None where it has none)."""
    from tokenizers import Tokenizer

    from ..runtime.chat import load_chat_template

    return Tokenizer.from_file(str(folder / "tokenizer.json")), load_chat_template(folder)


def stop_tokens(target: LlamaForCausalLM, tok: Tokenizer, chat: ChatTemplate | None) -> set[int]:
    """The target's end-of-answer ids: its config's eos ids and its chat template's end of turn."""
    eos = {int(e) for e in np.atleast_1d(target.config.eos_token_id)}
    if chat and tok.token_to_id(chat.eos_token) is not None:
        eos.add(tok.token_to_id(chat.eos_token))
    return eos


def data_folder_name(preset: str, chat_prompts: Path | None) -> str:
    """The default work folder of a data preset: its name, "-chat" when chat prompts are mixed in."""
    return f"{preset}-chat" if chat_prompts else preset


def check_data_source(data_dir: Path, chat_prompts: Path | None, gen_batch: int, preset_batch: int,
                      dtype: str = "float32") -> None:
    """data_dir's shards answer one prompt set, `gen_batch` prompts per shard, written by the target in `dtype`: the
    chat_prompts.json they mix in (its sha256; none for the stdlib prompts alone), the batch and the dtype are
    recorded on first use (a record without the batch has the preset's, `preset_batch`; without the dtype,
    float32), and other ones are refused in one clear line."""
    from ..bundle import file_sha256
    from ..errors import YggcError

    want = {"chat_prompts_sha256": file_sha256(chat_prompts) if chat_prompts else None, "gen_batch": gen_batch,
            "dtype": dtype}
    record = data_dir / "source.json"
    if record.is_file():
        have = json.loads(record.read_text())
    elif any(data_dir.glob("*/shard-*.safetensors")):
        have = {"chat_prompts_sha256": None}  # shards written before the record: stdlib prompts only
    else:
        data_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(want))
        return
    have.setdefault("gen_batch", preset_batch)  # recorded before --gen-batch existed: the preset's batch
    have.setdefault("dtype", "float32")  # recorded before --dtype existed
    if have["chat_prompts_sha256"] != want["chat_prompts_sha256"]:
        raise YggcError(f"{data_dir} holds answers to another prompt set "
                        f"({'no' if have['chat_prompts_sha256'] is None else 'other'} --chat-prompts); "
                        "pass another --out, or the same --chat-prompts file")
    if have["gen_batch"] != gen_batch:
        raise YggcError(f"{data_dir} holds shards of {have['gen_batch']} prompts, not {gen_batch}; "
                        f"pass --gen-batch {have['gen_batch']}, or another --out")
    if have["dtype"] != dtype:
        raise YggcError(f"{data_dir} holds answers the target wrote in {have['dtype']}, not {dtype}; "
                        f"pass --dtype {have['dtype']}, or another --out")


def answer_prompts(target: LlamaForCausalLM, folder: Path, data_dir: Path, counts: tuple[int, int], gen: GenSpec,
                   splits: dict[str, list[str]]) -> None:
    """The target (loaded from `folder`) answers the first counts[0] training prompts and counts[1] of every
    held-out split that fit gen.max_prompt: the missing shards of data_dir/<split>."""
    tok, chat = chat_tokenizer(folder)
    eos = stop_tokens(target, tok, chat)
    for split, texts in splits.items():
        ids = encode_prompts(tok, chat, texts, gen.max_prompt)[:counts[not is_training_split(split)]]
        write_shards(target, ids, gen, data_dir / split, eos, split)
