// Masked GQA attention for the compiled CPU graphs: the op yggc::attend_rows_v3.
//
// A task is one query row and up to kHeads query heads that share a key/value head (they share the row's
// mask and every key and value load). Every sum over cache slots runs in slot order over the row's visible slots
// only; every per-slot operation is the same instruction sequence whichever slot or lane it lands on. So a row's
// result is bit-identical whatever the number of rows in the call and wherever its visible keys sit in the cache:
// the tree-verify and the autoregressive layouts of the same keys give the same bits.
//
// bf16 on a CPU with AVX512-BF16 (head_dim a multiple of 32), v3 (attend_units): one parallel region of units, a
// key/value head and a run of rows each. A unit scores its rows' query heads at every slot with pair_scores.cpp
// (slots in the lanes, keys loaded once for all its rows), then per task rounds the softmax numerators, read straight
// from those scores, to bf16 and weights the values with VDPBF16PS, two slots per instruction (pair_values; torch's
// CPU flash attention rounds them to bf16 too). v2, which packages compiled before v3 call, scores every row first
// in a parallel pass of its own and weights the values in float, from kWidenRows rows with the values widened once
// for all rows; v1, which packages compiled before v2 call, scores each slot with a lane reduction per task. Both,
// and v3 elsewhere, run a row's tasks one after another on one thread, which lists the row's visible slots once.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#if defined(__AVX512BF16__)
namespace yggc {  // pair_scores.cpp
void query_pairs(const at::BFloat16* q, int64_t H, int64_t W, int64_t hd, int64_t qh, int64_t qw, int64_t qd,
                 int64_t G, int32_t* pairs);
void pair_scores_rows(const at::BFloat16* keys, int64_t slot_stride, int64_t S, int64_t hd, const int32_t* pairs,
                      int64_t R, float* scores, int64_t sp);
void pair_scores(const at::BFloat16* keys, int64_t keys_kv_stride, const at::BFloat16* values, int64_t values_kv_stride,
                 int64_t slot_stride, int64_t KV, int64_t S, int64_t hd, const int32_t* pairs, int64_t per_kv,
                 float* scores, int64_t sp, float* values_f);
}  // namespace yggc
#endif

namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kLanes = Vec::size();
constexpr int64_t kBlock = 4;  // vectors of head_dim held in registers at once
constexpr int64_t kHeads = 4;  // query heads per task
// From this many rows the pair-score path widens the values to float once for all rows, not per row. Below it the
// float copy costs more than it saves (measured on a Zen 4: docs/benchmarks/cpu-verify-curve.md).
constexpr int64_t kWidenRows = 32;  // v2 only: v3 reads bf16 values in pairs
constexpr int64_t kAheadPairs = 8;  // how far ahead v3's weighted values prefetch value rows (16 slots)

template <typename T>
inline Vec load_float(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return Vec::loadu(p);
  } else {
    Vec out;
    at::vec::load_fp32_from_bf16(p, out);
    return out;
  }
}

inline float lane_sum(Vec v) {
  return at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, v);
}

struct Task {
  const float* q;        // [ng, hd] the queries, as float
  int64_t ng, hd;        // heads in the task, head_dim
  const int32_t* slots;  // [n] visible slots, ascending
  int64_t n;
  int64_t run;           // slots 0..run-1 all visible (the cached prefix): slots[i] == i below it
  int64_t slot_stride;   // elements between consecutive slots of the key/value cache
  const float* scores;   // the first head's scores at every slot (heads head_scores apart), or null: score here
  int64_t head_scores;
  const float* values_f; // the key/value head's values widened to float [S, hd], or null: widen them here
};

// scores[h * stride + i] = q_h . keys[slots[i]] / sqrt(hd): per block of head_dim, independent lane products
// summed in a fixed tree, a fixed lane reduction per block, the scalar tail last.
template <typename T, int NG, bool FULL>
void scores_of(const Task& t, const T* keys, float* scores, int64_t stride) {
  const int64_t vec_end = t.hd - t.hd % kLanes;
  const float scale = 1.f / std::sqrt(static_cast<float>(t.hd));
  for (int64_t i = 0; i < t.n; ++i) {
    const T* k = keys + t.slots[i] * t.slot_stride;
    float s[kHeads] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t d0 = 0; d0 < vec_end; d0 += kBlock * kLanes) {
      Vec kv[kBlock];
      for (int64_t j = 0; j < kBlock; ++j)
        kv[j] = FULL || d0 + j * kLanes < vec_end ? load_float(k + d0 + j * kLanes) : Vec(0.f);
      for (int64_t h = 0; h < NG; ++h) {
        const float* q = t.q + h * t.hd + d0;
        Vec a[kBlock];
        for (int64_t j = 0; j < kBlock; ++j)
          a[j] = FULL || d0 + j * kLanes < vec_end ? Vec::loadu(q + j * kLanes) * kv[j] : Vec(0.f);
        s[h] += lane_sum((a[0] + a[1]) + (a[2] + a[3]));
      }
    }
    for (int64_t h = 0; h < NG; ++h) {
      for (int64_t d = vec_end; d < t.hd; ++d) s[h] += t.q[h * t.hd + d] * static_cast<float>(k[d]);
      scores[h * stride + i] = s[h] * scale;
    }
  }
}

// p = exp(score - max) per head, in place; the rows are padded to whole vectors so every exp is a full one.
void softmax_numerators(float* p, int64_t ng, int64_t n, int64_t stride) {
  for (int64_t h = 0; h < ng; ++h) {
    float* row = p + h * stride;
    std::fill(row + n, row + stride, -INFINITY);
    Vec top(-INFINITY);  // a maximum is the same in any order
    for (int64_t i = 0; i < n; i += kLanes) top = at::vec::maximum(top, Vec::loadu(row + i));
    const Vec vtop(at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return at::vec::maximum(x, y); }, top));
    for (int64_t i = 0; i < n; i += kLanes) (Vec::loadu(row + i) - vtop).exp_u20().store(row + i);
  }
}

// out[h][:] = sum_i p[h][i] * values[slots[i]][:] / sum_i p[h][i], slot by slot (lanes hold head_dim)
template <typename TV, typename T, int NG, bool FULL>
void weighted_values(const Task& t, const float* p, int64_t stride, const TV* values, int64_t value_stride, T* out,
                     int64_t out_stride) {
  float total[kHeads] = {0.f, 0.f, 0.f, 0.f};
  for (int64_t i = 0; i < t.n; ++i)  // heads interleaved: independent chains, each in slot order
    for (int64_t h = 0; h < NG; ++h) total[h] += p[h * stride + i];
  const int64_t vec_end = t.hd - t.hd % kLanes;
  for (int64_t d0 = 0; d0 < vec_end; d0 += kBlock * kLanes) {
    const int64_t nv = FULL ? kBlock : std::min<int64_t>(kBlock, (vec_end - d0) / kLanes);
    Vec acc[NG][kBlock];
    for (auto& head : acc)
      for (auto& a : head) a = Vec(0.f);
    for (int64_t i = 0; i < t.n; ++i) {
      const TV* row = values + t.slots[i] * value_stride + d0;
      Vec v[kBlock];
      for (int64_t j = 0; j < kBlock; ++j) v[j] = j < nv ? load_float(row + j * kLanes) : Vec(0.f);
      for (int64_t h = 0; h < NG; ++h) {
        const Vec ph(p[h * stride + i]);
        for (int64_t j = 0; j < kBlock; ++j) acc[h][j] = at::vec::fmadd(ph, v[j], acc[h][j]);
      }
    }
    for (int64_t h = 0; h < NG; ++h)
      for (int64_t j = 0; j < nv; ++j) {
        __at_align__ float lanes[kLanes];
        (acc[h][j] / Vec(total[h])).store(lanes);
        for (int64_t l = 0; l < kLanes; ++l) out[h * out_stride + d0 + j * kLanes + l] = static_cast<T>(lanes[l]);
      }
  }
  for (int64_t h = 0; h < NG; ++h)
    for (int64_t d = vec_end; d < t.hd; ++d) {
      float acc = 0.f;
      for (int64_t i = 0; i < t.n; ++i)
        acc = std::fma(p[h * stride + i], static_cast<float>(values[t.slots[i] * value_stride + d]), acc);
      out[h * out_stride + d] = static_cast<T>(acc / total[h]);
    }
}

#if defined(__AVX512BF16__)
// A head's scores at the row's visible slots i..i+15, -inf past the last: a load inside the row's cached prefix
// (slots 0..run-1 all visible), a gather beyond it.
inline Vec visible_scores(const float* from, const int32_t* slots, int64_t n, int64_t run, int64_t i) {
  if (i + kLanes <= run) return Vec::loadu(from + i);
  if (i >= n) return Vec(-INFINITY);
  const __mmask16 m = n - i >= kLanes ? 0xFFFF : static_cast<__mmask16>((1u << (n - i)) - 1);
  return _mm512_mask_i32gather_ps(_mm512_set1_ps(-INFINITY), m, _mm512_maskz_loadu_epi32(m, slots + i), from, 4);
}

// v3's softmax numerators where pair_scores.cpp scored the row, read straight from its scores: exp(score - max)
// over the row's visible slots in order (0 past them, up to whole blocks of 32), rounded to bf16 in pairs
// (pp [NG, pstride]), and each head's sum as rounded, in 16 lanes (total).
template <int NG>
void pair_numerators(const Task& t, int32_t* pp, int64_t pstride, float* total) {
  const int64_t n = t.n, run = t.run, n_pairs = (n + 1) / 2;
  const float* from[NG];
  Vec top[NG];  // the heads side by side: independent chains
  for (int64_t h = 0; h < NG; ++h) from[h] = t.scores + h * t.head_scores, top[h] = Vec(-INFINITY);
  for (int64_t i = 0; i < n; i += kLanes)  // a maximum is the same in any order
    for (int64_t h = 0; h < NG; ++h) top[h] = at::vec::maximum(top[h], visible_scores(from[h], t.slots, n, run, i));
  __m512 sum[NG];
  for (int64_t h = 0; h < NG; ++h) {
    top[h] = Vec(at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return at::vec::maximum(x, y); }, top[h]));
    sum[h] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < n_pairs; i += 16)  // 32 numerators -> 16 pairs, in order
    for (int64_t h = 0; h < NG; ++h) {
      const Vec lo = (visible_scores(from[h], t.slots, n, run, 2 * i) - top[h]).exp_u20();
      const Vec hi = (visible_scores(from[h], t.slots, n, run, 2 * i + kLanes) - top[h]).exp_u20();
      const __m512bh b = _mm512_cvtne2ps_pbh(hi, lo);
      _mm512_storeu_si512(pp + h * pstride + i, (__m512i)b);
      const __m512i l = _mm512_slli_epi32((__m512i)b, 16), u = _mm512_and_si512((__m512i)b, _mm512_set1_epi32(-65536));
      sum[h] = _mm512_add_ps(_mm512_add_ps(sum[h], _mm512_castsi512_ps(l)), _mm512_castsi512_ps(u));
    }
  for (int64_t h = 0; h < NG; ++h) total[h] = _mm512_reduce_add_ps(sum[h]);
}

// v3's weighted values for bf16 where pair_scores.cpp scored the row: VDPBF16PS over the visible slots in pairs,
// (slots[2i], slots[2i + 1]) from the start (an odd last one paired with itself at p = 0), two value rows
// interleaved per pair, divided by the numerators' total. Every pair is the same instruction sequence wherever its
// slots sit, so the bits depend only on the row's visible keys and values, in order.
template <int NG, int NX>  // NX: 32-column halves of head_dim per pass over the slots
void pair_values_as(const Task& t, const int32_t* pp, int64_t pstride, const float* total,
                    const at::BFloat16* values, at::BFloat16* out, int64_t out_stride) {
  const int64_t n_pairs = (t.n + 1) / 2;
  const __m512i lo_dims = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
  const __m512i hi_dims = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64_t d0 = 0; d0 < t.hd; d0 += 32 * NX) {
    __m512 acc[NG][2 * NX];
    for (auto& head : acc)
      for (auto& a : head) a = _mm512_setzero_ps();
    for (int64_t i = 0; i < n_pairs; ++i) {
      const int64_t a = t.slots[2 * i], b = 2 * i + 1 < t.n ? t.slots[2 * i + 1] : a;
      if (2 * (i + kAheadPairs) + 1 < t.n)  // the value rows kAheadPairs pairs on, into L1 (no effect on the sums)
        for (int64_t k = 0; k < 2; ++k)
          for (int64_t c = 0; c < NX; ++c)
            _mm_prefetch(reinterpret_cast<const char*>(values + t.slots[2 * (i + kAheadPairs) + k] * t.slot_stride +
                                                       d0 + 32 * c), _MM_HINT_T0);
      __m512i x[2 * NX];  // pair j of x[2c] / x[2c + 1]: column 8 * (j / 4) + j % 4 (+ 4) of half c, from slots a, b
      for (int64_t c = 0; c < NX; ++c) {
        const __m512i ra = _mm512_loadu_si512(values + a * t.slot_stride + d0 + 32 * c);
        const __m512i rb = _mm512_loadu_si512(values + b * t.slot_stride + d0 + 32 * c);
        x[2 * c] = _mm512_unpacklo_epi16(ra, rb);
        x[2 * c + 1] = _mm512_unpackhi_epi16(ra, rb);
      }
      for (int64_t h = 0; h < NG; ++h) {
        const __m512bh ph = (__m512bh)_mm512_set1_epi32(pp[h * pstride + i]);
        for (int64_t j = 0; j < 2 * NX; ++j) acc[h][j] = _mm512_dpbf16_ps(acc[h][j], ph, (__m512bh)x[j]);
      }
    }
    for (int64_t h = 0; h < NG; ++h)
      for (int64_t c = 0; c < NX; ++c) {
        __at_align__ float cols[32];
        const __m512 scale = _mm512_set1_ps(total[h]);
        _mm512_store_ps(cols, _mm512_div_ps(_mm512_permutex2var_ps(acc[h][2 * c], lo_dims, acc[h][2 * c + 1]), scale));
        _mm512_store_ps(cols + 16, _mm512_div_ps(_mm512_permutex2var_ps(acc[h][2 * c], hi_dims, acc[h][2 * c + 1]), scale));
        for (int64_t d = 0; d < 32; ++d) out[h * out_stride + d0 + 32 * c + d] = static_cast<at::BFloat16>(cols[d]);
      }
  }
}

template <int NG>
void pair_values(const Task& t, int32_t* pp, int64_t pstride, const at::BFloat16* values, at::BFloat16* out,
                 int64_t out_stride) {
  float total[kHeads];
  pair_numerators<NG>(t, pp, pstride, total);
  if (t.hd % 64 == 0) return pair_values_as<NG, 2>(t, pp, pstride, total, values, out, out_stride);
  pair_values_as<NG, 1>(t, pp, pstride, total, values, out, out_stride);
}
#endif

template <typename T, int NG, bool FULL>
void attend_task_as(const Task& t, const T* keys, const T* values, float* p, int64_t stride, T* out, int64_t out_stride) {
  if (t.scores != nullptr) {
    for (int64_t h = 0; h < NG; ++h) {
      const float* from = t.scores + h * t.head_scores;
      std::copy(from, from + t.run, p + h * stride);  // the cached prefix at once
      for (int64_t i = t.run; i < t.n; ++i) p[h * stride + i] = from[t.slots[i]];
    }
  } else {
    scores_of<T, NG, FULL>(t, keys, p, stride);
  }
  softmax_numerators(p, NG, t.n, stride);
  if (t.values_f != nullptr) {
    weighted_values<float, T, NG, FULL>(t, p, stride, t.values_f, t.hd, out, out_stride);
  } else {
    weighted_values<T, T, NG, FULL>(t, p, stride, values, t.slot_stride, out, out_stride);
  }
}

// The loops unrolled for the task's head count, and without per-vector checks where head_dim is whole blocks.
template <typename T>
void attend_task(const Task& t, const T* keys, const T* values, float* p, int64_t stride, T* out, int64_t out_stride) {
  using Fn = void (*)(const Task&, const T*, const T*, float*, int64_t, T*, int64_t);
  static constexpr Fn partial[kHeads] = {attend_task_as<T, 1, false>, attend_task_as<T, 2, false>,
                                         attend_task_as<T, 3, false>, attend_task_as<T, 4, false>};
  static constexpr Fn full[kHeads] = {attend_task_as<T, 1, true>, attend_task_as<T, 2, true>,
                                      attend_task_as<T, 3, true>, attend_task_as<T, 4, true>};
  (t.hd % (kBlock * kLanes) == 0 ? full : partial)[t.ng - 1](t, keys, values, p, stride, out, out_stride);
}

// The slots a mask row [S] (elements ms apart) sees, ascending, into slots (room for S + 16) -> their count
int64_t visible_slots(const bool* mask, int64_t ms, int64_t S, int32_t* slots) {
  int64_t n = 0, s = 0;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  if (ms == 1)
    for (const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); s + 16 <= S;
         s += 16) {
      const __mmask16 seen = _mm_test_epi8_mask(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mask + s)),
                                                _mm_set1_epi8(1));
      _mm512_storeu_si512(slots + n, _mm512_maskz_compress_epi32(seen, _mm512_add_epi32(lanes, _mm512_set1_epi32(s))));
      n += __builtin_popcount(seen);
    }
#endif
  for (; s < S; ++s)
    if (mask[s * ms]) slots[n++] = static_cast<int32_t>(s);
  return n;
}

// slots 0..run-1 all visible (the cached prefix) -> run, for a row's n visible slots, ascending: slots[i] - i never
// falls, so the first i with slots[i] != i is found by bisection
inline int64_t prefix_run(const int32_t* slots, int64_t n) {
  int64_t lo = 0, hi = n;  // slots[i] == i for every i < lo; slots[i] != i for every i >= hi
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (slots[mid] == mid) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// a row of score_all_rows: S slots in whole blocks of 16
inline int64_t score_row(int64_t S) { return (S + 15) / 16 * 16; }

// a task's row of scores or numerators per head: S slots padded to whole blocks of 32 (v3's bf16 pairs), one more
inline int64_t task_row(int64_t S) { return (S / 32 + 1) * 32; }

// bf16 on AVX512-BF16, head_dim a multiple of 32: every row-head's scores at every slot (pair_scores.cpp), and from
// kWidenRows rows the values widened once; elsewhere both stay undefined and each task scores and widens for itself.
void score_all_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, at::Tensor& scores,
                    at::Tensor& values_f, bool widen) {
#if defined(__AVX512BF16__)
  const int64_t H = q.size(0), W = q.size(1), hd = q.size(2), KV = keys.size(0), S = keys.size(1);
  if (q.scalar_type() != at::kBFloat16 || hd % 32 != 0) return;
  const int64_t sp = score_row(S);
  std::vector<int32_t> pairs(H * W * hd / 2);
  yggc::query_pairs(q.const_data_ptr<at::BFloat16>(), H, W, hd, q.stride(0), q.stride(1), q.stride(2), 1,
                    pairs.data());
  scores = at::empty({H * W, sp}, q.options().dtype(at::kFloat));
  if (widen) values_f = at::empty({KV, S, hd}, q.options().dtype(at::kFloat));
  yggc::pair_scores(keys.const_data_ptr<at::BFloat16>(), keys.stride(0), values.const_data_ptr<at::BFloat16>(),
                    values.stride(0), keys.stride(1), KV, S, hd, pairs.data(), H / KV * W,
                    scores.mutable_data_ptr<float>(), sp,
                    values_f.defined() ? values_f.mutable_data_ptr<float>() : nullptr);
#endif
}

template <typename T>
void attend_all(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask,
                at::Tensor& out, int version) {
  const int64_t H = q.size(0), W = q.size(1), hd = q.size(2), KV = keys.size(0), S = keys.size(1);
  const int64_t G = H / KV, groups = (G + kHeads - 1) / kHeads, per_row = KV * groups;
  const T* qp = q.const_data_ptr<T>();
  const T* kp = keys.const_data_ptr<T>();
  const T* vp = values.const_data_ptr<T>();
  const bool* mp = mask.const_data_ptr<bool>();
  const int64_t qh = q.stride(0), qw = q.stride(1), qd = q.stride(2), mw = mask.stride(0), ms = mask.stride(1);
  T* op = out.mutable_data_ptr<T>();
  const int64_t stride = task_row(S);
  const int64_t sp = score_row(S);
  at::Tensor scores, values_f;  // [H * W, sp], [KV, S, hd] float
  if (version >= 2) score_all_rows(q, keys, values, scores, values_f, version == 2 && W >= kWidenRows);
  const float* sc = scores.defined() ? scores.const_data_ptr<float>() : nullptr;
  const float* vf = values_f.defined() ? values_f.const_data_ptr<float>() : nullptr;
  at::parallel_for(0, W * per_row, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(kHeads * hd), p(kHeads * stride);
    std::vector<int32_t> slots(S + 16);
    int64_t n = 0, run = 0, row = -1;  // the visible slots of `row`, shared by its tasks
    for (int64_t task = begin; task < end; ++task) {
      const int64_t w = task / per_row, group = task % per_row % groups, kv = task % per_row / groups;
      const int64_t h0 = kv * G + group * kHeads, ng = std::min(kHeads, G - group * kHeads);
      if (w != row) {
        n = visible_slots(mp + w * mw, ms, S, slots.data());
        run = prefix_run(slots.data(), n);
        row = w;
      }
      T* o = op + (h0 * W + w) * hd;  // out [H, W, hd]: head h at o + (h - h0) * W * hd
      if (n == 0) {  // a row that sees nothing (padding) reads as zeros
        for (int64_t h = 0; h < ng; ++h) std::fill(o + h * W * hd, o + h * W * hd + hd, static_cast<T>(0.f));
        continue;
      }
      if (sc == nullptr)  // the task scores its slots itself, from the queries as float
        for (int64_t h = 0; h < ng; ++h)
          for (int64_t d = 0; d < hd; ++d) qf[h * hd + d] = static_cast<float>(qp[(h0 + h) * qh + w * qw + d * qd]);
      const Task t{qf.data(), ng, hd, slots.data(), n, run, keys.stride(1), sc ? sc + (h0 * W + w) * sp : nullptr,
                   W * sp, vf ? vf + kv * S * hd : nullptr};
      attend_task<T>(t, kp + kv * keys.stride(0), vp + kv * values.stride(0), p.data(), stride, o, W * hd);
    }
  });
}

#if defined(__AVX512BF16__)
// v3 for bf16 on AVX512-BF16 (head_dim a multiple of 32), in one parallel region: a unit is a key/value head and a
// run of rows; it scores those rows' query heads at every slot (pair_scores.cpp), on its own thread, so the scores
// are still in that core's cache when it weighs the values row by row. Each row-head's scores, numerators and
// weighted values are the same instruction sequences whichever unit, thread or row count they fall in.
void attend_units(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask,
                  at::Tensor& out) {
  const int64_t H = q.size(0), W = q.size(1), hd = q.size(2), KV = keys.size(0), S = keys.size(1), G = H / KV;
  const int64_t sp = score_row(S), stride = task_row(S), slot_stride = keys.stride(1);
  using Fn = void (*)(const Task&, int32_t*, int64_t, const at::BFloat16*, at::BFloat16*, int64_t);
  static constexpr Fn by_heads[kHeads] = {pair_values<1>, pair_values<2>, pair_values<3>, pair_values<4>};
  // buffers left uninitialized: every element read is written first
  const auto pairs = std::make_unique_for_overwrite<int32_t[]>(H * W * hd / 2);  // [KV, W, G] row-heads
  yggc::query_pairs(q.const_data_ptr<at::BFloat16>(), H, W, hd, q.stride(0), q.stride(1), q.stride(2), G,
                    pairs.get());
  const auto slots = std::make_unique_for_overwrite<int32_t[]>(W * S + 16);  // every row's visible slots, S apart
  std::vector<int64_t> seen(W), run(W);
  for (int64_t w = 0; w < W; ++w) {
    seen[w] = visible_slots(mask.const_data_ptr<bool>() + w * mask.stride(0), mask.stride(1), S, slots.get() + w * S);
    run[w] = prefix_run(slots.get() + w * S, seen[w]);
  }
  const auto scores = std::make_unique_for_overwrite<float[]>(H * W * sp);  // [KV, W, G] row-heads, sp apart
  const at::BFloat16* kp = keys.const_data_ptr<at::BFloat16>();
  const at::BFloat16* vp = values.const_data_ptr<at::BFloat16>();
  at::BFloat16* op = out.mutable_data_ptr<at::BFloat16>();
  // row runs per key/value head: two units a thread where the rows allow. Where they do not (a decode step's one
  // row), the scores come first in a pass of their own, blocks of slots shared out evenly: there a unit's time is
  // mostly its keys and values coming from memory, and a thread with one unit more would read a third more.
  const int64_t threads = at::get_num_threads(), runs = std::clamp<int64_t>((2 * threads + KV - 1) / KV, 1, W);
  const bool scored = KV * runs < 2 * threads;
  if (scored)
    yggc::pair_scores(kp, keys.stride(0), nullptr, 0, slot_stride, KV, S, hd, pairs.get(), W * G, scores.get(), sp,
                      nullptr);
  at::parallel_for(0, KV * runs, 1, [&](int64_t begin, int64_t end) {
    const auto pp = std::make_unique_for_overwrite<int32_t[]>(kHeads * stride / 2);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t kv = unit / runs, w0 = W * (unit % runs) / runs, w1 = W * (unit % runs + 1) / runs;
      const int64_t first = (kv * W + w0) * G;  // the unit's first row-head
      if (!scored)
        yggc::pair_scores_rows(kp + kv * keys.stride(0), slot_stride, S, hd, pairs.get() + first * hd / 2,
                               (w1 - w0) * G, scores.get() + first * sp, sp);
      for (int64_t w = w0; w < w1; ++w)
        for (int64_t g0 = 0; g0 < G; g0 += kHeads) {
          const int64_t ng = std::min(kHeads, G - g0);
          at::BFloat16* o = op + ((kv * G + g0) * W + w) * hd;  // out [H, W, hd]
          if (seen[w] == 0) {  // a row that sees nothing (padding) reads as zeros
            for (int64_t h = 0; h < ng; ++h) std::fill(o + h * W * hd, o + h * W * hd + hd, at::BFloat16(0.f));
            continue;
          }
          const Task t{nullptr, ng, hd, slots.get() + w * S, seen[w], run[w], slot_stride,
                       scores.get() + ((kv * W + w) * G + g0) * sp, sp, nullptr};
          by_heads[ng - 1](t, pp.get(), stride / 2, vp + kv * values.stride(0), o, W * hd);
        }
    }
  });
}
#endif

}  // namespace

namespace yggc {

namespace {

// version 1: every task scores its own slots with lane reductions; 2: pair_scores.cpp's scores where the CPU and
// layout allow, float weighted values; 3: as 2, with bf16 weighted values in slot pairs there (pair_values)
at::Tensor attend(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask,
                  int version) {
  // q [H, W, hd]; keys, values [KV, S, hd] (slots may be strided views of a longer cache); mask [W, S] bool
  TORCH_CHECK(q.dim() == 3 && keys.dim() == 3 && values.dim() == 3 && mask.dim() == 2, "attend_rows: bad ranks");
  TORCH_CHECK(keys.stride(2) == 1 && values.stride(2) == 1 && keys.stride(1) == values.stride(1),
              "attend_rows: keys and values need contiguous head_dim and equal slot strides");
  TORCH_CHECK(mask.size(0) == q.size(1) && mask.size(1) == keys.size(1) && values.size(1) == keys.size(1),
              "attend_rows: mask must be [rows, slots]");
  TORCH_CHECK(q.size(0) % keys.size(0) == 0 && q.size(2) == keys.size(2), "attend_rows: head counts or dims differ");
  TORCH_CHECK(q.scalar_type() == keys.scalar_type() && q.scalar_type() == values.scalar_type(),
              "attend_rows: q, keys and values need one dtype");
  // q and mask are read through their strides: a copy per call costs more dispatch than the copy is worth
  auto out = at::empty(q.sizes(), q.options());  // contiguous [H, W, hd]
  if (q.scalar_type() == at::kBFloat16) {
#if defined(__AVX512BF16__)
    if (version >= 3 && q.size(2) % 32 == 0) {
      attend_units(q, keys, values, mask, out);
      return out;
    }
#endif
    attend_all<at::BFloat16>(q, keys, values, mask, out, version);
  } else {
    TORCH_CHECK(q.scalar_type() == at::kFloat, "attend_rows: float32 or bfloat16");
    attend_all<float>(q, keys, values, mask, out, version);
  }
  return out;
}

}  // namespace

// the op yggc::attend_rows_v3 (registered by register_ops.cpp)
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask) {
  return attend(q, keys, values, mask, 3);
}

// yggc::attend_rows_v2 and v1, which packages compiled before v3 and v2 call
at::Tensor attend_rows_v2(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask) {
  return attend(q, keys, values, mask, 2);
}

at::Tensor attend_rows_v1(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask) {
  return attend(q, keys, values, mask, 1);
}

}  // namespace yggc
