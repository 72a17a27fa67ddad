// A linear layer over block-quantized weights for the compiled CPU graphs: the op yggc::quant_linear_v1.
//
// The weight [N, K] is ggml's Q8_0, Q4_0 or Q4_1 (graphs/block_quant.py), repacked once at compile time into
// groups of 16 columns (passes/quant_linear.py): packed [ceil(N / 16), K / 32, group bytes] uint8, where a group's
// block holds the 16 columns' fp16 scales d, then (q4_1) their fp16 minimums m, then their quants in 4-byte words,
// word-major: q8_0 [8 quads of k][16 columns][4 int8], q4_0 and q4_1 [4 words][16 columns][4 bytes], word t of a
// column being the file's bytes 4t..4t+3 of that block (low nibbles: k = 4t..4t+3, high ones: k = 16 + 4t..). The
// group holds the file's bytes, moved; columns past N are zero.
//
// The arithmetic is llama.cpp's (activations quantized per row, integer dots per block), in an order that depends
// on nothing but the row itself, so a row's result is the same bits at every width M:
// - each row of x [M, K] (bf16 or float32, read as float32) is quantized per block of 32: d = max|x| / 127, q =
//   x * (1 / d) rounded to the nearest integer, ties to even (0 where d is 0), s = the sum of the block's q;
// - per column and block, the integer dot of the row's q with the block's quants (exact in int32; q4_0's quants
//   taken as q - 8, i.e. dot - 8 s);
// - per column, blocks in k order from zero, in float32: acc = acc + (d_w d_x) * dot, and for q4_1
//   acc = acc + ((d_w d_x) * dot + (m_w d_x) * s).
// The integer dots use AVX512-VNNI (VPDPBUSD) where the CPU has it, else AVX2 (VPMADDUBSW), else scalar code: the
// dots are exact, and the float part is the same operations everywhere, so every build gives the same bits. With VNNI
// a tile of up to 8 rows keeps its dots and sums in registers over all of a group's blocks, each block's quants
// loaded and unpacked once for the tile (tile_rows); the other builds take 4 rows per load of a block (group_rows).
// -> out [M, N] float32.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <c10/util/Half.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kCols = 16;   // columns per group
constexpr int64_t kBlock = 32;  // weights per block
constexpr int64_t kRowTile = 64;  // rows whose sums a thread keeps at once (a width's rows, in tiles)
enum Format : int64_t { kQ8_0 = 0, kQ4_0 = 1, kQ4_1 = 2 };

int64_t scale_bytes(int64_t fmt) { return fmt == kQ4_1 ? 4 * kCols : 2 * kCols; }
int64_t group_bytes(int64_t fmt) { return scale_bytes(fmt) + (fmt == kQ8_0 ? kBlock : kBlock / 2) * kCols; }

// x's rows quantized per block: q [M, K] int8, d and s [M, K / 32]
struct QuantRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> s;
};

template <typename T>
void quantize_row(const T* x, int64_t K, int8_t* q, float* d, int32_t* s) {
  float v[kBlock];
  for (int64_t b = 0; b < K / kBlock; ++b) {
    float amax = 0.f;
    for (int64_t k = 0; k < kBlock; ++k) {
      v[k] = static_cast<float>(x[b * kBlock + k]);
      amax = std::max(amax, std::fabs(v[k]));
    }
    const float scale = amax / 127.f, inv = scale != 0.f ? 1.f / scale : 0.f;
    int32_t sum = 0;
    for (int64_t k = 0; k < kBlock; ++k) {
      const int8_t qk = static_cast<int8_t>(std::nearbyint(v[k] * inv));  // ties to even (the default mode)
      q[b * kBlock + k] = qk;
      sum += qk;
    }
    d[b] = scale;
    s[b] = sum;
  }
}

QuantRows quantize_rows(const at::Tensor& x) {
  const int64_t M = x.size(0), K = x.size(1), nb = K / kBlock;
  QuantRows r{std::vector<int8_t>(M * K), std::vector<float>(M * nb), std::vector<int32_t>(M * nb)};
  at::parallel_for(0, M, 8, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) {
      if (x.scalar_type() == at::kBFloat16)
        quantize_row(x.const_data_ptr<at::BFloat16>() + m * K, K, &r.q[m * K], &r.d[m * nb], &r.s[m * nb]);
      else
        quantize_row(x.const_data_ptr<float>() + m * K, K, &r.q[m * K], &r.d[m * nb], &r.s[m * nb]);
    }
  });
  return r;
}

inline int32_t quad(const int8_t* q) {  // 4 consecutive int8 as one 32-bit word
  int32_t w;
  std::memcpy(&w, q, 4);
  return w;
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define YGGC_VNNI 1
#else
#define YGGC_VNNI 0
#endif
#if !YGGC_VNNI  // AVX2 and scalar builds: a row tile's dots, then its float sums, block by block (group_rows)
// dot[r][j] = sum over the block's 32 k of column j's quant times row r's q[r][k], for R rows at once (one load of
// the quants, R independent chains): q8_0 quants signed, q4 ones the nibbles 0..15. Exact, so any grouping of rows
// gives the same sums.
#if defined(__AVX2__)
inline __m256i dot_words(__m256i u, __m256i s) {  // per 32-bit lane: sum of 4 products u8 * s8 (no saturation here)
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

template <int R>
inline void block_dots(const uint8_t* quants, int64_t fmt, const int8_t* const* q, const int32_t*,
                       int32_t (*dot)[kCols]) {
  for (int h = 0; h < 2; ++h) {  // columns 0..7, then 8..15
    __m256i acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
    if (fmt == kQ8_0) {  // signed by signed: |w| . (q with w's sign); each pair's sum stays within int16
      for (int t = 0; t < 8; ++t) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * t + 32 * h));
        const __m256i wa = _mm256_sign_epi8(w, w);
        for (int r = 0; r < R; ++r)
          acc[r] = _mm256_add_epi32(acc[r], dot_words(wa, _mm256_sign_epi8(_mm256_set1_epi32(quad(q[r] + 4 * t)), w)));
      }
    } else {
      const __m256i low = _mm256_set1_epi8(0x0F);
      for (int t = 0; t < 4; ++t) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quants + 64 * t + 32 * h));
        const __m256i lo = _mm256_and_si256(w, low), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), low);
        for (int r = 0; r < R; ++r) {
          acc[r] = _mm256_add_epi32(acc[r], dot_words(lo, _mm256_set1_epi32(quad(q[r] + 4 * t))));
          acc[r] = _mm256_add_epi32(acc[r], dot_words(hi, _mm256_set1_epi32(quad(q[r] + 16 + 4 * t))));
        }
      }
    }
    for (int r = 0; r < R; ++r) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dot[r] + 8 * h), acc[r]);
  }
}
#else
template <int R>
inline void block_dots(const uint8_t* quants, int64_t fmt, const int8_t* const* q, const int32_t*,
                       int32_t (*dot)[kCols]) {
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < kCols; ++j) {
      int32_t acc = 0;
      if (fmt == kQ8_0) {
        for (int64_t k = 0; k < kBlock; ++k)
          acc += static_cast<int8_t>(quants[(k / 4) * 64 + 4 * j + k % 4]) * q[r][k];
      } else {
        for (int64_t k = 0; k < kBlock / 2; ++k) {
          const uint8_t byte = quants[(k / 4) * 64 + 4 * j + k % 4];
          acc += (byte & 0x0F) * q[r][k] + (byte >> 4) * q[r][16 + k];
        }
      }
      dot[r][j] = acc;
    }
  }
}
#endif

constexpr int64_t kDotRows = 4;  // rows whose dots one load of a block's quants serves

// rows [0, R) of a tile: their dots with one block of a group
inline void tile_dots(int64_t R, const uint8_t* quants, int64_t fmt, const int8_t* const* q, const int32_t* sum,
                      int32_t (*dot)[kCols]) {
  switch (R) {
    case 4: block_dots<4>(quants, fmt, q, sum, dot); break;
    case 3: block_dots<3>(quants, fmt, q, sum, dot); break;
    case 2: block_dots<2>(quants, fmt, q, sum, dot); break;
    default: block_dots<1>(quants, fmt, q, sum, dot); break;
  }
}

// 16 fp16 -> float32 (exact)
inline void widen_halves(const uint8_t* from, float* to) {
#if defined(__AVX512F__)
  _mm512_store_ps(to, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(from))));
#elif defined(__F16C__)
  for (int h = 0; h < 2; ++h)
    _mm256_store_ps(to + 8 * h, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from) + h)));
#else
  const auto* halves = reinterpret_cast<const c10::Half*>(from);
  for (int64_t j = 0; j < kCols; ++j) to[j] = static_cast<float>(halves[j]);
#endif
}

// one row's sums a[16] plus one block: a + (d_w d_x) (dot - 8 s for q4_0), q4_1 a + ((d_w d_x) dot + (m_w d_x) s)
inline void add_block(float* a, const float* dw, const float* mw, float dx, const int32_t* dot, int32_t s,
                      int64_t fmt) {
#if defined(__AVX512F__)  // the same operations as below, 16 lanes at once
  const __m512 vdx = _mm512_set1_ps(dx);
  __m512i d = _mm512_load_si512(dot);
  if (fmt == kQ4_0) d = _mm512_sub_epi32(d, _mm512_set1_epi32(8 * s));
  __m512 t = _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(dw), vdx), _mm512_cvtepi32_ps(d));
  if (fmt == kQ4_1)
    t = _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(_mm512_load_ps(mw), vdx), _mm512_set1_ps(static_cast<float>(s))));
  _mm512_store_ps(a, _mm512_add_ps(_mm512_load_ps(a), t));
#else
  if (fmt == kQ4_1) {
    for (int64_t j = 0; j < kCols; ++j)
      a[j] = a[j] + ((dw[j] * dx) * static_cast<float>(dot[j]) + (mw[j] * dx) * static_cast<float>(s));
  } else {
    const int32_t shift = fmt == kQ4_0 ? 8 * s : 0;
    for (int64_t j = 0; j < kCols; ++j) a[j] = a[j] + (dw[j] * dx) * static_cast<float>(dot[j] - shift);
  }
#endif
}

// the sums of rows [m0, m0 + rows) for one group of columns over every block -> out (cols real columns)
void group_rows(const QuantRows& x, int64_t K, int64_t m0, int64_t rows, const uint8_t* group, int64_t fmt,
                float* out, int64_t ldo, int64_t cols) {
  const int64_t nb = K / kBlock, gb = group_bytes(fmt), sb = scale_bytes(fmt);
  alignas(64) float acc[kRowTile][kCols];
  alignas(64) int32_t dot[kDotRows][kCols];
  const int8_t* q[kDotRows];
  int32_t sums[kDotRows];
  alignas(64) float dw[kCols], mw[kCols];
  for (int64_t r = 0; r < rows; ++r) std::fill(acc[r], acc[r] + kCols, 0.f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + b * gb;
    widen_halves(g, dw);  // exact
    if (fmt == kQ4_1) widen_halves(g + 2 * kCols, mw);
    for (int64_t r0 = 0; r0 < rows; r0 += kDotRows) {
      const int64_t R = std::min(kDotRows, rows - r0);
      for (int64_t i = 0; i < R; ++i) {
        q[i] = &x.q[(m0 + r0 + i) * K + b * kBlock];
        sums[i] = x.s[(m0 + r0 + i) * nb + b];
      }
      tile_dots(R, g + sb, fmt, q, sums, dot);
      for (int64_t i = 0; i < R; ++i)
        add_block(acc[r0 + i], dw, mw, x.d[(m0 + r0 + i) * nb + b], dot[i], sums[i], fmt);
    }
  }
  for (int64_t r = 0; r < rows; ++r) std::copy(acc[r], acc[r] + cols, out + (m0 + r) * ldo);
}
#endif  // !YGGC_VNNI

#if YGGC_VNNI
// AVX512-VNNI, R rows at once over one group of columns, every block: the block's quants are loaded (and q4's nibbles
// split) once for the R rows, and each row's integer dot and float sums stay in registers from the first block to the
// last. The integer dots are exact whatever the order of their adds, and the float operations are add_block's (the
// other builds'), in the same order, so every build gives the same bits, whatever R or the tile a row falls in.
constexpr int kTileRows = 8;  // rows a tile keeps in registers: R int32 dots and R float sums, 16 columns each

template <int64_t F, int R>
void tile_rows(const QuantRows& x, int64_t K, int64_t m0, const uint8_t* group, float* out, int64_t ldo,
               int64_t cols) {
  const int64_t nb = K / kBlock, gb = group_bytes(F), sb = scale_bytes(F);
  const int8_t* q[R];
  const float* dx[R];
  const int32_t* s[R];
  for (int r = 0; r < R; ++r) q[r] = &x.q[(m0 + r) * K], dx[r] = &x.d[(m0 + r) * nb], s[r] = &x.s[(m0 + r) * nb];
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* g = group + b * gb;
    const uint8_t* quants = g + sb;
    __m512i dot[R];
    for (int r = 0; r < R; ++r) dot[r] = _mm512_setzero_si512();
    if constexpr (F == kQ8_0) {  // VPDPBUSD takes unsigned bytes first: (w + 128) . q = w . q + 128 s
      const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int t = 0; t < 8; ++t) {
        const __m512i w = _mm512_xor_si512(_mm512_loadu_si512(quants + 64 * t), flip);
        for (int r = 0; r < R; ++r)
          dot[r] = _mm512_dpbusd_epi32(dot[r], w, _mm512_set1_epi32(quad(q[r] + b * kBlock + 4 * t)));
      }
      for (int r = 0; r < R; ++r) dot[r] = _mm512_sub_epi32(dot[r], _mm512_set1_epi32(128 * s[r][b]));
    } else {
      const __m512i low = _mm512_set1_epi8(0x0F);
      for (int t = 0; t < 4; ++t) {
        const __m512i w = _mm512_loadu_si512(quants + 64 * t);
        const __m512i lo = _mm512_and_si512(w, low), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), low);
        for (int r = 0; r < R; ++r) {
          dot[r] = _mm512_dpbusd_epi32(dot[r], lo, _mm512_set1_epi32(quad(q[r] + b * kBlock + 4 * t)));
          dot[r] = _mm512_dpbusd_epi32(dot[r], hi, _mm512_set1_epi32(quad(q[r] + b * kBlock + 16 + 4 * t)));
        }
      }
      if constexpr (F == kQ4_0)
        for (int r = 0; r < R; ++r) dot[r] = _mm512_sub_epi32(dot[r], _mm512_set1_epi32(8 * s[r][b]));
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));  // exact
    for (int r = 0; r < R; ++r) {  // add_block's operations
      const __m512 vdx = _mm512_set1_ps(dx[r][b]);
      __m512 t = _mm512_mul_ps(_mm512_mul_ps(dw, vdx), _mm512_cvtepi32_ps(dot[r]));
      if constexpr (F == kQ4_1) {
        const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 2 * kCols)));
        t = _mm512_add_ps(t, _mm512_mul_ps(_mm512_mul_ps(mw, vdx), _mm512_set1_ps(static_cast<float>(s[r][b]))));
      }
      acc[r] = _mm512_add_ps(acc[r], t);
    }
  }
  const __mmask16 keep = static_cast<__mmask16>((1u << cols) - 1);
  for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(out + (m0 + r) * ldo, keep, acc[r]);
}

template <int64_t F>
void tile_group(const QuantRows& x, int64_t K, int64_t M, const uint8_t* group, float* out, int64_t ldo,
                int64_t cols) {
  for (int64_t m0 = 0; m0 < M; m0 += kTileRows) {
    switch (std::min<int64_t>(kTileRows, M - m0)) {
      case 8: tile_rows<F, 8>(x, K, m0, group, out, ldo, cols); break;
      case 7: tile_rows<F, 7>(x, K, m0, group, out, ldo, cols); break;
      case 6: tile_rows<F, 6>(x, K, m0, group, out, ldo, cols); break;
      case 5: tile_rows<F, 5>(x, K, m0, group, out, ldo, cols); break;
      case 4: tile_rows<F, 4>(x, K, m0, group, out, ldo, cols); break;
      case 3: tile_rows<F, 3>(x, K, m0, group, out, ldo, cols); break;
      case 2: tile_rows<F, 2>(x, K, m0, group, out, ldo, cols); break;
      default: tile_rows<F, 1>(x, K, m0, group, out, ldo, cols); break;
    }
  }
}

// every row of x over one group of columns -> out (cols real columns)
void group_all_rows(const QuantRows& x, int64_t K, int64_t M, const uint8_t* group, int64_t fmt, float* out,
                    int64_t ldo, int64_t cols) {
  if (fmt == kQ8_0) tile_group<kQ8_0>(x, K, M, group, out, ldo, cols);
  else if (fmt == kQ4_0) tile_group<kQ4_0>(x, K, M, group, out, ldo, cols);
  else tile_group<kQ4_1>(x, K, M, group, out, ldo, cols);
}
#else
void group_all_rows(const QuantRows& x, int64_t K, int64_t M, const uint8_t* group, int64_t fmt, float* out,
                    int64_t ldo, int64_t cols) {
  for (int64_t m0 = 0; m0 < M; m0 += kRowTile)
    group_rows(x, K, m0, std::min(kRowTile, M - m0), group, fmt, out, ldo, cols);
}
#endif

}  // namespace

namespace yggc {

// the op yggc::quant_linear_v1: x [M, K] bf16 or float32; packed [ceil(n / 16), K / 32, group bytes] uint8;
// format 0 q8_0, 1 q4_0, 2 q4_1; n the weight's rows -> out [M, n] float32
at::Tensor quant_linear(const at::Tensor& x, const at::Tensor& packed, int64_t format, int64_t n) {
  TORCH_CHECK(format >= kQ8_0 && format <= kQ4_1, "quant_linear: format must be 0 (q8_0), 1 (q4_0) or 2 (q4_1)");
  TORCH_CHECK(x.dim() == 2 && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat),
              "quant_linear: x must be [M, K] bfloat16 or float32");
  TORCH_CHECK(packed.dim() == 3 && packed.scalar_type() == at::kByte && packed.is_contiguous(),
              "quant_linear: packed must be contiguous uint8 [groups, blocks, group bytes]");
  const int64_t M = x.size(0), K = x.size(1), groups = packed.size(0);
  TORCH_CHECK(K % kBlock == 0 && packed.size(1) == K / kBlock && packed.size(2) == group_bytes(format) &&
              groups * kCols >= n && groups * kCols < n + kCols,
              "quant_linear: the packed weight's shape does not match x, the format and n");
  const auto xc = x.contiguous();
  auto out = at::empty({M, n}, x.options().dtype(at::kFloat));
  if (M == 0 || n == 0) return out;
  const QuantRows rows = quantize_rows(xc);
  const uint8_t* wp = packed.const_data_ptr<uint8_t>();
  float* op = out.mutable_data_ptr<float>();
  const int64_t stride = packed.size(1) * packed.size(2);
  at::parallel_for(0, groups, 4, [&](int64_t begin, int64_t end) {  // 64 columns a grain
    for (int64_t g = begin; g < end; ++g)
      group_all_rows(rows, K, M, wp + g * stride, format, op + g * kCols, n, std::min(kCols, n - g * kCols));
  });
  return out;
}

}  // namespace yggc
