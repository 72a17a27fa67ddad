"""A token table [V, H] laid out in the blocks yggc's tied-head kernel reads (VNNI-2 blocks of 16 columns), and the
embedding gather from those blocks: the one layout in which a tied embedding/LM-head table is stored once.

packed[b, p, j, t] = table[16 b + j, 2 p + t]: [ceil(V / 16), H / 2, 16, 2], zero rows past V.
"""
from __future__ import annotations

import torch
from torch import nn

COLUMNS = 16  # table rows (head columns) per block


def pack_table(table: torch.Tensor) -> torch.Tensor:
    """table [V, H] -> the packed blocks [ceil(V / 16), H / 2, 16, 2]."""
    n, k = table.shape
    blocks = -(-n // COLUMNS)
    padded = torch.cat([table, table.new_zeros(blocks * COLUMNS - n, k)])
    return padded.view(blocks, COLUMNS, k // 2, 2).permute(0, 2, 1, 3).contiguous()


def gather_rows(packed: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """ids [W] -> the table's rows [W, H], read from the packed blocks."""
    rows = packed[ids // COLUMNS, :, ids % COLUMNS, :]  # [W, H/2, 2]
    return rows.reshape(ids.shape[0], -1)


class PackedEmbedding(nn.Module):
    """nn.Embedding's forward over a packed table (a Parameter is kept as it is, so modules can share it)."""

    def __init__(self, packed: torch.Tensor):
        super().__init__()
        self.packed = packed if isinstance(packed, nn.Parameter) else nn.Parameter(packed, requires_grad=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return gather_rows(self.packed, ids)
