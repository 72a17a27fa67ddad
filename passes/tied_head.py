"""One copy of a tied embedding table in an O2 CPU package: the embedding gather and the LM head both read
the table in the tied-head kernel's blocked layout.

Inductor's C++ GEMM template repacks the LM head's weight into its own blocks, and the embedding gather
needs the rows as they were, so a model whose head is its embedding carried the table twice (SmolLM2's
verifier 57 MB, its drafter 25 MB). Here the table is laid out once as the kernel yggc::tied_head_v1 reads
it (graphs/packed_table.py: VNNI-2 blocks of 16 columns; the template's own arithmetic: same bits, same speed
on AVX2), and the graph gathers embedding rows from those blocks.

Only where that kernel is the fast choice: bf16 weights on an AVX2 CPU. With AVX-512 or AMX the template's
kernels for wide verifies are faster than the kernel's AVX2 FMAs, so those packages keep two copies.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..graphs.packed_table import PackedEmbedding, pack_table
from ..runtime import kernel_ops
from . import kernel_library


class PackedHead(nn.Module):
    def __init__(self, packed: nn.Parameter, vocab: int):
        super().__init__()
        self.packed, self.vocab = packed, vocab

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [W, K] bf16 -> logits [W, vocab] float32
        return kernel_ops.tied_head(x, self.packed, self.vocab)


def kernel_is_fastest() -> bool:
    """The kernel matches the template's speed on AVX2 (tools/bench_tied_head.py); AVX-512 and AMX beat it."""
    return torch.backends.cpu.get_cpu_capability() == "AVX2"


def applies(graph: nn.Module, device: str, opt: str) -> bool:
    """Whether `graph`'s package should hold its tied table once, in the kernel's layout."""
    head, embed = getattr(graph, "lm_head", None), getattr(graph, "embed", None)
    return (opt == "O2" and device == "cpu" and kernel_is_fastest()
            and isinstance(head, nn.Linear) and isinstance(embed, nn.Embedding) and head.weight is embed.weight
            and head.weight.dtype == torch.bfloat16 and head.weight.shape[1] % 2 == 0)


@contextmanager
def packed_table(graph: nn.Module, packed: torch.Tensor | None = None) -> Iterator[None]:
    """graph.embed and graph.lm_head read one packed table while the context lasts (for an export): `packed`
    (the table already packed, e.g. the one an EAGLE-3 head shares), else graph.embed's packed here."""
    kernel_library.build()
    embed, head = graph.embed, graph.lm_head
    graph.embed = PackedEmbedding(pack_table(embed.weight.detach()) if packed is None else packed)
    graph.lm_head = PackedHead(graph.embed.packed, embed.weight.shape[0])
    try:
        yield
    finally:
        graph.embed, graph.lm_head = embed, head
