// A tied LM head over one bf16 table for the compiled CPU graphs: the op yggc::tied_head_v1.
//
// A model whose LM head is its token embedding needs the table twice under Inductor: row-major for the
// embedding gather and repacked into the GEMM template's blocks for the head. This op reads the blocked
// table itself, so the graph gathers its embedding rows from the same constant and the package holds the
// table once. Layout ("VNNI-2 blocks of 16"): packed [N/16, K/2, 16, 2] with packed[b, p, j, t] =
// table[16 b + j, 2 p + t]; a 32-bit word holds one column's pair of k.
//
// The arithmetic is the AVX2 micro-kernel's (passes/avx2_bf16_gemm.py): fp32 FMAs, k then k + 1, in k
// order, from zero; a sum never depends on the row count or on the row's place in the call, so each
// row's logits are bit-identical whatever the width. The logits stay float32, as Inductor's fused epilogue
// of a bf16 head followed by .float() leaves them (no rounding to bf16 in between).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/bit_cast.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kCols = 16;   // columns per block: two 8-lane vectors
constexpr int64_t kRows = 4;    // rows per register block: 8 accumulators + 4 weight vectors + 2 broadcasts
constexpr int64_t kAhead = 32;  // pairs prefetched ahead (2 KB): 5-14% faster at 1-8 rows on Zen 3

inline float low_half(uint32_t pair) { return c10::bit_cast<float>(pair << 16); }        // k even
inline float high_half(uint32_t pair) { return c10::bit_cast<float>(pair & 0xFFFF0000u); }  // k odd

// rows [0, ROWS) of x [.., K] bf16 times one column block [K/2, 16, 2] -> out [.., 16] float32 (row stride ldo)
#if defined(__AVX2__) && defined(__FMA__)
template <int ROWS>
inline void block(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t pairs, float* out,
                  int64_t ldo, int64_t cols) {
  const __m256i high = _mm256_set1_epi32(static_cast<int32_t>(0xFFFF0000u));
  __m256 acc[ROWS][2];
  for (int r = 0; r < ROWS; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    _mm_prefetch(reinterpret_cast<const char*>(w + (p + kAhead) * kCols), _MM_HINT_T0);
    const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + p * kCols));
    const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + p * kCols + 8));
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
    if (cols == kCols) {
      _mm256_storeu_ps(out + r * ldo, acc[r][0]);
      _mm256_storeu_ps(out + r * ldo + 8, acc[r][1]);
    } else {  // the last block of a vocabulary that is not a multiple of 16
      alignas(32) float tail[kCols];
      _mm256_store_ps(tail, acc[r][0]);
      _mm256_store_ps(tail + 8, acc[r][1]);
      std::copy(tail, tail + cols, out + r * ldo);
    }
  }
}
#else
template <int ROWS>  // the same FMAs in the same order, one lane at a time: the same bits
inline void block(const uint32_t* x, int64_t ldx, const uint32_t* w, int64_t pairs, float* out,
                  int64_t ldo, int64_t cols) {
  for (int r = 0; r < ROWS; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      float acc = 0.f;
      for (int64_t p = 0; p < pairs; ++p) {
        acc = std::fma(low_half(x[r * ldx + p]), low_half(w[p * kCols + j]), acc);
        acc = std::fma(high_half(x[r * ldx + p]), high_half(w[p * kCols + j]), acc);
      }
      out[r * ldo + j] = acc;
    }
  }
}
#endif

at::Tensor tied_head(const at::Tensor& x, const at::Tensor& packed, int64_t vocab) {
  // x [M, K] bf16; packed [ceil(vocab / 16), K / 2, 16, 2] bf16 -> logits [M, vocab] float32
  TORCH_CHECK(x.dim() == 2 && packed.dim() == 4 && packed.size(2) == kCols && packed.size(3) == 2,
              "tied_head: x must be [M, K] and packed [N/16, K/2, 16, 2]");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && packed.scalar_type() == at::kBFloat16,
              "tied_head: bfloat16 only");
  TORCH_CHECK(packed.size(1) * 2 == x.size(1) && packed.size(0) * kCols >= vocab && packed.size(0) * kCols < vocab + kCols,
              "tied_head: the table's shape does not match x and the vocabulary");
  TORCH_CHECK(packed.is_contiguous(), "tied_head: the packed table must be contiguous");
  const auto xc = x.contiguous();
  const int64_t M = xc.size(0), pairs = packed.size(1), blocks = packed.size(0), ldx = xc.size(1) / 2;
  auto out = at::empty({M, vocab}, x.options().dtype(at::kFloat));
  const auto* xp = reinterpret_cast<const uint32_t*>(xc.const_data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint32_t*>(packed.const_data_ptr<at::BFloat16>());
  float* op = out.mutable_data_ptr<float>();
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const uint32_t* w = wp + b * pairs * kCols;
      const int64_t cols = std::min(kCols, vocab - b * kCols);
      int64_t m = 0;
      for (; m + kRows <= M; m += kRows) block<kRows>(xp + m * ldx, ldx, w, pairs, op + m * vocab + b * kCols, vocab, cols);
      switch (M - m) {
        case 3: block<3>(xp + m * ldx, ldx, w, pairs, op + m * vocab + b * kCols, vocab, cols); break;
        case 2: block<2>(xp + m * ldx, ldx, w, pairs, op + m * vocab + b * kCols, vocab, cols); break;
        case 1: block<1>(xp + m * ldx, ldx, w, pairs, op + m * vocab + b * kCols, vocab, cols); break;
        default: break;
      }
    }
  });
  return out;
}

}  // namespace

// Versioned like attend_rows_v1: bump with any change to the arithmetic or the layout.
TORCH_LIBRARY_FRAGMENT(yggc, m) {
  m.def("tied_head_v1(Tensor x, Tensor packed, int vocab) -> Tensor");
}

TORCH_LIBRARY_IMPL(yggc, CPU, m) {
  m.impl("tied_head_v1", tied_head);
}
