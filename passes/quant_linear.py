"""Block-quantized linear layers in an O2 CPU package: the verifier's linear layers read ggml's Q8_0/Q4_0/Q4_1 blocks
through the kernel op yggc::quant_linear_v1 instead of bf16 weights.

The loaded graph keeps float weights (for eager use) and, in `block_linears` (graphs/block_linears.py), the blocks
each quantized layer streams. While a package is exported, each such layer is swapped for a QuantLinear holding its
blocks laid out once for the kernel (graphs/block_quant.pack_blocks: groups of 16 columns, the file's bytes moved).
The kernel computes every row from that row alone (activations quantized per row, integer dots per block, float
sums in block order), so a verify's rows give the 1-row step's bits and speculative output equals the bundle's own
plain decoding. A tied embedding/LM-head table that streams blocks (a GGUF's token_embd as stored) is held once, as
its blocks: the LM head reads them through the op, and the embedding gathers the rows it needs and dequantizes them
(block_quant.BlockEmbedding: the bits of the float table the loader dequantizes from them, so no float copy is kept);
passes/tied_head.py's bf16 table then does not apply. Drafters stay float (an EAGLE-3 head keeps a float copy of the
embedding: passes/kept_weights.py).
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..artifacts import kernel_ops
from ..bundle.machine import device_kind
from ..bundle.manifest import OptLevel
from ..graphs import block_quant
from ..graphs.block_linears import BlockLinear, block_linears
from ..graphs.block_linears import weights_label as label
from .kernels import kernel_library


class QuantLinear(nn.Module):
    """nn.Linear's forward over block-quantized weights: x [W, in] -> [W, out] in x's dtype (float32 sums, plus the
    bias, rounded once)."""

    def __init__(self, linear: BlockLinear, bias: torch.Tensor | None):
        super().__init__()
        self.packed = nn.Parameter(block_quant.pack_blocks(linear.blocks, linear.fmt), requires_grad=False)
        self.code, self.n = block_quant.FORMAT_CODES[linear.fmt], linear.blocks.shape[0]
        self.bias = bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = kernel_ops.quant_linear(x, self.packed, self.code, self.n)  # [W, out] float32
        return (y if self.bias is None else y + self.bias.float()).to(x.dtype)


def load_blocks(graph: nn.Module, model_dir: Path, weights: str) -> None:
    """Give the loaded `graph` the blocks its linear layers stream for `weights` (a block format, or "file": as the
    checkpoint stores them); "" leaves it float."""
    if weights:
        graph.block_linears = block_linears(model_dir, graph.cfg, weights)


def weights_label(graph: nn.Module, dtype: str) -> str:
    """What the graph's linear layers stream, as manifest.json's extra.weights records it."""
    return label(block_layers(graph), graph.cfg, dtype)


def block_formats(graph: nn.Module) -> dict[str, str]:
    """{layer: block format} of the graph's layers that stream blocks, as manifest.json's extra.block_formats records
    it (what `yggc bench` counts a step's weight bytes from)."""
    return {name: linear.fmt for name, linear in sorted(block_layers(graph).items())}


def block_layers(graph: nn.Module) -> dict[str, BlockLinear]:
    """The graph's layers that stream blocks (set by the loader where the compile asks for a block format)."""
    return getattr(graph, "block_linears", None) or {}


def tied_table(graph: nn.Module) -> bool:
    """Whether graph's LM head is its embedding table (one tensor)."""
    return graph.lm_head.weight is graph.embed.weight


def applies(graph: nn.Module, device: str, opt: OptLevel) -> bool:
    """Whether `graph`'s package reads block-quantized linear layers: O2 on a CPU, where the kernel runs."""
    return opt == OptLevel.O2 and device_kind(device) == "cpu" and bool(block_layers(graph))


@contextmanager
def quantized_layers(graph: nn.Module) -> Iterator[None]:
    """graph's block layers are QuantLinear modules while the context lasts (for an export), and where the LM head's
    blocks are the tied table, the embedding a BlockEmbedding over them."""
    kernel_library.build()
    swapped = {}
    layers = block_layers(graph)
    tied = "lm_head" in layers and tied_table(graph)
    for name, linear in layers.items():
        parent_name, _, leaf = name.rpartition(".")
        parent = graph.get_submodule(parent_name)
        swapped[name] = (parent, leaf, getattr(parent, leaf))
        setattr(parent, leaf, QuantLinear(linear, swapped[name][2].bias))
    if tied:  # the embedding gathers its rows from the head's packed blocks
        swapped["embed"] = (graph, "embed", graph.embed)
        graph.embed = block_quant.BlockEmbedding(graph.lm_head.packed, layers["lm_head"].fmt,
                                                 swapped["embed"][2].weight.dtype)
    try:
        yield
    finally:
        for parent, leaf, original in swapped.values():
            setattr(parent, leaf, original)
