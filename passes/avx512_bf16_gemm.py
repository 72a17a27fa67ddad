"""A bf16 micro-kernel for Inductor's C++ GEMM template on CPUs with AVX512-BF16 but no AMX (e.g. AMD Zen 4).

Without AMX, Inductor's only bf16 choice is its fp32 vector kernel: per k it widens a bf16 slice of the
weights to fp32, converts one activation scalar per row and broadcasts it, then FMAs. Past 4 rows that
kernel is compute-bound far below the machine: SmolLM2's bf16 verifier cost 13 ms at 4 rows, 23 ms at 5
and 45 ms at 8 on Zen 4, so a tree could not pay. VDPBF16PS multiplies bf16 pairs straight from a
VNNI-2 packed weight (k pairs interleaved per column), so each instruction does twice the work of an fp32
FMA with no conversion, and one 32-bit broadcast feeds each row two k steps.

Rows stay batch-invariant: a row's accumulators see the same instruction sequence whatever the row block
(the tail kernels are the same template at fewer rows), and the template never slices K across threads.

Registration adds a config beside Inductor's own (`register`); the template's ranking prefers it because
its register block counts the k pair (block_k = 2), on machines whose vector ISA has AVX512-BF16.
AMX configs still outrank it. Written against torch 2.13's torch/_inductor/codegen/cpp_micro_gemm.py (2.11, the
GPU machine's, is not checked); where that API differs, nothing is registered and Inductor's own kernels are used.
"""
from __future__ import annotations

import functools

import torch

# (block_m, block_n, block_k): Inductor's AVX-512 fp32-vector blockings, with the k pair as block_k.
# 8 x 48 holds 24 fp32 accumulators, 3 weight vectors and the broadcast row in the 32 zmm registers.
BLOCKINGS = ((8, 48, 2), (8, 32, 2), (16, 16, 2))

KERNEL = r"""
template <int64_t ROWS, int64_t N, bool accum>
inline void {{kernel_name}}_kernel(
    const {{input_t}}* {{restrict_keyword}} A,
    const {{input2_t}}* {{restrict_keyword}} B,
    {{output_t}}* {{restrict_keyword}} C,
    int64_t K,
    int64_t lda,
    int64_t ldb,
    int64_t ldc
) {
    // A [ROWS, K] bf16; B [K / 2, N, 2] bf16 (VNNI-2); C [ROWS, N] fp32
    constexpr int COLS = N / 16;
    __m512 vc[ROWS * COLS];
    __m512i va;
    __m512i vb[COLS];
    c10::ForcedUnroll<ROWS * COLS>{}([&](auto i) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        if constexpr (accum) {
            vc[i] = _mm512_loadu_ps(C + row * ldc + col * 16);
        } else {
            vc[i] = _mm512_setzero_ps();
        }
    });
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
    for (int64_t k = 0; k < K; k += 2) {
        c10::ForcedUnroll<ROWS * COLS>{}(compute, k);
    }
    c10::ForcedUnroll<ROWS * COLS>{}([&](auto i) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        _mm512_storeu_ps(C + row * ldc + col * 16, vc[i]);
    });
}
"""

ENTRY = r"""
{{declare_kernel}} {
    {{kernel.assert_function}}(N % {{block_n}} == 0, "N dimension must be multiple of {{block_n}}");
    {{kernel.assert_function}}(K % 2 == 0, "K dimension must be even");
    const int64_t m_tail = M % {{block_m}};
    const int64_t m_main = M - m_tail;
    for (int64_t m = 0; m < m_main; m += {{block_m}}) {
        for (int64_t n = 0; n < N; n += {{block_n}}) {
            {{kernel_name}}_kernel<{{block_m}}, {{block_n}}, accum>(A + m * lda, B + 2 * n, C + m * ldc + n, K, lda, ldb, ldc);
        }
    }
    switch (m_tail) {
    case 0:
        break;
{%- for rows in range(block_m - 1, 0, -1) %}
    case {{rows}}:
        for (int64_t n = 0; n < N; n += {{block_n}}) {
            {{kernel_name}}_kernel<{{rows}}, {{block_n}}, accum>(A + m_main * lda, B + 2 * n, C + m_main * ldc + n, K, lda, ldb, ldc);
        }
        break;
{%- endfor %}
    default:
        {{kernel.assert_function}}(false, "unsupported row tail");
    }
}
"""


def _usable(config, m, n, k, alpha, num_threads, **kwargs) -> bool:
    vec_isa = kwargs.get("vec_isa")
    return (vec_isa is not None and vec_isa.is_avx512_bf16_supported() and not torch.cpu._is_amx_tile_supported()
            and k % 2 == 0 and alpha == 1)


def _micro_gemm_class():
    import torch._inductor.lowering  # noqa: F401 (first: importing cpp_micro_gemm alone is a circular import)
    from torch._inductor.codegen import cpp_micro_gemm as mg
    from torch._inductor.codegen.common import KernelTemplate

    class CppMicroGemmAVX512BF16(mg.CppMicroGemm):
        """bf16 x bf16 -> fp32 with VDPBF16PS on a VNNI-2 packed weight."""

        def codegen_define(self, kernel) -> str:
            options = {"declare_kernel": self.get_kernel_declaration(), "kernel": kernel,
                       "block_m": self.register_blocking.block_m, "block_n": self.register_blocking.block_n,
                       **self.get_common_options()}
            render = KernelTemplate._template_from_string
            return render(KERNEL).render(options) + render(ENTRY).render(options)

        def get_b_layout(self):
            return mg.LayoutType.VNNI2

    configs = mg.generate_gemm_config(mg.VecAVX512, BLOCKINGS, input_dtype=torch.bfloat16,
                                      output_dtype=torch.float, extra_check=_usable)
    return mg, CppMicroGemmAVX512BF16, configs


@functools.cache
def register() -> bool:
    """Add the kernel to Inductor's micro-GEMM choices, once per process. -> whether it is registered."""
    try:
        mg, cls, configs = _micro_gemm_class()
        mg.register_micro_gemm(*configs)(cls)
        return True
    except (ImportError, AttributeError, TypeError):  # another torch's Inductor: keep its own kernels
        return False
