"""Human-written prompt sets for ``yggc train drafter|eagle3 --chat-prompts SET.json``: requests people wrote
(MT-bench, self-instruct's human sets, IFEval, Chatbot Arena questions, ...), collected from public repositories
into one JSON file that stays on the machine (each source's repository, commit, path and license are recorded in
it; the answers trained on are always the target's own).

    {"sources": [{"name": "mt_bench", "repository": "lm-sys/FastChat", "commit": "...", "path": "...",
                  "license": "Apache-2.0", ...}, ...],
     "prompts": [{"source": "mt_bench", "id": "81", "text": "Compose an engaging travel blog post ..."}, ...]}

Splits, pure functions of the source and the text (so no training prompt can be a held-out one):
  heldout-mtbench  MT-bench's first turns, the held-out set the EAGLE papers report;
  heldout-human    every source's prompts whose normalised text hashes to the held-out split (magpie.is_heldout),
                   and every prompt of a set published for evaluation only (EVAL_ONLY);
  train            the rest, taken from the sources in turn (one of each, then the next of each, ...), so that any
                   leading share of it (`--prompts N`) mixes every source rather than the first file's.
MT-bench's second turns are left out: they answer a first turn the set does not show.
"""
from __future__ import annotations

from ..errors import YggcError
from .magpie import is_heldout, normalised

HELDOUT_FIRST_TURNS = "mt_bench"
FOLLOW_UPS = frozenset({"mt_bench_turn2"})
EVAL_ONLY = frozenset({"koala_test"})  # its README asks that it not be trained on


def is_prompt_set(raw: object) -> bool:
    """Whether a parsed --chat-prompts file is a prompt set (sources and prompts) rather than a chat_prompts.json."""
    return isinstance(raw, dict) and "prompts" in raw and "sources" in raw


def prompt_set_splits(raw: dict, where: str) -> dict[str, list[str]]:
    """A prompt set's texts by split ("train", "heldout-mtbench", "heldout-human"), each in the file's order and
    without repeats of a normalised text; YggcError naming the file where it is not one."""
    prompts = raw.get("prompts")
    if not isinstance(prompts, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str)
                                                and isinstance(p.get("source"), str) for p in prompts):
        raise YggcError(f"--chat-prompts {where}: 'prompts' is not a list of {{source, text}} objects")
    splits: dict[str, list[str]] = {"heldout-mtbench": [], "heldout-human": []}
    train: dict[str, list[str]] = {}
    seen: set[str] = set()
    for p in prompts:
        key = normalised(p["text"])
        if p["source"] in FOLLOW_UPS or key in seen:
            continue
        seen.add(key)
        if p["source"] == HELDOUT_FIRST_TURNS:
            splits["heldout-mtbench"].append(p["text"])
        elif p["source"] in EVAL_ONLY or is_heldout(p["text"]):
            splits["heldout-human"].append(p["text"])
        else:
            train.setdefault(p["source"], []).append(p["text"])
    return {"train": in_turn(list(train.values())), **splits}


def in_turn(groups: list[list[str]]) -> list[str]:
    """The first item of every group, then the second of every group, and so on (groups that run out drop out)."""
    return [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]
