"""What a bundle keeps of each model's checkpoint beside its compiled packages.

An O2 package carries its model's weights, so the bundle leaves the safetensors out. It keeps what runs eagerly
around the packages: an EAGLE-3 head's feature fusion (fc) and draft vocabulary, and the one tensor the head
borrows from the verifier, the token embedding it gathers its input rows from.
"""
from __future__ import annotations

import torch

from ..bundle.manifest import OptLevel
from ..graphs.eagle3_checkpoint import (
    embedding_fingerprint,
    read_embedding,
    save_embedding,
    save_fusion,
    save_packed_embedding,
)
from ..graphs.packed_table import PackedEmbedding, pack_table
from . import tied_head
from .compile_state import LoadedPair, Widths
from .write_bundle import BundleWriter


def stores_weights(name: str, opt: OptLevel, widths: Widths) -> bool:
    """Whether the bundle keeps model `name`'s safetensors: not where its O2 package carries the weights. Then an
    EAGLE-3 head keeps its feature fusion alone (keep_head_fusion), and beside a head the verifier keeps its token
    embedding alone (keep_head_embedding)."""
    return not (opt == OptLevel.O2 and widths[name])


def keep_head_fusion(w: BundleWriter, loaded: LoadedPair) -> None:
    """The head's fc (which fuses the verifier's features eagerly, before each package call) and its draft
    vocabulary; the package holds the head's layer, norm and LM head."""
    save_fusion(loaded.drafter.graph, w.root / "drafter")


def keep_head_embedding(w: BundleWriter, loaded: LoadedPair, dtype: torch.dtype, device: str, opt: str) -> None:
    """The head gathers its input rows from the verifier's token embedding, which an O2 verifier package holds
    only for its own use: the bundle keeps that one tensor (in the bundle's dtype) instead of the checkpoint.
    Where the verifier's package would hold its tied table in packed_table's blocks (passes/tied_head.py), the
    bundle keeps those blocks instead, the package takes them as an input, and the head (here and at load) is
    bound to them: one copy of the table in the bundle and in memory."""
    embed = read_embedding(loaded.verifier.path).to(dtype)
    if not tied_head.applies(loaded.verifier.graph, device, opt):
        save_embedding(embed, w.root / "verifier")
        return
    head_embed = PackedEmbedding(pack_table(embed, tied_head.table_columns()))
    save_packed_embedding(head_embed.packed, embedding_fingerprint(embed), w.root / "verifier")
    loaded.drafter.graph.embed = head_embed
