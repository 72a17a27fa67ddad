"""A training campaign that outlives the machine it runs on (``yggc train eagle3 --campaign DIR``).

What is slow to make is kept in DIR, a folder meant to be committed: the target's answers (hours of generation on
2 cores) and the best head so far. What is quick to remake is not: the verifier's features re-extract in minutes,
and the optimizer's moments re-warm in a few dozen steps after a warm start from DIR's head.

    DIR/campaign.json                  the record: what the data answers, the runs so far, the held-out curve
    DIR/answers/<split>/shard-NNNNN.safetensors
                                       one per data shard: answer_ids [T] uint16 (every answer of the shard, in
                                       order), answer_offsets [n + 1] int64, prompt_sha256 [n, 32] uint8 (of each
                                       prompt's token ids, as generated); metadata "sampled" as the shard's
    DIR/head/                          the head with the best held-out agreement so far (public EAGLE-3 layout)

The prompts themselves are not kept: they come from the --chat-prompts file and the stdlib, and an answer is
only joined to the prompt whose token ids have its hash. Imported shards carry no soft labels (the EAGLE-3 head
recomputes its targets from the verifier's features; the standalone drafter job refuses such a folder).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import torch

from ..bundle import file_sha256
from ..errors import YggcError
from .features import verifier_digest
from .loop import log
from .options import Eagle3Options
from .presets import DRAFTER_PRESETS, Eagle3Preset
from .shards import chat_tokenizer, check_data_source, encode_prompts, shard_path, with_sampled_answers
from .stdlib_prompts import prompt_splits

RECORD = "campaign.json"


def prompt_digest(ids: torch.Tensor) -> bytes:
    """sha256 of a prompt's token ids (int32, little-endian): the key an answer is joined to its prompt by."""
    return hashlib.sha256(ids.to(torch.int32).numpy().astype("<i4").tobytes()).digest()


def compact_shard(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A data shard's tensors -> the campaign's: answer ids as uint16 with offsets, each prompt's digest."""
    if tensors["response_ids"].numel() and int(tensors["response_ids"].max()) >= 2 ** 16:
        raise YggcError("a token id does not fit in 16 bits: this campaign format holds vocabularies of <= 65,536")
    po = tensors["prompt_offsets"].tolist()
    digests = [prompt_digest(tensors["prompt_ids"][a:b]) for a, b in zip(po, po[1:])]
    return {"answer_ids": tensors["response_ids"].to(torch.int32).to(torch.uint16),
            "answer_offsets": tensors["response_offsets"].to(torch.int64),
            "prompt_sha256": torch.from_numpy(np.frombuffer(b"".join(digests), dtype=np.uint8).reshape(-1, 32).copy())}


def sampled_flag(path: Path) -> str:
    """A shard file's "sampled" metadata (whether its answers were drawn at T = 1)."""
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return (f.metadata() or {}).get("sampled", "False")


def write_shard(tensors: dict[str, torch.Tensor], out: Path, metadata: dict[str, str]) -> None:
    """`tensors` as a safetensors file at `out`, written under a temporary name and renamed into place."""
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata=metadata)
    os.replace(tmp, out)


def export_answers(data_dir: Path, dest: Path) -> int:
    """Every shard of data_dir/<split> not yet in dest/answers/<split>, compacted; returns how many were written."""
    from safetensors.torch import load_file

    written = 0
    for path in sorted(data_dir.glob("*/shard-*.safetensors")):
        out = dest / "answers" / path.parent.name / path.name
        if not out.is_file():
            write_shard(compact_shard(load_file(str(path))), out, {"sampled": sampled_flag(path)})
            written += 1
    return written


def expand_shard(compact: dict[str, torch.Tensor], prompts: list[list[int]], where: str) -> dict[str, torch.Tensor]:
    """A campaign shard and the prompts it answers (token ids, in order) -> the data shard's tensors, with soft labels
    of width 0. YggcError where a prompt is not the one the answer was generated for."""
    digests = compact["prompt_sha256"]
    if len(prompts) != len(digests):
        raise YggcError(f"{where}: {len(digests)} answers but {len(prompts)} prompts for that shard here; the "
                        "prompt set or the tokenizer is not the one the campaign answered")
    for i, p in enumerate(prompts):
        if prompt_digest(torch.tensor(p)) != bytes(digests[i].tolist()):
            raise YggcError(f"{where}: prompt {i} is not the one its answer was generated for; the prompt set, "
                            "its order or the chat template differs from the campaign's")
    answers = compact["answer_ids"].to(torch.int32)
    return {"prompt_ids": torch.tensor([t for p in prompts for t in p], dtype=torch.int32),
            "prompt_offsets": torch.tensor([0] + [len(p) for p in prompts]).cumsum(0),
            "response_ids": answers, "response_offsets": compact["answer_offsets"],
            "topk_ids": torch.zeros(len(answers), 0, dtype=torch.int32),
            "topk_logprobs": torch.zeros(len(answers), 0, dtype=torch.float16)}


def import_answers(src: Path, data_dir: Path, prompts: dict[str, list[list[int]]], batch: int) -> int:
    """The campaign's shards missing from data_dir/<split>, rebuilt from `prompts` (each split's prompt token ids in
    generation order, `batch` a shard); returns how many were written."""
    from safetensors.torch import load_file

    written = 0
    for path in sorted((src / "answers").glob("*/shard-*.safetensors")):
        split, index = path.parent.name, int(path.stem.split("-")[1])
        out = shard_path(data_dir / split, index)
        if not out.is_file():
            compact = load_file(str(path))  # a split's last shard holds only the prompts that were asked for
            first = index * batch
            shard = expand_shard(compact, prompts.get(split, [])[first:first + len(compact["prompt_sha256"])],
                                 str(path))
            write_shard(shard, out, {"sampled": sampled_flag(path), "soft_labels": "none"})
            written += 1
    return written


def read_record(src: Path) -> dict:
    """DIR/campaign.json, or a new record where there is none."""
    path = src / RECORD
    if not path.is_file():
        return {"data": None, "runs": [], "best": None}
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise YggcError(f"{path}: not a campaign record ({e}); restore it from git") from None


REBUILT = "chat_prompts_sha256"  # a prompt file rebuilt on another machine may differ in bytes, not in prompts


def check_data(record: dict, data: dict) -> None:
    """YggcError where the campaign's answers were made with another verifier, shard size, dtype or generation
    settings than `data`, or with a prompt set where this run has none (or the other way round). Another file of
    prompts is let through: each answer is joined to its prompt by the digest of the prompt's token ids, so import
    refuses any shard whose prompts the file does not reproduce."""
    if record["data"] is None:
        return
    old, new = record["data"], data
    if (old.get(REBUILT) is None) == (new.get(REBUILT) is None):
        old, new = {**old, REBUILT: None}, {**new, REBUILT: None}
    if old != new:
        changed = ", ".join(f"{k} {old.get(k)} -> {v}" for k, v in new.items() if old.get(k) != v)
        raise YggcError(f"the campaign's answers were made with other settings ({changed}); use the campaign's "
                        "--chat-prompts file, --gen-batch and --dtype, or another --campaign folder")


def score_of(summary: dict) -> float:
    """The campaign's measure of a head: the first unroll position's agreement on human-written held-out chat
    (MT-bench first turns and the held-out split, their mean), else on the stdlib held-out split."""
    chat = [summary[k][0] for k in ("heldout-mtbench_agreement_per_step", "heldout-human_agreement_per_step")
            if k in summary]
    return float(np.mean(chat)) if chat else float(summary["heldout_agreement_per_step"][0])


def record_run(src: Path, record: dict, data: dict, summary: dict) -> bool:
    """Append the run to the record (not again where a finished run was run again: its row equals the last one),
    keep its head in DIR/head where it scores best so far, write campaign.json last; returns whether the head was
    kept."""
    score = score_of(summary)
    best = record["best"] is None or score > record["best"]["score"]
    if best and summary.get("head"):
        tmp = src / "head.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(summary["head"], tmp)
        shutil.rmtree(src / "head", ignore_errors=True)
        os.replace(tmp, src / "head")
        record["best"] = {"score": score, "steps": summary["steps"]}
    keys = ("steps", "schedule", "decay_steps", "train_label_tokens", "train_conversations", "train_minutes")
    row = {**{k: summary.get(k) for k in keys}, "score": score,
           **{k: v for k, v in summary.items() if k.endswith("_agreement_per_step")}, "command": summary.get("command")}
    if not record["runs"] or record["runs"][-1] != row:
        record["runs"].append(row)
    record["data"] = data
    src.mkdir(parents=True, exist_ok=True)
    (src / (RECORD + ".tmp")).write_text(json.dumps(record, indent=1) + "\n")
    os.replace(src / (RECORD + ".tmp"), src / RECORD)
    return bool(best and summary.get("head"))


def campaign_data(options: Eagle3Options, target: Path, preset: Eagle3Preset) -> dict:
    """What a campaign's answers depend on: the verifier, the prompt set, the generation settings and the dtype."""
    gen = DRAFTER_PRESETS[preset.data].gen
    return {"target": verifier_digest(target), "data_preset": preset.data, "dtype": options.dtype,
            "chat_prompts_sha256": file_sha256(options.chat_prompts) if options.chat_prompts else None,
            "gen_batch": options.gen_batch or gen.batch, "max_new": gen.max_new, "max_prompt": gen.max_prompt}


def open_campaign(options: Eagle3Options, target: Path, out: Path, preset: Eagle3Preset) -> tuple[dict, Path | None]:
    """--campaign DIR: its record (checked against this run's data settings), its answers imported into the work
    folder, and the head to start from: --init, else the warm start of the run this machine resumes, else DIR's head."""
    data = campaign_data(options, target, preset)
    record = read_record(options.campaign)
    check_data(record, data)
    check_data_source(out / "data", options.chat_prompts, data["gen_batch"], DRAFTER_PRESETS[preset.data].gen.batch,
                      options.dtype)
    tok, chat = chat_tokenizer(target)
    prompts = {split: encode_prompts(tok, chat, texts, data["max_prompt"])  # the sampled split's too, where it has one
               for split, texts in with_sampled_answers(prompt_splits(None, options.chat_prompts)).items()}
    imported = import_answers(options.campaign, out / "data", prompts, data["gen_batch"])
    state = out / ".state" / f"eagle3-{preset.name}" / "state.json"
    init = options.init
    if init is None and options.run.resume and state.is_file():  # the saved run's warm start: its draft vocabulary
        init = saved_warm_start(state)
    elif init is None and (options.campaign / "head").is_dir():
        init = options.campaign / "head"
    log("eagle3", f"campaign {options.campaign}: {imported} answer shards imported"
        + (f", warm start from {init}" if init else ""))
    return record, init


def saved_warm_start(state: Path) -> Path | None:
    """The head a saved run was warm-started from (its recipe's "init"), None for a fresh head. A resumed run rebuilds
    its head from it before the saved weights load: the draft vocabulary (which verifier token each LM head row is)
    comes from that head, not from the data, so the saved rows keep their tokens."""
    init = json.loads(state.read_text()).get("recipe", {}).get("init")
    if init is not None and not Path(init).is_dir():
        raise YggcError(f"{state.parent} holds a run warm-started from {init}, which is gone; restore it or pass "
                        "--no-resume to start over")
    return None if init is None else Path(init)


def close_campaign(options: Eagle3Options, target: Path, out: Path, preset: Eagle3Preset, record: dict,
                   summary: dict) -> None:
    """The run's new answers and record into the campaign folder, and its head where it scores best so far."""
    exported = export_answers(out / "data", options.campaign)
    kept = record_run(options.campaign, record, campaign_data(options, target, preset), summary)
    log("eagle3", f"campaign {options.campaign}: {exported} answer shards added; the head "
        + ("is the best so far: kept in the campaign" if kept else "was not kept (not exported, or not better)"))
