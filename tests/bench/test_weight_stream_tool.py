"""tools/bench_weight_stream.py: its harness runs the compiled micro-kernel and entry (rendered as a compile renders
them), whose sums are right and whose rows keep their bits at every row count, chunked or not; bad rows one line."""
import shutil

import pytest
import torch
from bench_weight_stream import build, check, main, overlap
from yggc.passes.kernels import avx512_bf16_gemm

HAS_KERNEL = (torch.cpu._is_avx512_bf16_supported() and not torch.cpu._is_amx_tile_supported()
              and shutil.which("g++") is not None)


@pytest.mark.skipif(not HAS_KERNEL, reason="needs g++ and a CPU with AVX512-BF16 and without AMX")
@pytest.mark.parametrize("chunk_pairs, hint", [(avx512_bf16_gemm.CHUNK_PAIRS, "_MM_HINT_T0"), (32, "_MM_HINT_T1"),
                                              (0, "_MM_HINT_T1")])
def test_the_rendered_entry_sums_right_and_keeps_rows_invariant(tmp_path, chunk_pairs, hint):
    worst, invariant = check(build(tmp_path / "h", chunk_pairs, hint))
    assert worst == 0.0  # the harness's values make every fp32 partial sum exact
    assert invariant


def test_overlap_reads_hidden_as_one_and_added_as_zero():
    assert overlap(2.0, 1.0, 2.0) == 1.0  # the arithmetic entirely under the stream
    assert overlap(2.0, 1.0, 3.0) == 0.0  # one after the other
    assert overlap(2.0, 3.0, 3.5) == 0.75


def test_rows_past_the_harness_buffers_are_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--rows", "1,17"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "bench_weight_stream: error: argument --rows: rows must be 1..16, got 1,17")
