"""Benchmark prompts: held-out texts (the demo pair's prompts.json or tools/train_pair.py), else random ids."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import YggcError
from .config import PROMPTS_FILE, RANDOM_PROMPT_LEN, BenchConfig, log


def load_prompt_texts(path: Path | None) -> tuple[list[str] | None, str]:
    """Held-out prompt texts and where they came from: the JSON file, tools/train_pair.py, or none."""
    path = path or PROMPTS_FILE
    if path.exists():
        return [p["text"] for p in json.loads(path.read_text())["prompts"]], str(path)
    try:
        from train_pair import heldout_prompts  # tools/ is on sys.path when run as tools/bench.py

        return heldout_prompts(64), "tools/train_pair.py heldout_prompts"
    except ImportError:
        return None, "none"


def make_prompts(cfg: BenchConfig, tokenizer, vocab: int) -> tuple[list[list[int]], str]:
    """cfg.n_prompts measured prompts + 1 for warm-up and tuning, as token ids."""
    need = cfg.n_prompts + 1
    texts, source = load_prompt_texts(cfg.prompts_file)
    if texts is None or tokenizer is None:
        g = torch.Generator().manual_seed(0)
        why = "no prompt file" if texts is None else "the verifier has no tokenizer.json"
        log(f"using random token prompts ({why})")
        return [torch.randint(1, vocab, (RANDOM_PROMPT_LEN,), generator=g).tolist() for _ in range(need)], "random ids"
    if len(texts) < need:
        raise YggcError(f"{source} has {len(texts)} prompts; --prompts {cfg.n_prompts} needs {need} (one is for warm-up)")
    return [tokenizer.encode(t).ids for t in texts[:need]], source


def check_fits(prompts: list[list[int]], cfg: BenchConfig) -> None:
    longest = max(len(p) for p in prompts) + cfg.n_new + max(s.n_nodes for s in cfg.tree_grid) + 1
    if longest > cfg.max_seq:
        raise YggcError(f"prompt + {cfg.n_new} new tokens + a draft tree need {longest} cache slots but --max-seq is "
                        f"{cfg.max_seq}; raise --max-seq or lower -n")
