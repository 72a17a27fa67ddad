"""The tied-head kernel op (yggc/artifacts/kernels/tied_head.cpp) and its table layout (passes/tied_head.py):
embedding rows gathered from the packed blocks are the table's rows, the head's logits are the product with
the table, and a row's bits do not depend on how many rows share the call or where the row sits. Both block
widths (16 and 64 columns) on whatever CPU runs the tests: the library takes either."""

import pytest
import torch
from yggc.graphs.packed_table import gather_rows, pack_table
from yggc.passes.kernels import kernel_library

from yggc.artifacts import kernel_ops


@pytest.fixture(scope="module", autouse=True)
def library():
    return kernel_library.build()


def table(vocab: int, hidden: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(vocab, hidden, generator=torch.Generator().manual_seed(seed)).bfloat16()


@pytest.mark.parametrize("columns", [16, 64])
@pytest.mark.parametrize("vocab,hidden", [(307, 64), (320, 2), (16, 576), (1, 8)])
def test_rows_gathered_from_the_blocks_are_the_tables(vocab, hidden, columns):
    t = table(vocab, hidden)
    packed = pack_table(t, columns)
    assert packed.shape == (-(-vocab // columns), hidden // 2, columns, 2)
    assert torch.equal(gather_rows(packed, torch.arange(vocab)), t)
    assert torch.equal(gather_rows(packed, torch.tensor([vocab - 1, 0, vocab - 1])), t[[vocab - 1, 0, vocab - 1]])
    assert packed.reshape(-1).count_nonzero() == t.count_nonzero()  # the padding columns are zeros


@pytest.mark.parametrize("columns", [16, 64])
@pytest.mark.parametrize("vocab,hidden", [(307, 64), (4096, 576), (33, 130), (80, 8)])
def test_logits_are_the_product_with_the_table(vocab, hidden, columns):
    t, x = table(vocab, hidden), table(13, hidden, seed=1)
    logits = kernel_ops.tied_head(x, pack_table(t, columns), vocab)
    assert logits.dtype == torch.float32 and logits.shape == (13, vocab)
    exact = x.double() @ t.double().t()  # bf16 inputs are exact in float64; only fp32 summation errs
    assert ((logits.double() - exact).abs().max() / exact.abs().max()).item() < 1e-5


@pytest.mark.parametrize("columns", [16, 64])
@pytest.mark.parametrize("hidden", [64, 320])  # 320: 160 k pairs, chunks of 72, 72 and 16 where a call takes passes
def test_a_rows_bits_do_not_depend_on_the_call(columns, hidden):
    t = table(307, hidden)
    packed, x = pack_table(t, columns), table(64, hidden, seed=2)
    wide = kernel_ops.tied_head(x, packed, 307)
    for width in (1, 2, 3, 4, 5, 7, 9, 17, 64):  # 1-4 passes of up to 4 rows, split evenly
        for start in {0, 1, 64 - width}:
            part = kernel_ops.tied_head(x[start:start + width], packed, 307)
            assert torch.equal(part, wide[start:start + width]), (width, start)


def test_the_block_widths_give_the_same_logits_on_this_cpu():
    """Same sums in the same order per column, whatever the blocking: a bundle packed for either width decodes
    the same tokens."""
    t, x = table(1000, 64), table(9, 64, seed=3)
    assert torch.equal(kernel_ops.tied_head(x, pack_table(t, 16), 1000), kernel_ops.tied_head(x, pack_table(t, 64), 1000))


def test_bad_operands_say_what_is_wrong():
    with pytest.raises(ValueError, match="blocks of 32 columns"):
        pack_table(table(64, 16), 32)
    packed = pack_table(table(64, 16))
    with pytest.raises(RuntimeError, match="bfloat16 only"):
        kernel_ops.tied_head(torch.zeros(2, 16), packed, 64)
    with pytest.raises(RuntimeError, match="does not match"):
        kernel_ops.tied_head(torch.zeros(2, 18, dtype=torch.bfloat16), packed, 64)
    with pytest.raises(RuntimeError, match="does not match"):
        kernel_ops.tied_head(torch.zeros(2, 16, dtype=torch.bfloat16), packed, 40)  # 3 blocks too many
