"""Decoders of every kind over tiny random models (the `decoders` fixture of tests/conftest.py)."""
from pathlib import Path

import torch
from checkpoints import write_checkpoint
from yggc.graphs import load_model
from yggc.graphs.eagle3_checkpoint import head_base_config, new_eagle3, save_eagle3

from yggc.artifacts.cache_layout import CacheLayout
from yggc.plan.shape import TreeShape
from yggc.runtime import drafters
from yggc.runtime.autoregressive import AutoregressiveDecoder
from yggc.runtime.drafters import speculative_decoder
from yggc.runtime.drafters.suffix_proposer import SuffixDrafter, SuffixProposer
from yggc.runtime.speculative import SpeculativeDecoder

KINDS = ("ar", "llama", "eagle3", "suffix")
VOCAB = 8


def make_decoders(root: Path) -> dict:
    """kind -> decoder over 8-token random models, where a random head's drafts are often right (the AR decoder
    shares the standalone pair's verifier graph), tree (3, 2, 5), 256-token context (checkpoints under root)."""
    v = root / "v"
    if not v.exists():
        write_checkpoint(v, "tiny_vocab", seed=5)
        write_checkpoint(root / "d", "tiny_vocab", seed=32, base=v, noise=0.03)
        head = new_eagle3(v, torch.arange(VOCAB), 2, seed=5, init_std=0.3)
        save_eagle3(head, head_base_config(v), root / "head")
    layout, shape = CacheLayout(256, align=32), TreeShape(3, 2, 5)
    verifier, drafter = load_model(v, layout.n_slots), load_model(root / "d", layout.n_slots)
    e3_verifier, e3_head = drafters.load_pair(v, root / "head", torch.float32, layout.max_seq)
    return {"ar": AutoregressiveDecoder(verifier, layout),
            "llama": speculative_decoder(verifier, drafter, layout, shape),
            "eagle3": drafters.speculative_decoder(e3_verifier.graph, e3_head.graph, layout, shape),
            "suffix": SpeculativeDecoder(SuffixProposer(verifier, SuffixDrafter(min_n=1), layout, shape))}
