"""A token table [V, H] laid out in the blocks yggc's tied-head kernel reads (VNNI-2 blocks of C columns), and the
embedding gather from those blocks: the one layout in which a tied embedding/LM-head table is stored once.

packed[b, p, j, t] = table[C b + j, 2 p + t]: [ceil(V / C), H / 2, C, 2], zero rows past V; C = 16 or 64 (the
compile picks it for the CPU's kernel; the gather reads it off the packed shape).
"""
from __future__ import annotations

import torch
from torch import nn

BLOCK_COLUMNS = (16, 64)  # table rows (head columns) per block that the kernel reads


def pack_table(table: torch.Tensor, columns: int = 16) -> torch.Tensor:
    """table [V, H] -> the packed blocks [ceil(V / C), H / 2, C, 2] of C = `columns`."""
    if columns not in BLOCK_COLUMNS:
        raise ValueError(f"blocks of {columns} columns; the kernel reads {BLOCK_COLUMNS}")
    n, k = table.shape
    blocks = -(-n // columns)
    padded = torch.cat([table, table.new_zeros(blocks * columns - n, k)])
    return padded.view(blocks, columns, k // 2, 2).permute(0, 2, 1, 3).contiguous()


def gather_rows(packed: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """ids [W] -> the table's rows [W, H], read from the packed blocks."""
    columns = packed.shape[2]
    rows = packed[ids // columns, :, ids % columns, :]  # [W, H/2, 2]
    return rows.reshape(ids.shape[0], -1)


class PackedEmbedding(nn.Module):
    """nn.Embedding's forward over a packed table (a Parameter is kept as it is, so modules can share it)."""

    def __init__(self, packed: torch.Tensor):
        super().__init__()
        self.packed = packed if isinstance(packed, nn.Parameter) else nn.Parameter(packed, requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return gather_rows(self.packed, ids)
