// A tied LM head over one bf16 table for the compiled CPU graphs: the op yggc::tied_head_v2.
//
// A model whose LM head is its token embedding needs the table twice under Inductor: row-major for the
// embedding gather and repacked into the GEMM template's blocks for the head. This op reads the blocked
// table itself, so the graph gathers its embedding rows from the same constant and the package holds the
// table once. Layout ("VNNI-2 blocks of C", C = 16 or 64): packed [N/C, K/2, C, 2] with packed[b, p, j, t] =
// table[C b + j, 2 p + t]; a 32-bit word holds one column's pair of k. passes/tied_head.py picks C for the
// CPU: 64 where the AVX-512 tile reads a whole block row at once (one memory stream), else 16.
//
// The arithmetic, per CPU the library is built for (-march=native):
// - with AVX512-BF16: VDPBF16PS, one k pair per instruction, in k order, from zero, as the GEMM template's
//   micro-kernel there (passes/kernels/avx512_bf16_gemm.py), whose bits it gives;
// - else the AVX2 micro-kernel's (passes/kernels/avx2_bf16_gemm.py): fp32 FMAs, k then k + 1, in k order, from zero
//   (without AVX2, the same FMAs one lane at a time: the same bits).
// Either way a sum never depends on the row count or on the row's place in the call, so each row's logits are
// bit-identical whatever the width. The logits stay float32, as Inductor's fused epilogue of a bf16 head
// followed by .float() leaves them (no rounding to bf16 in between).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <c10/util/bit_cast.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__AVX2__) && defined(__FMA__) || defined(__AVX512F__) && defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kSub = 16;    // columns per sub-block: one 16-lane vector (two 8-lane ones)
constexpr int64_t kRows = 4;    // rows per register tile
constexpr int64_t kAhead = 32;  // AVX2: pairs prefetched ahead (2 KB), which pays at 1-8 rows on a Zen 3
#if defined(__AVX512F__) && defined(__AVX512BF16__)
// the build names both (passes/kernels/kernel_library.py): a chunk's pair rows (block_rows; 72: 18 KB of a
// 64-column block) and the level its next chunk is prefetched into (L1 where two chunks fit there, else L2)
#if !defined(YGGC_HEAD_CHUNK_PAIRS) || !defined(YGGC_PREFETCH_HINT)
#error "build with kernel_library.compile_command: it defines YGGC_HEAD_CHUNK_PAIRS and YGGC_PREFETCH_HINT"
#endif
constexpr int64_t kChunkPairs = YGGC_HEAD_CHUNK_PAIRS;
#else
constexpr int64_t kChunkPairs = 0;   // no chunks: the AVX2 tiles prefetch within the block (kAhead)
#endif

inline int64_t sub_cols(int64_t cols, int64_t s) { return std::clamp<int64_t>(cols - kSub * s, 0, kSub); }

// Each tile: rows [0, ROWS) of x [.., K] bf16 (pairs of k as 32-bit words, row stride ldx) times one column
// block of the table (`pairs` rows of `row_words` words; its first `cols` columns are real) -> out [.., cols]
// float32 (row stride ldo).
#if defined(__AVX512F__) && defined(__AVX512BF16__)
// CHUNKED: the block's pairs come in chunks (block_rows): from the second (accum) the sums add to what out holds, in
// float, so they still run in k order; next (or null): `lines` 64-byte lines of each of the next chunk's pair rows
// prefetched, one pair row per pair of ours.
template <int ROWS, int NB, bool CHUNKED>  // NB sub-blocks of 16 columns: 4 x 4 = 16 accumulators for 64 columns
inline void tile_of(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t row_words, int64_t pairs, float* out,
                    int64_t ldo, int64_t cols, bool accum, const char* next, int lines) {
  __m512 acc[ROWS][NB];
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NB; ++j)
      acc[r][j] = CHUNKED && accum ? _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << sub_cols(cols, j)) - 1),
                                                           out + r * ldo + j * kSub)
                                   : _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    if constexpr (CHUNKED) {
      for (int l = 0; l < lines; ++l) _mm_prefetch(next + p * row_words * 4 + l * 64, YGGC_PREFETCH_HINT);
    }
    __m512i b[NB];
    for (int j = 0; j < NB; ++j) b[j] = _mm512_loadu_si512(w + p * row_words + j * kSub);
    for (int r = 0; r < ROWS; ++r) {
      const __m512i a = _mm512_set1_epi32(static_cast<int32_t>(x[r * ldx + p]));
      for (int j = 0; j < NB; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], (__m512bh)a, (__m512bh)b[j]);
    }
  }
  for (int r = 0; r < ROWS; ++r)
    for (int j = 0; j < NB; ++j)
      _mm512_mask_storeu_ps(out + r * ldo + j * kSub, static_cast<__mmask16>((1u << sub_cols(cols, j)) - 1), acc[r][j]);
}

template <int ROWS>
inline void tile(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t row_words, int64_t pairs, float* out,
                 int64_t ldo, int64_t cols, bool chunked = false, bool accum = false, const char* next = nullptr,
                 int lines = 0) {
  if (row_words == 64 && chunked) {
    tile_of<ROWS, 4, true>(x, ldx, w, row_words, pairs, out, ldo, cols, accum, next, lines);
  } else if (row_words == 64) {
    tile_of<ROWS, 4, false>(x, ldx, w, row_words, pairs, out, ldo, cols, false, nullptr, 0);
  } else if (chunked) {
    tile_of<ROWS, 1, true>(x, ldx, w, row_words, pairs, out, ldo, cols, accum, next, lines);
  } else {
    tile_of<ROWS, 1, false>(x, ldx, w, row_words, pairs, out, ldo, cols, false, nullptr, 0);
  }
}
#else
inline float low_half(uint32_t pair) { return c10::bit_cast<float>(pair << 16); }        // k even
inline float high_half(uint32_t pair) { return c10::bit_cast<float>(pair & 0xFFFF0000u); }  // k odd

// one sub-block of 16 columns (8 accumulators + 4 weight vectors + 2 broadcasts at 4 rows)
#if defined(__AVX2__) && defined(__FMA__)
template <int ROWS>
inline void sub_tile(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t row_words, int64_t pairs, float* out,
                     int64_t ldo, int64_t cols) {
  const __m256i high = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m256 acc[ROWS][2];
  for (int r = 0; r < ROWS; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(w + (p + kAhead) * row_words), _MM_HINT_T0);
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + p * row_words));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + p * row_words + 8));
    const __m256 even0 = _mm256_castsi256_ps(_mm256_slli_epi32(b0, 16));
    const __m256 odd0 = _mm256_castsi256_ps(_mm256_and_si256(b0, high));
    const __m256 even1 = _mm256_castsi256_ps(_mm256_slli_epi32(b1, 16));
    const __m256 odd1 = _mm256_castsi256_ps(_mm256_and_si256(b1, high));
    for (int r = 0; r < ROWS; ++r) {
      const __m256i a = _mm256_set1_epi32(static_cast<int32_t>(x[r * ldx + p]));
      const __m256 a_even = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
      const __m256 a_odd = _mm256_castsi256_ps(_mm256_and_si256(a, high));
      acc[r][0] = _mm256_fmadd_ps(a_even, even0, acc[r][0]);
      acc[r][0] = _mm256_fmadd_ps(a_odd, odd0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a_even, even1, acc[r][1]);
      acc[r][1] = _mm256_fmadd_ps(a_odd, odd1, acc[r][1]);
    }
  }
  for (int r = 0; r < ROWS; ++r) {
    if (cols == kSub) {
      _mm256_storeu_ps(out + r * ldo, acc[r][0]);
      _mm256_storeu_ps(out + r * ldo + 8, acc[r][1]);
    } else {  // the last columns of a vocabulary that is not a multiple of the block
      alignas(32) float tail[kSub];
      _mm256_store_ps(tail, acc[r][0]);
      _mm256_store_ps(tail + 8, acc[r][1]);
      std::copy(tail, tail + cols, out + r * ldo);
    }
  }
}
#else
template <int ROWS>  // the same FMAs in the same order, one lane at a time: the same bits
inline void sub_tile(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t row_words, int64_t pairs, float* out,
                     int64_t ldo, int64_t cols) {
  for (int r = 0; r < ROWS; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      float acc = 0.f;
      for (int64_t p = 0; p < pairs; ++p) {
        acc = std::fma(low_half(x[r * ldx + p]), low_half(w[p * row_words + j]), acc);
        acc = std::fma(high_half(x[r * ldx + p]), high_half(w[p * row_words + j]), acc);
      }
      out[r * ldo + j] = acc;
    }
  }
}
#endif

template <int ROWS>  // a block, one sub-block of 16 columns after the other; one chunk (kChunkPairs 0)
inline void tile(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t row_words, int64_t pairs, float* out,
                 int64_t ldo, int64_t cols, bool = false, bool = false, const char* = nullptr, int = 0) {
  for (int64_t s = 0; s * kSub < row_words && sub_cols(cols, s) > 0; ++s)
    sub_tile<ROWS>(x, ldx, w + s * kSub, row_words, pairs, out + s * kSub, ldo, sub_cols(cols, s));
}
#endif

// a tile of `rows` (1..kRows) rows
inline void tile_rows(int64_t rows, const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t row_words,
                      int64_t pairs, float* out, int64_t ldo, int64_t cols, bool chunked, bool accum, const char* next,
                      int lines) {
  switch (rows) {
    case 4: tile<4>(x, ldx, w, row_words, pairs, out, ldo, cols, chunked, accum, next, lines); break;
    case 3: tile<3>(x, ldx, w, row_words, pairs, out, ldo, cols, chunked, accum, next, lines); break;
    case 2: tile<2>(x, ldx, w, row_words, pairs, out, ldo, cols, chunked, accum, next, lines); break;
    default: tile<1>(x, ldx, w, row_words, pairs, out, ldo, cols, chunked, accum, next, lines); break;
  }
}

// every row of x [M, K] times one column block (`next`: the block this thread reads after it, or null): passes of
// at most kRows rows, the rows split evenly between them (9 rows: 3 + 3 + 3, not 4 + 4 + 1, whose last pass is 4
// dependent chains). With AVX512-BF16, where there are several passes, the block is taken kChunkPairs pairs at a
// time, every pass over a chunk before the next chunk (all but the first read it from L1), and the passes share out
// the prefetch of the next chunk (after the last, the next block's first) by 64-byte lines of its pair rows, so the
// stream runs under all their arithmetic. A chunk after the first adds to the sums the earlier ones left in out, in
// float: a row's sums still run in k order, the same bits.
void block_rows(const uint32_t* x, int64_t ldx, int64_t M, const uint32_t* w, int64_t row_words, int64_t pairs,
                float* out, int64_t ldo, int64_t cols, const uint32_t* next) {
  const int64_t passes = (M + kRows - 1) / kRows, lines = row_words / 16;  // a pair row's 64-byte lines
  const bool chunked = kChunkPairs > 0 && passes > 1;
  const int64_t step = chunked ? kChunkPairs : pairs;
  for (int64_t p0 = 0; p0 < pairs; p0 += step) {
    const int64_t n = std::min(step, pairs - p0);
    const uint32_t* after = p0 + n < pairs ? w + (p0 + n) * row_words : next;
    for (int64_t pass = 0, m = 0; pass < passes; ++pass) {
      const int64_t rows = (M - m + passes - pass - 1) / (passes - pass);
      const int64_t line = lines * pass / passes, own = chunked ? lines * (pass + 1) / passes - line : 0;
      const char* from = own > 0 && after != nullptr ? reinterpret_cast<const char*>(after) + 64 * line : nullptr;
      tile_rows(rows, x + m * ldx + p0, ldx, w + p0 * row_words, row_words, n, out + m * ldo, ldo, cols, chunked,
                p0 > 0, from, static_cast<int>(from != nullptr ? own : 0));
      m += rows;
    }
  }
}

}  // namespace

namespace yggc {

// the ops yggc::tied_head_v2 and (blocks of 16 only, for packages compiled before v2) tied_head_v1
at::Tensor tied_head(const at::Tensor& x, const at::Tensor& packed, int64_t vocab) {
  // x [M, K] bf16; packed [ceil(vocab / C), K / 2, C, 2] bf16, C = 16 or 64 -> logits [M, vocab] float32
  TORCH_CHECK(x.dim() == 2 && packed.dim() == 4 && (packed.size(2) == 16 || packed.size(2) == 64) && packed.size(3) == 2,
              "tied_head: x must be [M, K] and packed [N/C, K/2, C, 2] with C = 16 or 64");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && packed.scalar_type() == at::kBFloat16,
              "tied_head: bfloat16 only");
  const int64_t C = packed.size(2);
  TORCH_CHECK(packed.size(1) * 2 == x.size(1) && packed.size(0) * C >= vocab && packed.size(0) * C < vocab + C,
              "tied_head: the table's shape does not match x and the vocabulary");
  TORCH_CHECK(packed.is_contiguous(), "tied_head: the packed table must be contiguous");
  const auto xc = x.contiguous();
  const int64_t M = xc.size(0), pairs = packed.size(1), blocks = packed.size(0), ldx = xc.size(1) / 2;
  auto out = at::empty({M, vocab}, x.options().dtype(at::kFloat));
  const auto* xp = reinterpret_cast<const uint32_t*>(xc.const_data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint32_t*>(packed.const_data_ptr<at::BFloat16>());
  float* op = out.mutable_data_ptr<float>();
  at::parallel_for(0, blocks, 256 / C, [&](int64_t begin, int64_t end) {  // 256 columns a grain
    for (int64_t b = begin; b < end; ++b)
      block_rows(xp, ldx, M, wp + b * pairs * C, C, pairs, op + b * C, vocab, std::min(C, vocab - b * C),
                 b + 1 < end ? wp + (b + 1) * pairs * C : nullptr);
  });
  return out;
}

}  // namespace yggc
