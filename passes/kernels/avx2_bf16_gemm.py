"""A bf16 micro-kernel for Inductor's C++ GEMM template on AVX2 CPUs (e.g. AMD Zen 3): fp32 FMAs on bf16
weights packed VNNI-2.

Inductor's AVX2 bf16 kernel widens a bf16 slice of the weights per k (through a partial vector load) and
converts one activation scalar per row and k, so each extra row costs nearly as much as the first and trees
cannot pay. Here one 256-bit load holds
8 columns x a k pair: the even k's fp32 value is the 32-bit lane shifted left by 16, the odd k's is the
lane with its low half cleared. One 32-bit broadcast gives each row its pair the same way. Two FMAs per
accumulator then add k and k + 1 in order, so the sums are exactly the sequential fp32 sums Inductor's own
kernel makes: the same bits, in a fraction of its time from 8 rows (docs/benchmarks/cpu-verify-curve.md).

4 x 16 register blocks: 8 accumulators, the pair of fp32 weight vectors per column and one row's pair fit
AVX2's 16 registers (5 x 16 and 2 x 32 measured slower). Inductor ranks larger register blocks first, so
its own 4 x 24 AVX2 bf16 kernel is displaced wherever this one applies (K even, alpha 1).
"""
from __future__ import annotations

import functools

from . import micro_gemm

BLOCKINGS = ((4, 16, 2),)

KERNEL = micro_gemm.kernel_source(256, r"""
    const __m256i high = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
    __m256 even[COLS];  // the weights at k, fp32
    __m256 odd[COLS];   // the weights at k + 1, fp32
    for (int64_t k = 0; k < K; k += 2) {
        c10::ForcedUnroll<COLS>{}([&](auto col) {
            __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(B + k * ldb + col * 16));
            even[col] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
            odd[col] = _mm256_castsi256_ps(_mm256_and_si256(b, high));
        });
        c10::ForcedUnroll<ROWS>{}([&](auto row) {
            int32_t pair;
            std::memcpy(&pair, A + row * lda + k, sizeof(pair));
            __m256i a = _mm256_set1_epi32(pair);
            __m256 a_even = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
            __m256 a_odd = _mm256_castsi256_ps(_mm256_and_si256(a, high));
            c10::ForcedUnroll<COLS>{}([&](auto col) {
                constexpr int i = row * COLS + col;
                vc[i] = _mm256_fmadd_ps(a_even, even[col], vc[i]);
                vc[i] = _mm256_fmadd_ps(a_odd, odd[col], vc[i]);
            });
        });
    }
""")


def _usable(config, m, n, k, alpha, num_threads, **kwargs) -> bool:
    return k % 2 == 0 and alpha == 1  # the config's ISA class (VecAVX2) already matched the machine's


@functools.cache
def register() -> bool:
    """Add the kernel to Inductor's micro-GEMM choices, once per process. -> whether it is registered."""
    return micro_gemm.register_vnni2_kernel("CppMicroGemmAVX2BF16", KERNEL, "VecAVX2", BLOCKINGS, _usable,
                                            displace=True)
