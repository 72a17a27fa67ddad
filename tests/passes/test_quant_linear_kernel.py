"""The quantized linear op (yggc/artifacts/kernels/quant_linear.cpp) over ggml's Q8_0/Q4_0/Q4_1 blocks laid out
by graphs/block_quant.pack_blocks: it equals the documented arithmetic (block_quant.block_matmul: activations
quantized per row, integer dots per block, float32 sums in block order) bit for bit, and a row's bits do not depend
on how many rows share the call or where the row sits."""

import gguf
import numpy as np
import pytest
import torch
from yggc.graphs import block_quant
from yggc.passes.kernels import kernel_library

from yggc.artifacts import kernel_ops

FORMATS = {"q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0,
           "q4_1": gguf.GGMLQuantizationType.Q4_1}


@pytest.fixture(scope="module", autouse=True)
def library():
    return kernel_library.build()


def weight_blocks(fmt: str, n: int, k: int, seed: int) -> torch.Tensor:
    """A random [n, k] weight quantized by the gguf package (ggml's own rounding) -> its blocks uint8."""
    w = np.random.default_rng(seed).normal(0, 0.05, (n, k)).astype(np.float32)
    return torch.from_numpy(gguf.quants.quantize(w, FORMATS[fmt]).copy())


def run(x: torch.Tensor, blocks: torch.Tensor, fmt: str) -> torch.Tensor:
    packed = block_quant.pack_blocks(blocks, fmt)
    return kernel_ops.quant_linear(x, packed, block_quant.FORMAT_CODES[fmt], blocks.shape[0])


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("n,k", [(40, 96), (16, 32), (1, 64), (576, 576)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_equals_the_reference_bit_for_bit(fmt, n, k, dtype):
    blocks = weight_blocks(fmt, n, k, seed=n + k)
    x = torch.randn(9, k, generator=torch.Generator().manual_seed(k)).to(dtype)
    x[3, :32] = 0  # a block of zeros: scale 0
    got = run(x, blocks, fmt)
    assert got.dtype == torch.float32 and got.shape == (9, n)
    want = block_quant.block_matmul(x, blocks, fmt)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    exact = x.double() @ block_quant.dequantize(blocks, fmt).double().t()  # only the activation rounding errs
    assert (got.double() - exact).abs().max() < 0.02 * exact.abs().max() + 1e-6


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_raw_blocks_of_any_bytes(fmt):
    """Quants the gguf quantizer never writes (q8_0's -128, any nibble) and arbitrary finite scales."""
    rng = np.random.default_rng(7)
    size = block_quant.FORMATS[fmt].block_bytes
    raw = rng.integers(0, 256, (37, 3, size), dtype=np.uint8)
    heads = 2 if fmt == "q4_1" else 1
    raw[..., :2 * heads] = rng.normal(0, 0.1, (37, 3, heads)).astype(np.float16).view(np.uint8)
    if fmt == "q8_0":
        raw[0, 0, 2:] = 0x80  # -128 everywhere
    blocks = torch.from_numpy(raw.reshape(37, -1))
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(1)).bfloat16()
    x[1] = 127.0 * torch.sign(x[1])  # every quant at +-127
    assert torch.equal(run(x, blocks, fmt).view(torch.int32), block_quant.block_matmul(x, blocks, fmt).view(torch.int32))


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("threads", [1, 2])
def test_a_rows_bits_do_not_depend_on_the_width(fmt, threads):
    blocks = weight_blocks(fmt, 200, 128, seed=3)
    x = torch.randn(70, 128, generator=torch.Generator().manual_seed(5)).bfloat16()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        full = run(x, blocks, fmt)
        for width in range(1, 71):
            assert torch.equal(run(x[:width], blocks, fmt), full[:width]), width
        order = torch.randperm(70, generator=torch.Generator().manual_seed(0))
        assert torch.equal(run(x[order], blocks, fmt), full[order])  # wherever the row sits
    finally:
        torch.set_num_threads(before)


def test_packed_layout_moves_the_files_bytes():
    blocks = weight_blocks("q4_1", 20, 64, seed=9)
    packed = block_quant.pack_blocks(blocks, "q4_1")
    assert packed.shape == (2, 2, 16 * 20)
    assert packed[1, :, 4 * 16:].flatten().numel() == 2 * 256
    assert packed.sum(dtype=torch.int64) == blocks.sum(dtype=torch.int64)  # every byte once, the padding zeros
    assert torch.equal(packed[0, 1, :2], blocks[0, 20:22])  # column 0's d of block 1 first
