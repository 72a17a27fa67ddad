"""What yggc's bf16 micro-kernels for Inductor's C++ GEMM template share: the entry that walks row blocks,
and registration beside Inductor's own kernels.

Both kernels (avx512_bf16_gemm, avx2_bf16_gemm) read weights packed VNNI-2 at compile time (k pairs
interleaved per column: B [K / 2, N, 2]) and keep rows batch-invariant: a row's accumulators see the same
instruction sequence whatever the row block (the tail kernels are the same template at fewer rows), and
the template never slices K across threads.

Written against torch 2.13's torch/_inductor/codegen/cpp_micro_gemm.py (2.11, the GPU machine's, is not
checked); where that API differs, nothing is registered and Inductor's own kernels are used.
"""
from __future__ import annotations

from collections.abc import Callable

import jinja2
import torch

from . import prefetch

# A kernel's frame: a template on the row count and the block's columns, over a row block of A, a k-pair
# packed block of B and the fp32 block of C (accum: add to C instead of overwriting it); fp32 accumulators
# vc[ROWS * COLS] of VEC-wide vectors (COLS = N / LANES), loaded or zeroed; the kernel's own k loop; C stored.
# next_B: the weights the next call will read, for a kernel that prefetches them as it goes (or null), next_lines of
# the 64-byte lines of each of their k pairs (from next_B's; a k pair of the block is 2 * N bf16, N / 16 lines).
FRAME_OPEN = r"""
template <int64_t ROWS, int64_t N, bool accum>
inline void {{kernel_name}}_kernel(
    const {{input_t}}* {{restrict_keyword}} A,
    const {{input2_t}}* {{restrict_keyword}} B,
    {{output_t}}* {{restrict_keyword}} C,
    int64_t K,
    int64_t lda,
    int64_t ldb,
    int64_t ldc,
    const {{input2_t}}* next_B,
    int64_t next_lines
) {
    // A [ROWS, K] bf16; B [K / 2, N, 2] bf16 (VNNI-2); C [ROWS, N] fp32
    constexpr int COLS = N / LANES;
    VEC vc[ROWS * COLS];
    c10::ForcedUnroll<ROWS * COLS>{}([&](auto i) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        if constexpr (accum) {
            vc[i] = SIMD_loadu_ps(C + row * ldc + col * LANES);
        } else {
            vc[i] = SIMD_setzero_ps();
        }
    });
"""
FRAME_CLOSE = r"""
    c10::ForcedUnroll<ROWS * COLS>{}([&](auto i) {
        constexpr int row = i / COLS;
        constexpr int col = i % COLS;
        SIMD_storeu_ps(C + row * ldc + col * LANES, vc[i]);
    });
}
"""


def kernel_source(bits: int, k_loop: str) -> str:
    """The Jinja template of a {{kernel_name}}_kernel on `bits`-wide fp32 vectors (256: AVX2, 512: AVX-512)
    whose `k_loop` (its declarations, then the loop over k pairs) accumulates into vc."""
    def fill(frame: str) -> str:
        return frame.replace("SIMD", f"_mm{bits}").replace("VEC", f"__m{bits}").replace("LANES", str(bits // 32))
    return fill(FRAME_OPEN) + k_loop + fill(FRAME_CLOSE)


# The micro-GEMM entry: passes over each column block, each one instantiation of the kernel at its row count.
# Whole blocks of block_m rows, then the tail; or, with even_split, ceil(M / block_m) passes whose row counts differ
# by at most one (9 rows at block_m 10: one pass; 16 rows: 8 + 8, not 10 + 6), so that no pass is a sliver of rows
# re-reading the weights for a fraction of the arithmetic. From prefetch_rows rows in the call (none if unset) a
# kernel is handed the weights the next call reads (next_B), except where that is the next pass over its own; the
# last pass over the last column block is handed the memory after this call's weights: where they are one packed
# block (ldb == block_n), Inductor's template reads that next (its cache blocking gives each call one column block,
# Nc_blocks = 1, in order: the same block's next k chunk, else the next column block).
# chunk_pairs (with even_split and prefetch_rows): where a column block takes two passes, they take it chunk_pairs k
# pairs at a time, each pass prefetching half the lines of the next chunk (after the last, the next block's first)
# and the second reading the chunk from L1 (ENTRY's CHUNKED branch; at three passes or more it measured slower). A chunk
# after the first adds to C what the earlier ones left there, in float: a row's sums run in the same k order as in
# one pass, so its bits do not change. Both branches call the kernel through one switch on the row count
# (call_kernel).
ENTRY = r"""
{%- macro call_kernel(accum) %}
            switch (rows) {  // the kernel instantiated at this pass's row count
{%- for r in range(block_m, 0, -1) %}
            case {{r}}:
                {{kernel_name}}_kernel<{{r}}, {{block_n}}, {{accum}}>(a, b, c, k, lda, ldb, ldc, next_b, lines);
                break;
{%- endfor %}
            default: {{kernel.assert_function}}(false, "unsupported row count");
            }
{%- endmacro %}
{{declare_kernel}} {
    {{kernel.assert_function}}(N % {{block_n}} == 0, "N dimension must be multiple of {{block_n}}");
    {{kernel.assert_function}}(K % 2 == 0, "K dimension must be even");
    const int64_t passes = (M + {{block_m}} - 1) / {{block_m}};
{%- if prefetch_rows %}
    const bool hand_next = M >= {{prefetch_rows}};
{%- else %}
    constexpr bool hand_next = false;
{%- endif %}
    const {{input2_t}}* after = ldb == {{block_n}} ? B + K * ldb : nullptr;  // [K / 2, block_n, 2] ends here
    auto rows_of = [&](int64_t m, int64_t pass) -> int64_t {  // pass `pass`'s rows, m rows before it
{%- if even_split %}
        return (M - m + passes - pass - 1) / (passes - pass);
{%- else %}
        return std::min<int64_t>({{block_m}}, M - m);
{%- endif %}
    };
{%- if chunk_pairs %}
    if (passes == 2) {  // CHUNKED: the two passes over a column block take it chunk_pairs k pairs at a time
        const int64_t step = 2 * {{chunk_pairs}};
        for (int64_t n = 0; n < N; n += {{block_n}}) {
            const {{input2_t}}* next_block = n + {{block_n}} < N ? B + 2 * (n + {{block_n}}) : after;
            for (int64_t k0 = 0; k0 < K; k0 += step) {
                const int64_t k = std::min<int64_t>(step, K - k0);
                const {{input2_t}}* next_chunk = k0 + k < K ? B + 2 * n + (k0 + k) * ldb : next_block;
                for (int64_t pass = 0, m = 0; pass < passes; ++pass) {
                    const int64_t rows = rows_of(m, pass);
                    const {{input_t}}* a = A + m * lda + k0;
                    const {{input2_t}}* b = B + 2 * n + k0 * ldb;
                    {{output_t}}* c = C + m * ldc + n;
                    // each pass prefetches its share of every k pair of the next chunk (a k pair of the block is
                    // 2 * block_n bf16: block_n / 16 lines of 64 bytes), so the stream runs under both passes
                    const int64_t lines = {{block_n}} / 16 / passes;
                    const {{input2_t}}* next_b = next_chunk == nullptr ? nullptr : next_chunk + pass * lines * 32;
                    if (accum || k0 > 0) {
                        {{- call_kernel("true") }}
                    } else {
                        {{- call_kernel("false") }}
                    }
                    m += rows;
                }
            }
        }
        return;
    }
{%- endif %}
    for (int64_t pass = 0, m = 0; pass < passes; ++pass) {
        const int64_t rows = rows_of(m, pass), k = K;
        const {{input_t}}* a = A + m * lda;
        for (int64_t n = 0; n < N; n += {{block_n}}) {
            const {{input2_t}}* b = B + 2 * n;
            {{output_t}}* c = C + m * ldc + n;
            // the weights of the next call, unless it is the next pass over these (in cache by then)
            const {{input2_t}}* next_b = !hand_next ? nullptr : n + {{block_n}} < N ? B + 2 * (n + {{block_n}})
                                       : pass + 1 < passes ? nullptr : after;
            const int64_t lines = {{block_n}} / 16;  // every line of a k pair: 64 bytes per 16 columns
            {{- call_kernel("accum") }}
        }
        m += rows;
    }
}
"""


def render(kernel: str, options: dict, template: Callable = jinja2.Template) -> str:
    """The C++ of `kernel` and its entry (ENTRY) for the Jinja `options` a compile passes (Inductor's template
    engine `template` there; tools/bench_weight_stream.py renders the same source with plain Jinja)."""
    return template(kernel).render(options) + template(ENTRY).render(options)


# extra_check(config, m, n, k, alpha, num_threads, **kwargs) -> whether a config may serve this GEMM
Check = Callable[..., bool]


def register_vnni2_kernel(name: str, kernel: str, isa: str, blockings: tuple, usable: Check,
                          displace: bool = False, even_split: bool = False, prefetch_rows: int | None = None,
                          chunk_pairs: int | None = None, prefetch_hint: str = prefetch.L1) -> bool:
    """Add the bf16 x bf16 -> fp32 micro-kernel `kernel` (a Jinja template defining {{kernel_name}}_kernel)
    to Inductor's choices for the vector ISA class `isa` of torch._inductor.cpu_vec_isa, at `blockings`
    (block_m, block_n, 2), where `usable` accepts. displace: Inductor's own bf16 kernels for that ISA
    decline wherever this one is usable (its ranking prefers larger register blocks, not faster ones).
    even_split: rows in even passes instead of whole blocks and a tail (ENTRY). prefetch_rows: from this many rows
    a call hands its kernels the next call's weights (next_B, ENTRY), for a kernel that prefetches them.
    chunk_pairs (with even_split and prefetch_rows): two passes over a column block take it this many k pairs at
    a time (ENTRY's CHUNKED branch). prefetch_hint: the {{prefetch_hint}} the kernel's prefetches name (prefetch.hint).
    -> whether it is registered; call once per process."""
    try:
        import torch._inductor.lowering  # noqa: F401 (first: importing cpp_micro_gemm alone is a circular import)
        from torch._inductor import cpu_vec_isa
        from torch._inductor.codegen import cpp_micro_gemm as mg
        from torch._inductor.codegen.common import KernelTemplate

        def codegen_define(self, template_kernel) -> str:
            options = {"declare_kernel": self.get_kernel_declaration(), "kernel": template_kernel,
                       "block_m": self.register_blocking.block_m, "block_n": self.register_blocking.block_n,
                       "even_split": even_split, "prefetch_rows": prefetch_rows, "chunk_pairs": chunk_pairs,
                       "prefetch_hint": prefetch_hint,
                       **self.get_common_options()}
            return render(kernel, options, KernelTemplate._template_from_string)

        cls = type(name, (mg.CppMicroGemm,), {"codegen_define": codegen_define,
                                              "get_b_layout": lambda self: mg.LayoutType.VNNI2})
        isa_cls = getattr(cpu_vec_isa, isa)
        configs = mg.generate_gemm_config(isa_cls, blockings, input_dtype=torch.bfloat16,
                                          output_dtype=torch.float, extra_check=usable)
        if displace:
            _displace(mg.micro_gemm_configs, isa_cls, usable)
        mg.register_micro_gemm(*configs)(cls)
        return True
    except (ImportError, AttributeError, TypeError):  # another torch's Inductor: keep its own kernels
        return False


def _displace(registered: dict, isa_cls: type, usable: Check) -> None:
    """Inductor's unconditional bf16 configs for exactly `isa_cls` now decline wherever `usable` accepts."""
    for configs in registered.values():
        for config in configs:
            if (config.vec_isa_cls is isa_cls and config.extra_check is None
                    and config.input_dtype == config.input2_dtype == torch.bfloat16):
                config.extra_check = lambda *args, **kwargs: not usable(*args, **kwargs)
