"""Benchmark prompts: held-out texts (--prompts-file, default the demo pair's prompts.json), else random ids."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import YggcError
from .suite import PROMPTS_FILE, RANDOM_PROMPT_LEN, BenchConfig, log


def load_prompt_texts(path: Path | None) -> tuple[list[str], str]:
    """Held-out prompt texts and the file they came from (default: the demo pair's shipped prompts.json)."""
    path = path or PROMPTS_FILE
    if not path.is_file():
        raise YggcError(f"--prompts-file {path} does not exist; pass a JSON file {{\"prompts\": [{{\"text\": ...}}]}}")
    try:
        return [p["text"] for p in json.loads(path.read_text())["prompts"]], str(path)
    except (ValueError, KeyError, TypeError) as e:
        raise YggcError(f"--prompts-file {path} is not JSON of the form {{\"prompts\": [{{\"text\": ...}}]}} ({e})") from None


def make_prompts(cfg: BenchConfig, tokenizer, vocab: int) -> tuple[list[list[int]], str]:
    """cfg.n_prompts measured prompts + 1 for warm-up and tuning, as token ids."""
    need = cfg.n_prompts + 1
    texts, source = load_prompt_texts(cfg.prompts_file)
    if tokenizer is None:
        g = torch.Generator().manual_seed(0)
        log("using random token prompts (the verifier has no tokenizer.json)")
        return [torch.randint(1, vocab, (RANDOM_PROMPT_LEN,), generator=g).tolist() for _ in range(need)], "random ids"
    if len(texts) < need:
        raise YggcError(f"{source} has {len(texts)} prompts; --prompts {cfg.n_prompts} needs {need} (one is for warm-up)")
    return [tokenizer.encode(t).ids for t in texts[:need]], source


def check_fits(prompts: list[list[int]], cfg: BenchConfig) -> None:
    longest = max(len(p) for p in prompts) + cfg.n_new + max(s.n_nodes for s in cfg.tree_grid) + 1
    if longest > cfg.max_seq:
        raise YggcError(f"prompt + {cfg.n_new} new tokens + a draft tree need {longest} cache slots but --max-seq is "
                        f"{cfg.max_seq}; raise --max-seq or lower -n")
