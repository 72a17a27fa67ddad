"""passes/kernels/prefetch.py: the next chunk's prefetch goes to L1 only where it and the chunk being read fit
there, and the GEMM kernel and the tied head's build name the level it picks for this CPU."""
from pathlib import Path

from yggc.passes.kernels import avx512_bf16_gemm, kernel_library, micro_gemm, prefetch


def test_two_chunks_that_fit_l1_prefetch_into_l1_else_into_l2():
    chunk = 18 * 1024
    assert prefetch.hint(chunk, l1d=48 * 1024) == prefetch.L1  # Zen 5: 36 KB of chunks fit
    assert prefetch.hint(chunk, l1d=36 * 1024) == prefetch.L1
    assert prefetch.hint(chunk, l1d=32 * 1024) == prefetch.L2  # Zen 4: they do not
    assert prefetch.hint(chunk, l1d=0) == prefetch.L2  # an unknown cache: no L1 prefetch that may evict


def test_this_cpus_level_follows_its_l1_data_cache():
    assert prefetch.hint(1024) == (prefetch.L1 if prefetch.l1d_bytes() >= 2048 else prefetch.L2)


def test_the_gemm_kernel_prefetches_at_the_level_of_its_chunks():
    assert avx512_bf16_gemm.CHUNK_BYTES == 144 * 32 * 4  # k pairs x columns x a bf16 pair's 4 bytes
    assert avx512_bf16_gemm.ENTRY_OPTIONS["prefetch_hint"] == prefetch.hint(avx512_bf16_gemm.CHUNK_BYTES)
    for level in (prefetch.L1, prefetch.L2):
        options = {"kernel_name": "k", "declare_kernel": "void k()", "kernel": {"assert_function": "CHECK"},
                   "input_t": "uint16_t", "input2_t": "uint16_t", "output_t": "float", "restrict_keyword": "",
                   "block_m": 10, "block_n": 32, **avx512_bf16_gemm.ENTRY_OPTIONS, "prefetch_hint": level}
        source = micro_gemm.render(avx512_bf16_gemm.KERNEL, options)
        assert f"_mm_prefetch(next + (k * ldb + line * 32) * 2, {level});" in source


def test_the_tied_head_is_built_prefetching_at_the_level_of_its_chunks():
    command = kernel_library.compile_command((), Path("out.so"))
    assert f"-DYGGC_PREFETCH_HINT={prefetch.hint(kernel_library.HEAD_CHUNK_BYTES)}" in command
    assert f"-DYGGC_HEAD_CHUNK_PAIRS={kernel_library.HEAD_CHUNK_PAIRS}" in command  # the chunk the hint is for
