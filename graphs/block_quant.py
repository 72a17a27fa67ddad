"""ggml's block-quantized weight formats as yggc keeps them: Q8_0, Q4_0 and Q4_1 tensors stored as their raw blocks.

A weight [N, K] in one of these formats is a uint8 tensor [N, K / 32 * bytes] (row n's blocks side by side, each
block 32 consecutive k of that row), byte for byte as a GGUF file stores it (ggml-common.h's block_q8_0, block_q4_0,
block_q4_1):

- q8_0 (34 bytes): fp16 scale d, 32 int8 q; w = d q
- q4_0 (18 bytes): fp16 d, 16 bytes of nibbles (k 0..15 the low nibbles, k 16..31 the high ones); w = d (q - 8)
- q4_1 (20 bytes): fp16 d, fp16 minimum m, 16 bytes of nibbles as q4_0's; w = d q + m

Block tensors travel in safetensors files like any other weight; the file's metadata key FORMATS_KEY holds a JSON
object naming each one's format ({tensor name: "q8_0"}), so a checkpoint folder says what its uint8 tensors are.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import torch

BLOCK = 32  # weights per block, along a row (k)
FORMATS_KEY = "yggc.block_formats"  # safetensors metadata: JSON {tensor name: format name}


@dataclass(frozen=True)
class BlockFormat:
    name: str          # "q8_0", "q4_0", "q4_1"
    block_bytes: int   # bytes per block of BLOCK weights
    ggml_type: str     # gguf.GGMLQuantizationType's name


FORMATS = {f.name: f for f in (BlockFormat("q8_0", 34, "Q8_0"), BlockFormat("q4_0", 18, "Q4_0"),
                               BlockFormat("q4_1", 20, "Q4_1"))}
BY_GGML_TYPE = {f.ggml_type: f for f in FORMATS.values()}


def block_shape(fmt: str, rows: int, cols: int) -> tuple[int, int]:
    """The uint8 shape [rows, cols / 32 * bytes] of a [rows, cols] weight stored as `fmt` (cols a multiple of 32)."""
    assert cols % BLOCK == 0, f"{cols} columns do not split into blocks of {BLOCK}"
    return rows, cols // BLOCK * FORMATS[fmt].block_bytes


def _halves(raw: torch.Tensor, at: int) -> torch.Tensor:
    """The fp16 at byte `at` of every block, as float32: raw [..., bytes] uint8 -> [..., 1]."""
    return raw[..., at:at + 2].contiguous().view(torch.float16).float()


def _nibbles(qs: torch.Tensor) -> torch.Tensor:
    """qs [..., 16] uint8 -> the 32 values [..., 32] float32: the low nibbles (k 0..15), then the high ones."""
    return torch.cat((qs & 0x0F, qs >> 4), dim=-1).float()


def dequantize(blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """blocks [N, K / 32 * bytes] uint8 -> the weight [N, K] float32, in ggml's arithmetic (ggml_dequantize_row_*):
    every value exact but q4_1's d q + m, rounded once in float32."""
    spec = FORMATS[fmt]
    n = blocks.shape[0]
    raw = blocks.reshape(n, -1, spec.block_bytes)  # [N, K/32, bytes]
    d = _halves(raw, 0)
    if fmt == "q8_0":
        w = d * raw[..., 2:].contiguous().view(torch.int8).float()
    elif fmt == "q4_0":
        w = d * (_nibbles(raw[..., 2:]) - 8)
    else:
        w = d * _nibbles(raw[..., 4:]) + _halves(raw, 2)
    return w.reshape(n, -1)


def formats_metadata(formats: dict[str, str]) -> dict[str, str]:
    """{tensor name: format} -> the safetensors metadata entry that records it (empty when there are none)."""
    return {FORMATS_KEY: json.dumps(formats, sort_keys=True)} if formats else {}


def read_formats(metadata: dict[str, str] | None, where: str) -> dict[str, str]:
    """A safetensors file's metadata -> {tensor name: format} of its block tensors; an unknown format raises
    ValueError naming it."""
    formats = json.loads((metadata or {}).get(FORMATS_KEY, "{}"))
    for name, fmt in formats.items():
        if fmt not in FORMATS:
            raise ValueError(f"{where}: tensor {name} is stored as {fmt!r}, which this yggc does not read "
                             f"(it reads {', '.join(FORMATS)}); upgrade yggc or re-import the model")
    return formats


FORMAT_CODES = {"q8_0": 0, "q4_0": 1, "q4_1": 2}  # the kernel op's `format` argument
GROUP = 16  # columns (weight rows) per group of the kernel's layout


def pack_blocks(blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """blocks [N, K / 32 * bytes] uint8 -> the kernel's layout [ceil(N / 16), K / 32, 16 * bytes] uint8
    (yggc/artifacts/kernels/quant_linear.cpp): per group of 16 columns and block, their fp16 scales d, (q4_1) their
    minimums m, then their quants word-major ([word][column][4 bytes]); columns past N zero."""
    size = FORMATS[fmt].block_bytes
    n, nb = blocks.shape[0], blocks.shape[1] // size
    groups = -(-n // GROUP)
    raw = torch.cat([blocks, blocks.new_zeros(groups * GROUP - n, blocks.shape[1])])
    raw = raw.view(groups, GROUP, nb, size).transpose(1, 2)  # [G, nb, 16, bytes]
    head = 4 if fmt == "q4_1" else 2
    scales = [raw[..., i:i + 2] for i in range(0, head, 2)]  # [G, nb, 16, 2] each: d, then m
    quants = raw[..., head:].unflatten(-1, (-1, 4)).transpose(2, 3)  # [G, nb, words, 16, 4]
    return torch.cat([*(s.flatten(2) for s in scales), quants.flatten(2)], dim=-1).contiguous()


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (q [M, K / 32, 32] int32 in -127..127, d [M, K / 32] float32): per block of 32, d = max|x| / 127
    and q = x (1 / d) rounded to nearest, ties to even (0 where d is 0): the kernel's activation quantization."""
    v = x.float().unflatten(-1, (-1, BLOCK))
    d = v.abs().amax(-1) / 127
    inv = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    return torch.round(v * inv[..., None]).to(torch.int32), d


def block_matmul(x: torch.Tensor, blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    """x [M, K] times the weight `blocks` [N, K / 32 * bytes] stored as `fmt`, transposed -> [M, N] float32, in the
    kernel's arithmetic (quant_linear.cpp): integer dots of the quantized rows with each block, then per column, blocks
    in k order from zero, acc + (d_w d_x) dot (q4_1: acc + ((d_w d_x) dot + (m_w d_x) s)). The kernel's reference."""
    spec = FORMATS[fmt]
    q, dx = quantize_rows(x)  # [M, nb, 32], [M, nb]
    raw = blocks.reshape(blocks.shape[0], -1, spec.block_bytes)  # [N, nb, bytes]
    dw = _halves(raw, 0)[..., 0]  # [N, nb]
    if fmt == "q8_0":
        wq = raw[..., 2:].contiguous().view(torch.int8).to(torch.int32)
    else:
        wq = torch.cat((raw[..., -16:] & 0x0F, raw[..., -16:] >> 4), -1).to(torch.int32) - (8 if fmt == "q4_0" else 0)
    dot = torch.einsum("mbk,nbk->mnb", q.double(), wq.double()).to(torch.int32)  # exact: |dot| < 2^20
    s = q.sum(-1)  # [M, nb]
    acc = torch.zeros(x.shape[0], blocks.shape[0])
    for b in range(raw.shape[1]):
        scale = dw[None, :, b] * dx[:, None, b]
        term = scale * dot[..., b].float()
        if fmt == "q4_1":
            term = term + (_halves(raw, 2)[None, :, b, 0] * dx[:, None, b]) * s[:, None, b].float()
        acc = acc + term
    return acc


def unpack_index(fmt: str) -> torch.Tensor:
    """[16, bytes] int64: where pack_blocks put byte i of column j's block, within its group's block."""
    size = FORMATS[fmt].block_bytes
    where = pack_blocks(torch.arange(GROUP * size).view(GROUP, size), fmt).flatten()  # position -> j * size + i
    index = torch.empty_like(where)
    index[where] = torch.arange(where.numel())
    return index.view(GROUP, size)


def gathered_rows(packed: torch.Tensor, index: torch.Tensor, fmt: str, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` [W] of the weight packed by pack_blocks (packed [G, K / 32, 16 * bytes], index: unpack_index(fmt))
    -> [W, K] float32, in dequantize's arithmetic. The fp16 scales are reassembled from int16 words (no bitcast between
    sizes, which a compiled graph may not lower)."""
    grouped = packed[ids // GROUP].to(torch.int32)  # [W, K/32, 16 * bytes]
    pick = index[ids % GROUP][:, None, :].expand(-1, grouped.shape[1], -1)
    raw = torch.gather(grouped, -1, pick)  # [W, K/32, bytes]: the file's blocks of the rows

    def half(at: int) -> torch.Tensor:  # [W, K/32, 1]: the little-endian fp16 at byte `at`
        word = raw[..., at:at + 1] + 256 * raw[..., at + 1:at + 2]
        return torch.where(word > 32767, word - 65536, word).to(torch.int16).view(torch.float16).float()

    if fmt == "q8_0":
        q = raw[..., 2:]
        w = half(0) * torch.where(q > 127, q - 256, q).float()
    else:
        qs = raw[..., -16:]
        q = torch.cat((qs & 0x0F, qs >> 4), dim=-1).float()
        w = half(0) * (q - 8) if fmt == "q4_0" else half(0) * q + half(2)
    return w.flatten(-2)


class BlockEmbedding(torch.nn.Module):
    """nn.Embedding's forward over a table packed by pack_blocks (the tensor the LM head's op reads: one copy): the
    rows asked for, dequantized, in `dtype` (the bits of the float table the loader dequantizes from the same
    blocks)."""

    def __init__(self, packed: torch.Tensor, fmt: str, dtype: torch.dtype):
        super().__init__()
        self.packed, self.fmt, self.dtype = packed, fmt, dtype
        self.register_buffer("index", unpack_index(fmt), persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return gathered_rows(self.packed, self.index, self.fmt, ids).to(self.dtype)
