// Attention scores with VDPBF16PS for bf16 caches on CPUs with AVX512-BF16 (attend_rows.cpp calls them there).
//
// Slots sit in the vector lanes: a block of 16 slots' keys is loaded as rows of bf16 pairs (32-bit) and transposed,
// so vector j holds pair j of head_dim for the 16 slots. Each score lane then takes the pairs in order, from zero,
// one VDPBF16PS a pair, and is scaled after the last: the same sequence for every slot in whichever lane, block or
// call, so a row's scores do not depend on the row count or on where its keys sit. A block is loaded and transposed
// once for all the row-heads scored together: every row and query head of the call that reads its key/value head
// (pair_scores), or those of a unit's rows (pair_scores_rows).
#if defined(__AVX512BF16__)
#include <c10/util/BFloat16.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstring>

namespace {

constexpr int64_t kSlots = 16;  // slots per block: one 32-bit lane each
// Row-heads whose accumulators stay in registers: 12 independent VDPBF16PS chains keep two a cycle going at their
// latency. The transposed key vectors are read back from L1 one at a time (keys_t below), not held in 16 registers,
// which left too few for 12 accumulators (one spilled, its chain through a store and a load). Against 8 row-heads
// beside 16 key registers this is faster at 8-16 rows; 16 row-heads were alike and 24 slower (spills again).
// tools/bench_attention_op.py times the op alone (docs/benchmarks/cpu-verify-curve.md).
constexpr int64_t kRows = 12;
constexpr int64_t kAheadBlocks = 2;  // how far ahead score_block prefetches keys (2 blocks of a 64-dim head: 4 KB)

void transpose_16x16_epi32(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // r[4j + m] now holds column 4k + m of rows 4j..4j+3 in its 128-bit block k: transpose the blocks per m
  for (int m = 0; m < 4; ++m) {
    const __m512i u0 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0x44), u1 = _mm512_shuffle_i32x4(r[m], r[4 + m], 0xEE);
    const __m512i u2 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0x44);
    const __m512i u3 = _mm512_shuffle_i32x4(r[8 + m], r[12 + m], 0xEE);
    t[m] = _mm512_shuffle_i32x4(u0, u2, 0x88);
    t[4 + m] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
    t[8 + m] = _mm512_shuffle_i32x4(u1, u3, 0x88);
    t[12 + m] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// R row-heads' scores in one block: pairs c..c+15 of head_dim (r, transposed) added to what pairs 0..c-1 left in
// `scores` (R rows, `sp` apart); the last pairs scale them.
template <int R>
__attribute__((always_inline)) inline void dot_block(const __m512i* r, const int32_t* pairs, int64_t n_pairs,
                                                     int64_t c, float* scores, int64_t sp, __m512 scale) {
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = c == 0 ? _mm512_setzero_ps() : _mm512_loadu_ps(scores + i * sp);
  for (int j = 0; j < 16; ++j) {
    const __m512i key = _mm512_load_si512(r + j);
    for (int i = 0; i < R; ++i)
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(pairs[i * n_pairs + c + j]), (__m512bh)key);
  }
  const bool last = c + 16 == n_pairs;
  for (int i = 0; i < R; ++i) _mm512_storeu_ps(scores + i * sp, last ? _mm512_mul_ps(acc[i], scale) : acc[i]);
}

// dot_block for the last `rest` (< kRows) row-heads, unrolled for their count
template <int R>
void dot_rest(const __m512i* r, const int32_t* pairs, int64_t n_pairs, int64_t c, float* scores, int64_t sp,
              __m512 scale, int64_t rest) {
  if constexpr (R > 0) {
    if (rest == R) return dot_block<R>(r, pairs, n_pairs, c, scores, sp, scale);
    dot_rest<R - 1>(r, pairs, n_pairs, c, scores, sp, scale, rest);
  }
}

// R row-heads' scores (pairs [R, hd / 2]) at slots s0..s0+15 of one key/value head's keys, into scores (R rows,
// `sp` apart, from slot s0)
void score_block(const at::BFloat16* keys, int64_t slot_stride, int64_t S, int64_t s0, int64_t hd,
                 const int32_t* pairs, int64_t R, float* scores, int64_t sp) {
  const int64_t n_pairs = hd / 2;  // hd: a multiple of 32
  const __m512 scale = _mm512_set1_ps(1.f / std::sqrt(static_cast<float>(hd)));
  // the keys kAheadBlocks blocks on, into L1: at a decode step's few row-heads a block's arithmetic is short and its
  // 16 slots' loads would otherwise wait on memory one block at a time (no effect on the sums)
  const int64_t ahead = s0 + kAheadBlocks * kSlots;
  for (int64_t l = 0; l < kSlots && ahead + l < S; ++l)
    for (int64_t d = 0; d < hd; d += 32)
      _mm_prefetch(reinterpret_cast<const char*>(keys + (ahead + l) * slot_stride + d), _MM_HINT_T0);
  for (int64_t c = 0; c < n_pairs; c += 16) {
    __m512i r[16];
    for (int64_t l = 0; l < kSlots; ++l)  // lanes past S repeat the last slot
      r[l] = _mm512_loadu_si512(keys + std::min(s0 + l, S - 1) * slot_stride + 2 * c);
    transpose_16x16_epi32(r);
    alignas(64) __m512i keys_t[16];  // the block transposed, read back a vector at a time (kRows)
    for (int64_t l = 0; l < kSlots; ++l) _mm512_store_si512(keys_t + l, r[l]);
    asm volatile("" ::: "memory");  // so the compiler reloads them rather than keep all 16 in registers
    int64_t i = 0;
    for (; i + kRows <= R; i += kRows)
      dot_block<kRows>(keys_t, pairs + i * n_pairs, n_pairs, c, scores + i * sp, sp, scale);
    dot_rest<kRows - 1>(keys_t, pairs + i * n_pairs, n_pairs, c, scores + i * sp, sp, scale, R - i);
  }
}

}  // namespace

namespace yggc {

// q [H, W, hd] bf16 (any strides) -> pairs: head_dim's bf16 pairs as 32-bit VDPBF16PS operands, hd / 2 per row-head,
// the row-heads in [H / G, W, G] order (query head h = kv * G + g): G = 1 lays them out as q, [H, W]; G = the query
// heads per key/value head puts each row's heads of one key/value head side by side.
void query_pairs(const at::BFloat16* q, int64_t H, int64_t W, int64_t hd, int64_t qh, int64_t qw, int64_t qd,
                 int64_t G, int32_t* pairs) {
  for (int64_t h = 0; h < H; ++h)
    for (int64_t w = 0; w < W; ++w) {
      int32_t* to = pairs + ((h / G * W + w) * G + h % G) * hd / 2;
      if (qd == 1) {  // a row's pairs lie in memory as they are
        std::memcpy(to, q + h * qh + w * qw, hd * sizeof(at::BFloat16));
        continue;
      }
      for (int64_t d = 0; d < hd; d += 2) {
        uint16_t lo, hi;
        std::memcpy(&lo, q + h * qh + w * qw + d * qd, 2);
        std::memcpy(&hi, q + h * qh + w * qw + (d + 1) * qd, 2);
        to[d / 2] = static_cast<int32_t>(lo | static_cast<uint32_t>(hi) << 16);
      }
    }
}

// scores [R, sp]: R row-heads' (pairs [R, hd / 2]) scaled scores at every slot < S of one key/value head's keys (sp
// >= S rounded up to 16), on the calling thread
void pair_scores_rows(const at::BFloat16* keys, int64_t slot_stride, int64_t S, int64_t hd, const int32_t* pairs,
                      int64_t R, float* scores, int64_t sp) {
  for (int64_t s0 = 0; s0 < S; s0 += kSlots) score_block(keys, slot_stride, S, s0, hd, pairs, R, scores + s0, sp);
}

// scores [KV * per_kv, sp]: row-head r's scaled score at every slot < S (sp >= S rounded up to 16), r = the key/value
// head's per_kv row-heads in pairs' order, blocks of slots shared out between the threads. A row reads only its
// visible slots' scores; the rest are never read. values_f, unless null: the values [KV, S, hd] widened to float
// (exactly), block by block beside the scores.
void pair_scores(const at::BFloat16* keys, int64_t keys_kv_stride, const at::BFloat16* values, int64_t values_kv_stride,
                 int64_t slot_stride, int64_t KV, int64_t S, int64_t hd, const int32_t* pairs, int64_t per_kv,
                 float* scores, int64_t sp, float* values_f) {
  const int64_t blocks = (S + kSlots - 1) / kSlots;
  at::parallel_for(0, KV * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t kv = task / blocks, s0 = task % blocks * kSlots;
      score_block(keys + kv * keys_kv_stride, slot_stride, S, s0, hd, pairs + kv * per_kv * hd / 2, per_kv,
                  scores + kv * per_kv * sp + s0, sp);
      if (values_f == nullptr) continue;
      for (int64_t s = s0; s < std::min(s0 + kSlots, S); ++s) {
        const at::BFloat16* v = values + kv * values_kv_stride + s * slot_stride;
        for (int64_t d = 0; d < hd; d += 16)
          _mm512_storeu_ps(values_f + (kv * S + s) * hd + d,
                           _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + d))), 16)));
      }
    }
  });
}

}  // namespace yggc
#endif
