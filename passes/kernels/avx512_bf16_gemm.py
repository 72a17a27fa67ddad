"""A bf16 micro-kernel for Inductor's C++ GEMM template on CPUs with AVX512-BF16 but no AMX (e.g. AMD Zen 4).

Without AMX, Inductor's only bf16 choice is its fp32 vector kernel: per k it widens a bf16 slice of the
weights to fp32, converts one activation scalar per row and broadcasts it, then FMAs. Past 4 rows that
kernel is compute-bound far below the machine, so a verify of a tree's rows costs several 1-row steps and a
tree cannot pay. VDPBF16PS multiplies bf16 pairs straight from a VNNI-2 packed weight (k pairs interleaved per
column), so each instruction does twice the work of an fp32 FMA with no conversion, and one 32-bit broadcast
feeds each row two k steps.

Register blocking: passes of up to 10 rows over 32 columns (2 weight vectors, 20 accumulators), the rows split
evenly between passes. Inductor's fp32 shape, 8 x 48, leaves 3 accumulators for a 9th row, a pass of dependent
chains that costs as much as a whole 1-row pass; 32 columns keep the 8-row pass as cheap as the 1-row one.

Prefetch: from 11 rows a column block takes two passes, the first streaming its weights from memory, the second
reading them from L1 with the memory idle, so the two add instead of overlapping. The kernel is handed the next
call's weights (micro_gemm's next_B) and prefetches next_lines lines of them per k pair of its own in the last pass
over a block (the only one at <= 10 rows; there a k pair's every line), which keeps the memory busy under the
arithmetic. Below PREFETCH_ROWS rows the hardware's prefetch keeps up and the software one only costs; within the
block's own stream it makes no difference (the hardware's already runs ahead there).

Chunks: at 11-20 rows, where a block takes two passes, they take it CHUNK_PAIRS k pairs at a time (micro_gemm.ENTRY's
CHUNKED branch): the second pass reads from L1 what the first has just streamed, and each pass prefetches half of the
next chunk (one of a k pair's two 64-byte lines per k pair of its own), so the stream runs under both passes'
arithmetic. Same logits. Smaller chunks gained nothing and larger ones less; at three passes or more every chunk
size was slower, so larger calls keep the unchunked passes.

Prefetch level: into L1 where a chunk and the next one fit in L1 together (Zen 5's 48 KB), else into L2 (Zen 4's
32 KB), as prefetch.hint decides: a prefetch into a too-small L1 evicts the lines the kernel reads next.

The measurements behind each choice: docs/benchmarks/cpu-verify-curve.md.

Registration (micro_gemm.register_vnni2_kernel) adds the config beside Inductor's own and makes Inductor's
fp32-vector bf16 configs decline where this one applies (the template ranks larger register blocks first, not
faster ones), on machines whose vector ISA has AVX512-BF16. AMX configs still outrank it. Row invariance: see
micro_gemm.
"""
from __future__ import annotations

import functools

import torch

from . import micro_gemm, prefetch

# (block_m, block_n, block_k), the k pair as block_k: at most 10 rows a pass, 32 columns (see above)
BLOCKINGS = ((10, 32, 2),)
PREFETCH_ROWS = 3  # calls of fewer rows leave the weights to the hardware's prefetch (see above)
CHUNK_PAIRS = 144  # at 11-20 rows the two passes over a column block take it 144 k pairs (18 KB) at a time
CHUNK_BYTES = CHUNK_PAIRS * 2 * BLOCKINGS[0][1] * 2  # a chunk's bf16 k pairs over the block's columns
ENTRY_OPTIONS = {"even_split": True, "prefetch_rows": PREFETCH_ROWS, "chunk_pairs": CHUNK_PAIRS,
                 "prefetch_hint": prefetch.hint(CHUNK_BYTES)}

KERNEL = micro_gemm.kernel_source(512, r"""
    __m512i va;
    __m512i vb[COLS];
    auto compute = [&](auto i, int64_t k) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        if constexpr (col == 0) {
            int32_t pair;
            std::memcpy(&pair, A + row * lda + k, sizeof(pair));
            va = _mm512_set1_epi32(pair);
        }
        if constexpr (row == 0) {
            vb[col] = _mm512_loadu_si512(B + k * ldb + col * 32);
        }
        vc[i] = _mm512_dpbf16_ps(vc[i], (__m512bh)va, (__m512bh)vb[col]);
    };
    if (next_B == nullptr) {
        for (int64_t k = 0; k < K; k += 2) {
            c10::ForcedUnroll<ROWS * COLS>{}(compute, k);
        }
    } else {  // the next call's weights stream in beside this one's arithmetic: a k pair's 64-byte lines per k pair
        const char* next = reinterpret_cast<const char*>(next_B);
        for (int64_t k = 0; k < K; k += 2) {
            // a plain loop: g++ 12 drops a prefetch in ForcedUnroll's lambda
            for (int line = 0; line < next_lines; ++line) {
                _mm_prefetch(next + (k * ldb + line * 32) * 2, {{prefetch_hint}});
            }
            c10::ForcedUnroll<ROWS * COLS>{}(compute, k);
        }
    }
""")


def _usable(config, m, n, k, alpha, num_threads, **kwargs) -> bool:
    vec_isa = kwargs.get("vec_isa")
    return (vec_isa is not None and vec_isa.is_avx512_bf16_supported() and not torch.cpu._is_amx_tile_supported()
            and k % 2 == 0 and alpha == 1)


@functools.cache
def register() -> bool:
    """Add the kernel to Inductor's micro-GEMM choices, once per process. -> whether it is registered."""
    return micro_gemm.register_vnni2_kernel("CppMicroGemmAVX512BF16", KERNEL, "VecAVX512", BLOCKINGS, _usable,
                                            displace=True, **ENTRY_OPTIONS)
