// Masked GQA attention for the compiled CPU graphs: the op yggc::attend_rows_v2.
//
// A task is one query row and up to kHeads query heads that share a key/value head (they share the row's
// mask and every key and value load). Every sum over cache slots runs slot by slot, in slot order, over the
// row's visible slots only; every per-slot operation is the same instruction sequence whichever slot or
// lane it lands on. So a row's result is bit-identical whatever the number of rows in the call and
// wherever its visible keys sit in the cache: the tree-verify and the autoregressive layouts of the same
// keys give the same bits.
//
// bf16 on a CPU with AVX512-BF16 (head_dim a multiple of 32): the scores of every row come first, from
// pair_scores.cpp (slots in the lanes, keys loaded once for all rows), and a task reads its visible slots' scores;
// from kWidenRows rows the values are widened to float once for all rows (v2; v1, which packages compiled before v2
// call, scores each slot with a lane reduction per task).
#include <torch/library.h>
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX512BF16__)
namespace yggc {  // pair_scores.cpp
void query_pairs(const at::BFloat16* q, int64_t H, int64_t W, int64_t hd, int64_t qh, int64_t qw, int64_t qd,
                 int32_t* pairs);
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
// float copy costs more than it saves (Zen 4, 2 threads: 8-16 rows 4-11% faster; 32-64 rows alike).
constexpr int64_t kWidenRows = 32;

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

template <typename T, int NG, bool FULL>
void attend_task_as(const Task& t, const T* keys, const T* values, float* p, int64_t stride, T* out, int64_t out_stride) {
  if (t.scores != nullptr) {
    for (int64_t h = 0; h < NG; ++h)
      for (int64_t i = 0; i < t.n; ++i) p[h * stride + i] = t.scores[h * t.head_scores + t.slots[i]];
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

// a row of score_all_rows: S slots in whole blocks of 16
inline int64_t score_row(int64_t S) { return (S + 15) / 16 * 16; }

// bf16 on AVX512-BF16, head_dim a multiple of 32: every row-head's scores at every slot (pair_scores.cpp), and from
// kWidenRows rows the values widened once; elsewhere both stay undefined and each task scores and widens for itself.
void score_all_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, at::Tensor& scores,
                    at::Tensor& values_f) {
#if defined(__AVX512BF16__)
  const int64_t H = q.size(0), W = q.size(1), hd = q.size(2), KV = keys.size(0), S = keys.size(1);
  if (q.scalar_type() != at::kBFloat16 || hd % 32 != 0) return;
  const int64_t sp = score_row(S);
  std::vector<int32_t> pairs(H * W * hd / 2);
  yggc::query_pairs(q.const_data_ptr<at::BFloat16>(), H, W, hd, q.stride(0), q.stride(1), q.stride(2), pairs.data());
  scores = at::empty({H * W, sp}, q.options().dtype(at::kFloat));
  if (W >= kWidenRows) values_f = at::empty({KV, S, hd}, q.options().dtype(at::kFloat));
  yggc::pair_scores(keys.const_data_ptr<at::BFloat16>(), keys.stride(0), values.const_data_ptr<at::BFloat16>(),
                    values.stride(0), keys.stride(1), KV, S, hd, pairs.data(), H / KV * W,
                    scores.mutable_data_ptr<float>(), sp,
                    values_f.defined() ? values_f.mutable_data_ptr<float>() : nullptr);
#endif
}

template <typename T>
void attend_all(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask,
                at::Tensor& out, bool score_pairs) {
  const int64_t H = q.size(0), W = q.size(1), hd = q.size(2), KV = keys.size(0), S = keys.size(1);
  const int64_t G = H / KV, groups = (G + kHeads - 1) / kHeads;
  const T* qp = q.const_data_ptr<T>();
  const T* kp = keys.const_data_ptr<T>();
  const T* vp = values.const_data_ptr<T>();
  const bool* mp = mask.const_data_ptr<bool>();
  const int64_t qh = q.stride(0), qw = q.stride(1), qd = q.stride(2), mw = mask.stride(0), ms = mask.stride(1);
  T* op = out.mutable_data_ptr<T>();
  const int64_t stride = S + kLanes;  // a head's row of scores, padded to whole vectors
  const int64_t sp = score_row(S);
  at::Tensor scores, values_f;  // [H * W, sp], [KV, S, hd] float
  if (score_pairs) score_all_rows(q, keys, values, scores, values_f);
  const float* sc = scores.defined() ? scores.const_data_ptr<float>() : nullptr;
  const float* vf = values_f.defined() ? values_f.const_data_ptr<float>() : nullptr;
  at::parallel_for(0, KV * groups * W, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> qf(kHeads * hd), p(kHeads * stride);
    std::vector<int32_t> slots(S);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t w = task % W, group = task / W % groups, kv = task / W / groups;
      const int64_t h0 = kv * G + group * kHeads, ng = std::min(kHeads, G - group * kHeads);
      int64_t n = 0;
      for (int64_t s = 0; s < S; ++s)
        if (mp[w * mw + s * ms]) slots[n++] = static_cast<int32_t>(s);
      T* o = op + (h0 * W + w) * hd;  // out [H, W, hd]: head h at o + (h - h0) * W * hd
      if (n == 0) {  // a row that sees nothing (padding) reads as zeros
        for (int64_t h = 0; h < ng; ++h) std::fill(o + h * W * hd, o + h * W * hd + hd, static_cast<T>(0.f));
        continue;
      }
      if (sc == nullptr)  // the task scores its slots itself, from the queries as float
        for (int64_t h = 0; h < ng; ++h)
          for (int64_t d = 0; d < hd; ++d) qf[h * hd + d] = static_cast<float>(qp[(h0 + h) * qh + w * qw + d * qd]);
      const Task t{qf.data(), ng, hd, slots.data(), n, keys.stride(1), sc ? sc + (h0 * W + w) * sp : nullptr, W * sp,
                   vf ? vf + kv * S * hd : nullptr};
      attend_task<T>(t, kp + kv * keys.stride(0), vp + kv * values.stride(0), p.data(), stride, o, W * hd);
    }
  });
}

}  // namespace

namespace yggc {

namespace {

// score_pairs: v2 (pair_scores.cpp's scores where the CPU and layout allow), else v1's arithmetic
at::Tensor attend(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask,
                  bool score_pairs) {
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
    attend_all<at::BFloat16>(q, keys, values, mask, out, score_pairs);
  } else {
    TORCH_CHECK(q.scalar_type() == at::kFloat, "attend_rows: float32 or bfloat16");
    attend_all<float>(q, keys, values, mask, out, score_pairs);
  }
  return out;
}

}  // namespace

// the op yggc::attend_rows_v2 (registered by register_ops.cpp)
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask) {
  return attend(q, keys, values, mask, true);
}

// yggc::attend_rows_v1, which packages compiled before v2 call: each task scores its slots with lane reductions
at::Tensor attend_rows_v1(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values, const at::Tensor& mask) {
  return attend(q, keys, values, mask, false);
}

}  // namespace yggc
