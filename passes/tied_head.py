"""One copy of a tied embedding table in an O2 CPU package: the embedding gather and the LM head both read
the table in the tied-head kernel's blocked layout.

Inductor's C++ GEMM template repacks the LM head's weight into its own blocks, and the embedding gather
needs the rows as they are, so a model whose head is its embedding would carry the table twice (SmolLM2's
verifier 57 MB, its drafter 25 MB). Here the table is laid out once as the kernel yggc::tied_head_v2 reads it
(graphs/packed_table.py: VNNI-2 blocks; the template's own arithmetic: same bits, same speed), and the graph
gathers embedding rows from those blocks.

Only where that kernel is the fast choice: bf16 weights on an AVX2 CPU (blocks of 16 columns), or on one with
AVX512-BF16 and no AMX, e.g. AMD Zen 4 (blocks of 64 columns: a 4 x 64 VDPBF16PS tile reads one block row at a
time, one memory stream, and gives the template's bits there). AMX's tiles beat both, so AMX packages keep two
copies. A table that streams quantized blocks (passes/quant_linear.py) is held as its blocks instead.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..artifacts import kernel_ops
from ..bundle.manifest import OptLevel
from ..graphs.packed_table import PackedEmbedding, pack_table
from . import quant_linear
from .kernels import kernel_library


class PackedHead(nn.Module):
    def __init__(self, packed: nn.Parameter, vocab: int):
        super().__init__()
        self.packed, self.vocab = packed, vocab

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [W, K] bf16 -> logits [W, vocab] float32
        return kernel_ops.tied_head(x, self.packed, self.vocab)


def kernel_is_fastest() -> bool:
    """The kernel matches the template's speed on AVX2 and on AVX512-BF16 without AMX
    (docs/benchmarks/cpu-verify-curve.md); AMX beats it, and AVX-512 without BF16 has no kernel of its own here."""
    if torch.cpu._is_amx_tile_supported():
        return False
    return torch.backends.cpu.get_cpu_capability() == "AVX2" or avx512_bf16()


def avx512_bf16() -> bool:
    """Whether the kernel library built here has the AVX512-BF16 path (VDPBF16PS tiles of 64 columns)."""
    return torch.backends.cpu.get_cpu_capability() == "AVX512" and torch.cpu._is_avx512_bf16_supported()


def table_columns() -> int:
    """Columns per block of the packed table for this CPU's kernel (graphs/packed_table.py)."""
    return 64 if avx512_bf16() else 16


def applies(graph: nn.Module, device: str, opt: OptLevel) -> bool:
    """Whether `graph`'s package should hold its tied table once, in the kernel's layout."""
    head, embed = getattr(graph, "lm_head", None), getattr(graph, "embed", None)
    return (opt == OptLevel.O2 and "lm_head" not in quant_linear.block_layers(graph)  # its blocks are the one copy and device == "cpu" and kernel_is_fastest()
            and isinstance(head, nn.Linear) and isinstance(embed, nn.Embedding) and head.weight is embed.weight
            and head.weight.dtype == torch.bfloat16 and head.weight.shape[1] % 2 == 0)


@contextmanager
def packed_table(graph: nn.Module, packed: torch.Tensor | None = None) -> Iterator[None]:
    """graph.embed and graph.lm_head read one packed table while the context lasts (for an export): `packed`
    (the table already packed, e.g. the one an EAGLE-3 head shares), else graph.embed's packed here."""
    kernel_library.build()
    embed, head = graph.embed, graph.lm_head
    graph.embed = PackedEmbedding(pack_table(embed.weight.detach(), table_columns()) if packed is None else packed)
    graph.lm_head = PackedHead(graph.embed.packed, embed.weight.shape[0])
    try:
        yield
    finally:
        graph.embed, graph.lm_head = embed, head
